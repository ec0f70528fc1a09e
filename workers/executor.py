"""The coordinator's side of parallel search trials: a `synthesis.executor.TrialExecutor` on Celery sub-tasks.

A trial sent elsewhere is a `trial_tasks` row (the request, then the outcome) plus a `netsynth.trial(row id)`
message on the job's queue; no Celery result backend is involved, and the trained weights go through the blob
store. The executor counts the worker processes serving the queue that are idle now (Celery's remote
control); with none, the search stays in-process. A sub-task no worker takes within `start_timeout_s`, or
whose worker stops reporting, comes back as a failed trial, so the search never waits on it for long.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from sqlalchemy import select, update

from infra.broker import TRIAL, enqueue_trial, filesystem_dir
from store.db import session_scope
from store.models import TrialState, TrialTask
from synthesis.executor import TrialOutcome, TrialRequest
from synthesis.trial import TrialResult
from workers.context import Context

log = logging.getLogger(__name__)

GRACE_S = 60.0
"""How long past its time limit a running sub-task may stay silent before its trial counts as failed."""


def idle_processes(sender: Celery, queue: str, ours: set[str], timeout: float = 1.0) -> int:
    """Worker pool processes serving `queue` that run nothing now, or one of `ours` (row ids of this search's
    sub-tasks); 0 when the broker has no remote control (the embedded filesystem broker) or none answers."""
    if filesystem_dir(str(sender.conf.broker_url or "")) is not None:
        return 0
    try:
        queues = sender.control.inspect(timeout=timeout).active_queues() or {}
        nodes = [n for n, qs in queues.items() if any(q.get("name") == queue for q in qs)]
        if not nodes:
            return 0
        inspect = sender.control.inspect(destination=nodes, timeout=2 * timeout, limit=len(nodes))
        stats, active = inspect.stats() or {}, inspect.active() or {}
    except Exception:  # the count is advisory: without it the search runs in-process
        log.warning("could not count the workers of queue %s", queue, exc_info=True)
        return 0
    total = sum(int(s.get("pool", {}).get("max-concurrency", 1)) for s in stats.values())
    busy = sum(1 for tasks in active.values() for t in tasks
               if not (t.get("name") == TRIAL and next(iter(t.get("args") or [""])) in ours))
    log.info("queue %s: %d worker processes, %d busy with other work", queue, total, busy)
    return max(total - busy, 0)


@dataclass
class _Sent:
    index: int
    sent: float  # monotonic seconds when sent
    time_limit: float
    running_since: float | None = None


class CeleryExecutor:
    """Runs a job attempt's search trials as `netsynth.trial` sub-tasks on the other workers of its queue."""

    def __init__(self, ctx: Context, sender: Celery, job_id: uuid.UUID, attempt: int, queue: str, worker: str,
                 start_timeout_s: float = 15.0, refresh_s: float = 30.0,
                 count: Callable[[set[str]], int] | None = None) -> None:
        self.ctx, self.sender, self.job_id, self.attempt, self.queue = ctx, sender, job_id, attempt, queue
        self.worker, self.start_timeout_s, self.refresh_s = worker, start_timeout_s, refresh_s
        self._count = count or (lambda ours: idle_processes(sender, queue, ours))
        self._sent: dict[uuid.UUID, _Sent] = {}
        self._failed: list[TrialOutcome] = []
        self._capacity, self._checked, self._busy_found = 0, -float("inf"), 0

    @property
    def local_worker(self) -> str:
        """The coordinator's worker."""
        return self.worker

    def free_slots(self) -> int:
        """Idle processes of the queue (counted every `refresh_s` seconds) less the sub-tasks still waiting."""
        if time.monotonic() - self._checked >= self.refresh_s:
            self._checked = time.monotonic()
            self._capacity, self._busy_found = self._count({str(i) for i in self._sent}), 0
        return max(self._capacity - self._busy_found - len(self._sent), 0)

    def submit(self, request: TrialRequest) -> None:
        """Store the request and send its sub-task to the queue."""
        with session_scope(self.ctx.factory) as session:
            row = TrialTask(job_id=self.job_id, attempt=self.attempt, trial_index=request.index,
                            request=request.to_dict())
            session.add(row)
            session.flush()
            row_id = row.id
        seconds = max(request.not_after - time.time(), 1.0)
        self._sent[row_id] = _Sent(request.index, time.monotonic(), float(request.config.get("time_limit_s") or
                                                                          seconds))
        try:
            enqueue_trial(self.sender, str(row_id), self.queue, seconds)
        except Exception as exc:  # the broker is down: the trial fails, the job goes on
            self._give_up(row_id, f"the sub-task could not be sent: {exc}")

    def poll(self) -> list[TrialOutcome]:
        """Outcomes of the sub-tasks that ended; failed ones for those no worker took or whose worker went silent."""
        outcomes, self._failed = self._failed, []
        if not self._sent:
            return outcomes
        with session_scope(self.ctx.factory) as session:
            rows = list(session.scalars(select(TrialTask).where(TrialTask.id.in_(list(self._sent)))))
            states = {r.id: (r.state, r.outcome, r.weights_key, r.worker) for r in rows}
        now = time.monotonic()
        for row_id, (state, outcome, key, worker) in states.items():
            sent = self._sent[row_id]
            if state is TrialState.DONE and outcome is not None:
                del self._sent[row_id]
                outcomes.append(TrialOutcome.from_dict(outcome, self._loader(key) if key else None))
            elif state is TrialState.QUEUED and now - sent.sent > self.start_timeout_s:
                self._busy_found += 1  # a process counted idle was not: count it busy until the next count
                self._give_up(row_id, f"no worker took the sub-task within {self.start_timeout_s:.0f} s")
            elif state is TrialState.RUNNING:
                sent.running_since = sent.running_since or now
                if now - sent.running_since > sent.time_limit + GRACE_S:
                    self._give_up(row_id, f"its worker {worker} stopped reporting")
            elif state is TrialState.CANCELLED:
                self._give_up(row_id, "the sub-task was cancelled")
        failed, self._failed = self._failed, []
        return outcomes + failed

    def _give_up(self, row_id: uuid.UUID, reason: str) -> None:
        sent = self._sent.pop(row_id)
        with session_scope(self.ctx.factory) as session:
            session.execute(update(TrialTask).where(TrialTask.id == row_id, TrialTask.state != TrialState.DONE)
                            .values(state=TrialState.CANCELLED))
        self._failed.append(TrialOutcome(sent.index, TrialResult(status="failed", reason=reason)))

    def cancel(self) -> None:
        """Cancel every sub-task of this attempt that has not reported; their workers stop at their next epoch."""
        with session_scope(self.ctx.factory) as session:
            session.execute(update(TrialTask).where(
                TrialTask.job_id == self.job_id, TrialTask.attempt == self.attempt,
                TrialTask.state.in_([TrialState.QUEUED, TrialState.RUNNING])).values(state=TrialState.CANCELLED))
        self._sent.clear()

    def _loader(self, key: str) -> Callable[[], dict[str, Any]]:
        def load() -> dict[str, Any]:
            from core import checkpoint

            with self.ctx.blobs.open(key) as stream:
                return checkpoint.from_bytes(stream.read()).variables
        return load

    def discard_weights(self) -> None:
        """Delete the weights this attempt's sub-tasks stored (the search has loaded the one it keeps)."""
        with session_scope(self.ctx.factory) as session:
            rows = list(session.scalars(select(TrialTask).where(TrialTask.job_id == self.job_id,
                                                                TrialTask.attempt == self.attempt,
                                                                TrialTask.weights_key.is_not(None))))
            for row in rows:
                if row.weights_key is not None:
                    self.ctx.blobs.delete(row.weights_key)
                row.weights_key = None


def save_weights(ctx: Context, job_id: uuid.UUID, row_id: uuid.UUID, weights: bytes) -> str:
    """Store a sub-task's trained weights (core checkpoint bytes) in the blob store; return the key."""
    return ctx.blobs.put(io.BytesIO(weights), f"trials/{job_id}/{row_id}.safetensors")
