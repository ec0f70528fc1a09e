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


@dataclass
class Pace:
    """Seconds per epoch per (multiply-add x training sample), and compilation seconds, of finished trials."""

    rates: list[float] = field(default_factory=list)
    compiles: list[float] = field(default_factory=list)

    def record(self, macs: int, samples: int, result: TrialResult) -> None:
        """Learn from a trial that ran at least two epochs."""
        if result.epochs < 2 or macs <= 0 or samples <= 0:
            return
        per_epoch = max(result.seconds - result.first_epoch_s, 1e-6) / (result.epochs - 1)
        self.rates.append(per_epoch / (macs * samples))
        self.compiles.append(max(result.first_epoch_s - per_epoch, 0.0))

    def epoch_seconds(self, macs: int, samples: int) -> float | None:
        """Predicted seconds of one epoch of a network of `macs` multiply-adds on `samples` samples."""
        return float(np.median(self.rates)) * macs * samples if self.rates else None

    def epochs_within(self, seconds: float, macs: int, samples: int, most: int) -> int:
        """How many epochs (1..most) fit in `seconds`, compilation included; `most` while nothing is known."""
        per_epoch = self.epoch_seconds(macs, samples)
        if per_epoch is None or not math.isfinite(seconds):
            return most
        compile_s = float(np.median(self.compiles)) if self.compiles else 0.0
        return max(1, min(most, int((seconds - compile_s) / max(per_epoch, 1e-9))))
