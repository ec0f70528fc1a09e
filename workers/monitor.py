"""Synthesis progress written to the job's row and event log, with a heartbeat that holds the job's lease.

The heartbeat thread renews the lease every third of its length whatever synthesis is doing (compiling,
evaluating), so only a dead process loses its job. It also notices cancellation and a lease taken over by
another worker; synthesis learns of both at its next call (it calls before every training step, and the
monitor reads the job's row at most every `min_interval_s`), which raises `Stopped`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.jobs import append_event
from store.leases import LeaseLost, renew
from store.metering import meter_coordinator
from synthesis.progress import Cancelled, OutOfTime, Stopped

log = logging.getLogger(__name__)

DB_RETRY_S = 60.0
"""How long a progress write keeps trying a database that does not answer (a restart takes seconds)."""
DB_RETRY_PAUSE_S = 0.5


class JobCancelled(Cancelled):
    """The job's owner asked to cancel it: synthesis delivers its best model so far, if it has one."""


class LeaseTaken(Stopped):
    """Another worker now holds the job (this one was presumed dead): stop without touching the job."""


class JobMonitor:
    """A `synthesis.progress.Monitor` for one job, used as a context manager that runs the heartbeat."""

    def __init__(self, factory: sessionmaker[Session], job_id: uuid.UUID, owner: str, lease_s: float,
                 min_interval_s: float = 0.5, spent_before: float = 0.0) -> None:
        self.factory, self.job_id, self.owner, self.lease_s = factory, job_id, owner, lease_s
        self.min_interval_s = min_interval_s
        self.started = time.monotonic()
        self.spent_before = spent_before  # seconds of the job's earlier attempts (`store.metering.coordinator_seconds`)
        self._last = -float("inf")
        self._stage: str | None = None
        self._fraction = 0.0
        self._cancelled = self._lost = self._time_up = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> JobMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def elapsed(self) -> float:
        """Seconds the job's own attempts have spent: earlier attempts plus this one (one device per job). Its
        device-seconds add those of its trials on other workers, which their tasks record (`store.metering`)."""
        return self.spent_before + time.monotonic() - self.started

    def _write(self, payload: tuple[str, Mapping[str, Any]] | None = None, *, with_progress: bool = True) -> None:
        """Renew the lease, record progress (and an event); note a cancellation or a lost lease. A database that
        does not answer (restarting, or a network blip) is tried again for up to `DB_RETRY_S` seconds: synthesis
        waits rather than failing, and no event is lost."""
        deadline = time.monotonic() + DB_RETRY_S
        while True:
            try:
                return self._write_once(payload, with_progress)
            except OperationalError:
                if time.monotonic() >= deadline:
                    raise
                log.warning("job %s: the database does not answer; trying again", self.job_id)
                time.sleep(DB_RETRY_PAUSE_S)

    def _write_once(self, payload: tuple[str, Mapping[str, Any]] | None, with_progress: bool) -> None:
        try:
            with session_scope(self.factory) as session:
                job = renew(session, self.job_id, self.owner, self.lease_s)
                if with_progress:
                    job.progress = max(0.0, min(self._fraction, 1.0))
                    job.stage = self._stage
                meter_coordinator(session, self.job_id, self.elapsed())
                if payload is not None:
                    append_event(session, job, payload[0], dict(payload[1]))
                self._cancelled = self._cancelled or job.cancel_requested_at is not None
        except LeaseLost:
            self._lost = True

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self._write(with_progress=False)
            except Exception:  # a database hiccup: the next beat tries again before the lease lapses
                log.exception("job %s: lease renewal failed", self.job_id)

    def time_up(self) -> None:
        """The task's own time limit has come: synthesis stops at its next call, as at its deadline. Only sets a
        flag, so a signal handler may call it."""
        self._time_up = True

    def _check(self) -> None:
        if self._lost:
            raise LeaseTaken(f"job {self.job_id} is no longer leased to {self.owner}")
        if self._cancelled:
            raise JobCancelled(f"job {self.job_id} was cancelled")
        if self._time_up:
            raise OutOfTime(f"job {self.job_id} reached its task's soft time limit")

    def stage(self, name: str) -> None:
        """Record the new stage and log it."""
        self._stage = name
        self._write(("stage", {"stage": name}))
        self._check()

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Record progress, at most every `min_interval_s` seconds."""
        self._fraction = fraction
        if time.monotonic() - self._last >= self.min_interval_s:
            self._last = time.monotonic()
            self._write()
        self._check()

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Log an event (and record progress with it)."""
        self._write((kind, payload))
        self._check()
