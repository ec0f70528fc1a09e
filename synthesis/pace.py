"""How fast training goes on this machine, measured on the search's own trials.

A time budget is only useful if the learning-rate schedule fits it: a run cut off by its deadline halfway
through a schedule planned for more epochs ends with a high learning rate (or still warming up). The pace
predicts how many epochs fit a time limit, so each run's schedule completes within it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from synthesis.trial import TrialResult

VALIDATION_SHARE = 0.15
"""Validation after each epoch, as a share of the epoch's training time."""

MARGIN = 0.85
"""The share of a time limit a schedule is planned to fill: step times vary by a fifth or more on a shared
machine, and a schedule cut short by its deadline ends at a high learning rate."""

FINAL_MARGIN = 0.95
"""The share the final training plans to fill: it is the last run of its stage, so time it leaves is lost, and
the end of its cosine schedule is cheap to lose (past 90 % of the steps the rate is below 2.5 % of its peak,
and the best epoch so far is kept). With `MARGIN`, MNIST's final training ended 130 s of 645 early."""


@dataclass
class Pace:
    """Seconds per epoch per (multiply-add x training sample), and compilation seconds, of finished trials."""

    rates: list[float] = field(default_factory=list)
    compiles: list[float] = field(default_factory=list)

    def record(self, macs: int, samples: int, batch_size: int, result: TrialResult) -> None:
        """Learn from a trial whose step time was measured (a few steps after compilation suffice)."""
        if result.step_s <= 0 or macs <= 0 or samples <= 0:
            return
        per_epoch = result.step_s * math.ceil(samples / batch_size)
        self.rates.append(per_epoch / (macs * samples))
        self.compiles.append(result.compile_s)

    def epoch_seconds(self, macs: int, samples: int) -> float | None:
        """Predicted seconds of one epoch of a network of `macs` multiply-adds on `samples` samples."""
        return float(np.median(self.rates)) * macs * samples if self.rates else None

    def compile_seconds(self) -> float:
        """Typical seconds before a run's first steps (compilation); 0 while nothing is known."""
        return float(np.median(self.compiles)) if self.compiles else 0.0

    def epochs_within(self, seconds: float, macs: int, samples: int, most: int,
                      measured: TrialResult | None = None, batch_size: int = 0, margin: float = MARGIN) -> int:
        """How many epochs (1..most) fit in `margin` of `seconds`, compilation and one validation per epoch
        included; `most` while nothing is known. A network's own `measured` step time (at `batch_size`) and
        compilation beat the median of other networks: seconds per multiply-add differ several-fold between block
        types, and compilation more (on cifar10_small at 1,200 s the MobileNet seed's one epoch took 128 s, most of it
        compilation, where the hand CNN's epochs took about 15 s; planned with the median over all seeds, the hand
        CNN's final training ran 27 epochs and ended 225 s before its share did)."""
        own = measured is not None and measured.step_s > 0 and batch_size > 0 and samples > 0
        per_epoch = measured.step_s * math.ceil(samples / batch_size) if own and measured else \
            self.epoch_seconds(macs, samples)
        if per_epoch is None or not math.isfinite(seconds):
            return most
        compile_s = measured.compile_s if own and measured and measured.compile_s > 0 else self.compile_seconds()
        usable = margin * (seconds - compile_s) / (1 + VALIDATION_SHARE)
        return max(1, min(most, int(usable / max(per_epoch, 1e-9))))
