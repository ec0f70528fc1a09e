"""The client's progress bars (rich, on stderr): a transfer's bytes, and a watched job's stage, best accuracy and
time left. Quiet when asked to be or when stderr is not a terminal."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from netsynth.types import Event, Job


def shown(progress: bool) -> bool:
    """Whether to draw a bar: asked for, and stderr is a terminal."""
    return progress and sys.stderr.isatty()


class _Bar:
    """A rich progress display, started and stopped as a context manager."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.stop()


class TransferBar(_Bar):
    """Bytes sent or received against the total, with speed and time left."""

    def __init__(self, label: str, total: int | None, enabled: bool) -> None:
        super().__init__(Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                  TransferSpeedColumn(), TimeRemainingColumn(),
                                  console=Console(stderr=True), disable=not enabled))
        self.task: TaskID = self.progress.add_task(label, total=total)

    def advance(self, count: int) -> None:
        """Count `count` more bytes."""
        self.progress.advance(self.task, count)

    def restart(self) -> None:
        """Start counting again from 0 (a retried upload)."""
        self.progress.reset(self.task)

    def set_total(self, total: int | None) -> None:
        """Set the number of bytes expected."""
        self.progress.update(self.task, total=total)


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


class WatchBar(_Bar):
    """A job's stage, its time spent against its budget, the best accuracy of its candidates and the time left."""

    def __init__(self, job: Job | None, enabled: bool) -> None:
        super().__init__(Progress(TextColumn("{task.fields[stage]:<14}"), BarColumn(),
                                  TextColumn("best {task.fields[best]:.4f}"), TextColumn("{task.fields[left]}"),
                                  console=Console(stderr=True), disable=not enabled))
        self.budget = float(job["budget_seconds"]) if job else None
        self.started: datetime | None = None
        self.best, self.stage = 0.0, "waiting"
        self.task: TaskID = self.progress.add_task("job", total=self.budget, stage="waiting", best=0.0, left="")

    def update(self, event: Event) -> None:
        """Show what `event` changes: the stage, the best accuracy, the time spent and left."""
        payload, kind = event["payload"], event["kind"]
        if kind == "attempt" and self.started is None:
            self.started, self.stage = _when(event["at"]), "running"
        elif kind == "stage":
            self.stage = str(payload.get("stage", ""))
        elif kind == "candidate":
            self.best = max(self.best, float(payload.get("accuracy") or 0.0))
        elif kind in ("succeeded", "failed", "cancelled", "end"):
            self.stage = str(payload.get("state") or kind)
        left, completed = "", self.budget if kind == "end" else None
        if self.started is not None and self.budget and kind != "end":
            spent = (datetime.now(UTC) - self.started).total_seconds()
            left, completed = f"{max(0.0, self.budget - spent):.0f} s left", min(spent, self.budget)
        self.progress.update(self.task, completed=completed, stage=self.stage, best=self.best, left=left)
