"""How synthesis reports what it is doing, and how its caller stops it: an interface the caller implements.

A worker implements `Reporter` with database writes; the command line with a progress bar; tests with a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Stopped(Exception):
    """Raised by a reporter to abort synthesis at its next report, delivering nothing (e.g. a lost lease)."""


class Cancelled(Stopped):
    """Raised by a reporter when the user cancels: synthesis stops and still delivers its best model so far."""


class Reporter(Protocol):
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


class NullReporter:
    """A reporter that records nothing and never stops synthesis."""

    def stage(self, name: str) -> None:
        """Ignore the stage."""

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Ignore the progress."""

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Ignore the event."""
