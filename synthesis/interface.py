"""The engine's interface: what to learn (`Task`), how (`Options`), and what a synthesis delivers (`Synthesis`, with
how it ended: `synthesis.progress.Ending`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from domain.rules import DEFAULT_TOLERANCE
from synthesis import space
from synthesis.deliver import Delivered
from synthesis.executor import TrialExecutor
from synthesis.explain import TextCodec
from synthesis.fine import CompressedVariant
from synthesis.progress import Ending


@dataclass(frozen=True)
class Task:
    """What to learn: raw images [N, H, W, C] or token ids [N, L] (int32), class ids, and duplicate groups."""

    modality: str
    x: np.ndarray
    y: np.ndarray
    num_classes: int
    vocab_size: int = 0  # text: ids of the word sequence
    groups: np.ndarray | None = None  # rows with equal values (exact duplicates) never straddle the split
    bag_start: int = 0  # text: where a bag of n-gram ids starts (its ids in [1, bag_vocab)); 0: no bag
    bag_vocab: int = 0
    bag_words: int = 0  # text: the first id of the bag's character block (0: one block)
    texts: Sequence[str] | None = None  # text: the raw texts of the rows, which explanations are worded in
    codec: TextCodec | None = None  # text: how texts become rows (the encoder), for explanations
    rows: np.ndarray | None = None  # each row's position in the uploaded data (None: the same as here)
    classes: Sequence[str] | None = None  # the class names, in class-id order (None: the ids as names)


@dataclass(frozen=True)
class Options:
    """A run's seed, the constraints the delivered model must meet, and a device-memory cap for candidates."""

    seed: int = 0
    constraints: space.Constraints = field(default_factory=lambda: space.Constraints())
    memory_limit: int | None = None
    latency: space.LatencyModel | None = None  # None: calibrated on this machine from the space's seeds
    test_fraction: float = 0.1  # 0 when the caller keeps its own test set: then all data trains or validates
    executor: TrialExecutor | None = None  # trials on other devices too (time budgets only); None: in-process
    tolerance: float = DEFAULT_TOLERANCE  # validation accuracy the compressed variant may lose (a fraction)
    compress: bool = True  # False: no fine-grained synthesis (its share of the budget is left unspent)
    explain: bool = True  # False: no explainability reports (their share of the budget is left unspent)


@dataclass(frozen=True)
class Synthesis:
    """The delivered model and its compressed variant (None when compression was skipped or failed), the search
    log, the Pareto front, why the search stopped and the split used."""

    model: Delivered
    log: list[dict[str, Any]]
    pareto: list[dict[str, Any]]
    stop_reason: str
    split: dict[str, int]
    seconds: float
    compressed: CompressedVariant | None = None
    compile_seconds: float = 0.0  # seconds this process spent compiling (trials on other workers not counted)

    @property
    def ending(self) -> Ending:
        """How it ended: completed, or interrupted by its caller's deadline or a cancellation (it delivered its best
        model so far); a synthesis that fails raises instead."""
        return Ending.of(self.stop_reason)
