"""How synthesis tells its caller what it is doing, and how the caller stops it: the `Monitor` the caller implements.

A worker implements `Monitor` with database writes; the command line with a progress bar; tests with a list.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class Stopped(Exception):
    """Raised by a monitor to abort synthesis at its next call, delivering nothing (e.g. a lost lease)."""


class Cancelled(Stopped):
    """Raised by a monitor when the user cancels: synthesis stops and still delivers its best model so far.
    `reason` is the synthesis's stop reason then."""

    reason = "cancelled"


class OutOfTime(Cancelled):
    """Raised by a monitor when its caller's own time limit has come (a task's soft time limit): synthesis stops
    as at its deadline and delivers its best model so far."""

    reason = "time_limit"


class Ending(enum.StrEnum):
    """How a synthesis ended, for its caller to act on (a worker maps it to a job state in one place:
    `workers.runner.job_state`):

    - ``COMPLETED``: every stage ran (the search stopped on its own or at its share of the budget);
    - ``DEADLINE``: the caller's own time limit came first (`OutOfTime`); the best model trained so far ships;
    - ``CANCELLED``: the user cancelled (`Cancelled`); the best model trained so far ships;
    - ``FAILED``: it raised (no model, or nothing trained before an interruption)."""

    COMPLETED = "completed"
    DEADLINE = OutOfTime.reason
    CANCELLED = Cancelled.reason
    FAILED = "failed"

    @classmethod
    def of(cls, stop_reason: str) -> Ending:
        """The ending of a synthesis that delivered a model and stopped for ``stop_reason`` (the search's reason,
        or the interruption's)."""
        return cls(stop_reason) if stop_reason in INTERRUPTED else cls.COMPLETED


INTERRUPTED = (Ending.CANCELLED.value, Ending.DEADLINE.value)
"""The stop reasons of a synthesis its caller interrupted (it delivers the best model trained before)."""


class Monitor(Protocol):
    """Receives synthesis's stages, progress and events; any method may raise `Stopped`."""

    def stage(self, name: str) -> None:
        """A new stage begins (e.g. 'training', 'exporting')."""
        ...

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Overall progress in [0, 1] and the latest metrics."""
        ...

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Something worth a line in the job's log (an epoch's results, a stop reason)."""
        ...


class NullMonitor:
    """A monitor that records nothing and never stops synthesis."""

    def stage(self, name: str) -> None:
        """Ignore the stage."""

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Ignore the progress."""

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Ignore the event."""


class Shielded:
    """A monitor that passes everything on to `inner` but absorbs an interruption (`Cancelled`), keeping its
    reason in `interrupted`: for synthesis's last steps, which deliver what was trained whatever happens."""

    def __init__(self, inner: Monitor) -> None:
        self.inner = inner
        self.interrupted: str | None = None

    def stage(self, name: str) -> None:
        """Pass the stage on."""
        self._shield(lambda: self.inner.stage(name))

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Pass the progress on."""
        self._shield(lambda: self.inner.progress(fraction, metrics))

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Pass the event on."""
        self._shield(lambda: self.inner.event(kind, payload))

    def _shield(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Cancelled as stop:
            self.interrupted = self.interrupted or stop.reason
