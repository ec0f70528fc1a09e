"""Budgets: the time a job may spend and how its stages share it (the tiers: `domain.rules`).

A budget is wall-clock seconds of one device, or — for a reproducible run — a number of training epochs,
which makes the search log depend only on the seed (a time budget cannot: how far a run gets depends on the
machine's speed). The deadline is checked by every stage; the schedule gives each stage its share.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Schedule:
    """Each stage's share of the budget: search, fine synthesis (compression), final training, delivery, and the
    explainability reports.

    The stages run in the order search, final training, fine synthesis, delivery, explanation: fine synthesis
    compresses the trained winner (NeuNetS' order; compressing before final training would prune a half-trained
    network); the explainability reports of the delivered variants take what is left.
    """

    search: float = 0.5
    fine: float = 0.15
    final: float = 0.25
    reports: float = 0.05  # evaluation, export, its verification and the latency measurements
    explain: float = 0.05  # the explainability reports (at most a tenth of the budget), taken from the final training

    def __post_init__(self) -> None:
        shares = (self.search, self.fine, self.final, self.reports, self.explain)
        if min(shares) < 0 or abs(sum(shares) - 1) > 1e-9:
            raise ValueError("schedule shares must be non-negative and sum to 1")

    @classmethod
    def for_rows(cls, train_rows: int, search_rows: int) -> Schedule:
        """The schedule for `train_rows` training rows of which search trials train on `search_rows`: the
        default, or — when the search trains on a sample — a larger share for the final training, whose
        epochs cost `train_rows / search_rows` times a search epoch."""
        return cls() if search_rows >= train_rows else LARGE_DATA


LARGE_DATA = Schedule(search=0.25, fine=0.1, final=0.55, reports=0.05, explain=0.05)
"""The schedule when the search trains on a sample of the training rows (`Schedule.for_rows`)."""


@dataclass
class Budget:
    """Seconds (a wall-clock deadline) or epochs (reproducible); `clock` is injectable for tests. Without a
    `schedule`, the engine chooses one for the data (`Schedule.for_rows`); until then the default applies."""

    seconds: float | None = None
    epochs: int | None = None
    schedule: Schedule | None = None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    epochs_used: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.epochs is None):
            raise ValueError("a budget is either seconds or epochs")
        if (self.seconds is not None and self.seconds <= 0) or (self.epochs is not None and self.epochs < 1):
            raise ValueError("a budget must be positive")
        self.started = self._now()

    def _now(self) -> float:
        return float(self.clock())

    @property
    def reproducible(self) -> bool:
        """Whether the budget counts epochs (so a seed fixes the whole run)."""
        return self.epochs is not None

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return self._now() - self.started

    def used(self) -> float:
        """The fraction of the budget spent (seconds or epochs)."""
        if self.seconds is not None:
            return self.elapsed() / self.seconds
        return self.epochs_used / float(self.epochs or 1)

    def spend_epochs(self, n: int) -> None:
        """Count `n` training epochs against an epoch budget."""
        self.epochs_used += n

    def left(self, until: float) -> float:
        """Seconds left before `until` (a fraction of the budget); infinite for an epoch budget."""
        if self.seconds is None:
            return float("inf")
        return max(self.seconds * until - self.elapsed(), 0.0)

    def too_short_for(self, seconds: float) -> bool:
        """Whether a time budget has less than `seconds` left (never for an epoch budget)."""
        return self.seconds is not None and self.left(1.0) < seconds

    def epochs_left(self, until: float) -> int:
        """Epochs left before `until` (a fraction of the budget); a large number for a time budget."""
        if self.epochs is None:
            return 1 << 30
        return max(int(self.epochs * until) - self.epochs_used, 0)

    @property
    def shares(self) -> Schedule:
        """The schedule in force: the one given or chosen, else the default."""
        return self.schedule or Schedule()

    def search_end(self) -> float:
        """The fraction of the budget at which the search must stop."""
        return self.shares.search

    def final_end(self) -> float:
        """The fraction of the budget at which final training must stop (fine synthesis follows)."""
        return self.shares.search + self.shares.final

    def fine_end(self) -> float:
        """The fraction at which fine synthesis (compressing the winner) must stop; reports get the rest."""
        return self.shares.search + self.shares.final + self.shares.fine
