"""Synthesis progress written to the job's row and event log; cancellation and lost leases stop synthesis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.jobs import append_event
from store.leases import LeaseLost, renew
from synthesis.progress import Stopped


class JobCancelled(Stopped):
    """The job's owner asked to cancel it."""


class LeaseTaken(Stopped):
    """Another worker now holds the job (this one was presumed dead): stop without touching the job."""


class DbReporter:
    """A `synthesis.progress.Reporter` for one job: renews the lease and checks for cancellation as it writes."""

    def __init__(self, factory: sessionmaker[Session], job_id: uuid.UUID, owner: str, lease_s: float,
                 min_interval_s: float = 0.5) -> None:
        self.factory, self.job_id, self.owner, self.lease_s = factory, job_id, owner, lease_s
        self.min_interval_s = min_interval_s
        self.started = time.monotonic()
        self._last = -float("inf")
        self._stage: str | None = None
        self._fraction = 0.0

    def elapsed(self) -> float:
        """Seconds since this attempt started (device-seconds on a one-device worker)."""
        return time.monotonic() - self.started

    def _write(self, payload: tuple[str, Mapping[str, Any]] | None = None) -> None:
        try:
            with session_scope(self.factory) as session:
                job = renew(session, self.job_id, self.owner, self.lease_s)
                job.progress = max(0.0, min(self._fraction, 1.0))
                job.stage = self._stage
                job.device_seconds = round(self.elapsed(), 3)
                if payload is not None:
                    append_event(session, job, payload[0], dict(payload[1]))
                cancelled = job.cancel_requested_at is not None
        except LeaseLost as exc:
            raise LeaseTaken(str(exc)) from exc
        self._last = time.monotonic()
        if cancelled:
            raise JobCancelled(f"job {self.job_id} was cancelled")

    def stage(self, name: str) -> None:
        """Record the new stage and log it."""
        self._stage = name
        self._write(("stage", {"stage": name}))

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Record progress, at most every `min_interval_s` seconds."""
        self._fraction = fraction
        if time.monotonic() - self._last >= self.min_interval_s:
            self._write()

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Log an event (and record progress with it)."""
        self._write((kind, payload))
