"""A monitor that records every event, for tests of what the engine and the search report."""

from __future__ import annotations

from typing import Any

from synthesis.progress import NullMonitor


class Events(NullMonitor):
    """Every event reported, in order, as (kind, payload)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def event(self, kind: str, payload: Any) -> None:
        """Record an event."""
        self.log.append((kind, dict(payload)))

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of the events of one kind, in order."""
        return [payload for k, payload in self.log if k == kind]
