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
    delivery: float = 0.05  # evaluation, export, its verification and the latency measurements
    explain: float = 0.05  # the explainability reports (at most a tenth of the budget), taken from the final training

    def __post_init__(self) -> None:
        shares = (self.search, self.fine, self.final, self.delivery, self.explain)
        if min(shares) < 0 or abs(sum(shares) - 1) > 1e-9:
            raise ValueError("schedule shares must be non-negative and sum to 1")

    @classmethod
    def for_task(cls, modality: str, train_rows: int, search_rows: int, timed: bool = True) -> Schedule:
        """The schedule for a task of `modality` with `train_rows` training rows of which search trials train on
        `search_rows`: `IMAGES` for images under a time budget (`timed`); else the default, or — when the search
        trains on a sample — a larger share for the final training, whose epochs cost `train_rows / search_rows`
        times a search epoch. An epoch budget keeps the default's search share: a fifth of a few epochs cannot
        compare the seeds."""
        if modality == "image" and timed:
            return IMAGES
        return cls() if search_rows >= train_rows else LARGE_DATA


LARGE_DATA = Schedule(search=0.25, fine=0.1, final=0.55, delivery=0.05, explain=0.05)
"""The text schedule when the search trains on a sample of the training rows (`Schedule.for_task`)."""

IMAGES = Schedule(search=0.2, fine=0.05, final=0.69, delivery=0.02, explain=0.04)
"""The image schedule under a time budget: most of it trains the network that ships. An image network's accuracy
keeps growing with its training time long after a search can tell the seeds apart, and the final training continues
the leader's search weights (`synthesis.final`), so the leader's search time trains it too. Delivery (evaluation,
export, its check, latency) takes seconds, where the text schedule's 5 % of a 20-minute budget is a minute."""


@dataclass(frozen=True)
class Reserve:
    """Seconds the stages after final training need whatever the schedule's shares say (`synthesis.reserve`):
    compression's fixed costs, and delivery with the explainability reports; `compress` false when compression does
    not fit and is skipped (its share then trains the network)."""

    compression_s: float = 0.0
    delivery_s: float = 0.0
    compress: bool = True


@dataclass
class Budget:
    """Seconds (a wall-clock deadline) or epochs (reproducible); `clock` is injectable for tests. Without a
    `schedule`, the engine chooses one for the task (`Schedule.for_task`); until then the default applies. A time
    budget's `reserve` moves the ends of final training and compression earlier when the later stages need more
    than their shares."""

    seconds: float | None = None
    epochs: int | None = None
    schedule: Schedule | None = None
    reserve: Reserve = field(default_factory=Reserve)
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

    def shortfall(self, epochs: int, seconds: float, until: float) -> str | None:
        """Why a run of `epochs` epochs (under an epoch budget) or about `seconds` seconds (under a time budget) does
        not fit what is left before `until`; None when it fits."""
        if self.reproducible:
            have = self.epochs_left(until)
            left, need, short = f"{have} epochs", f"{epochs} epochs", have < epochs
        else:
            left, need, short = f"{self.left(until):.1f} s", f"about {seconds:.1f} s", self.left(until) < seconds
        return f"what is left ({left}) is less than the {need} needed" if short else None

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
        """The fraction of the budget at which final training must stop (fine synthesis follows): its share's end,
        or earlier by what the reserve needs beyond the later shares (never before the search's end)."""
        end = self.shares.search + self.shares.final + (0.0 if self.reserve.compress else self.shares.fine)
        reserved = self.reserve.compression_s + self.reserve.delivery_s
        return end if not self.seconds else max(min(end, 1.0 - reserved / self.seconds), self.search_end())

    def fine_end(self) -> float:
        """The fraction at which fine synthesis (compressing the winner) must stop; delivery and the explainability
        reports get the rest, at least what the reserve says they need."""
        end = self.shares.search + self.shares.final + self.shares.fine
        return end if not self.seconds else max(min(end, 1.0 - self.reserve.delivery_s / self.seconds),
                                                self.final_end())


STAGES = ("search", "final_training", "compression", "delivery", "explanation")
"""A synthesis's stages in the order they run, as `StageClock` names them."""


class StageClock:
    """Where a budget's seconds went: each stage's seconds, measured as the stages end (`lap`)."""

    def __init__(self, budget: Budget) -> None:
        self.budget, self.laps, self._last = budget, dict[str, float](), budget.elapsed()

    def lap(self, stage: str) -> None:
        """Record that `stage` (one of `STAGES`) ended now."""
        now = self.budget.elapsed()
        self.laps[stage] = self.laps.get(stage, 0.0) + now - self._last
        self._last = now

    def spent(self, shipped_training_s: float) -> dict[str, float | None]:
        """Each stage's seconds, their sum, the budget's seconds (None for an epoch budget), and the seconds and
        share of the budget that trained the network that ships (`shipped_training_s`)."""
        total = self.budget.seconds
        out: dict[str, float | None] = {f"{stage}_s": round(self.laps.get(stage, 0.0), 1) for stage in STAGES}
        out.update({"total_s": round(sum(self.laps.values()), 1), "budget_s": total,
                    "shipped_network_training_s": round(shipped_training_s, 1),
                    "shipped_network_training_share": None if not total else round(shipped_training_s / total, 3)})
        return out
