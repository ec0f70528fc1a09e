"""The settings and results of a training run (:func:`core.training.train`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STOP_REASONS = ("completed", "early_stopping", "deadline")
OPTIMIZERS = ("adamw", "sgd")


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of a training run.

    ``patience``: epochs without a better validation epoch (higher accuracy, or equal accuracy at a lower
    loss: :func:`core.training.better`) before stopping (``None`` = never).
    ``max_shift``/``flip``: image augmentation (random shifts of up to ``max_shift`` px, left-right
    flips); ignored for other modalities. ``max_shift=None`` suits the image size (see
    :func:`shift_for`); flips happen only when asked, as they change the meaning of digits.
    ``time_limit_s``: wall-clock budget of the whole call, compilation included (``None`` = none).
    ``until_deadline``: with ``time_limit_s``, the learning-rate schedule is planned in seconds: after every epoch
    the run's length is re-planned from the measured step and validation times so that the schedule ends at the
    time limit (``epochs`` is the first plan; at most twice it run).
    ``keep_last``: return the last epoch's weights, not the best validated one's (for a run whose validation rows
    are among its training rows, where validation only checks that training went well).
    ``clip_norm``: global gradient-norm clipping (``None`` = off). ``progress_every``: also tell the
    progress every that many steps (0 = once per epoch).
    ``optimizer``: ``"adamw"`` (decoupled weight decay) or ``"sgd"`` (Nesterov momentum ``momentum``, weight
    decay as an L2 term added to the gradient, as PyTorch's ``SGD`` applies it); see
    :func:`core.training.make_optimizer`.
    """

    epochs: int = 30
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup_fraction: float = 0.05
    label_smoothing: float = 0.1
    max_shift: int | None = None
    flip: bool = False
    patience: int | None = 5
    seed: int = 0
    time_limit_s: float | None = None
    eval_batch_size: int = 1024
    clip_norm: float | None = None
    progress_every: int = 0
    optimizer: str = "adamw"
    momentum: float = 0.9
    until_deadline: bool = False
    keep_last: bool = False

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "eval_batch_size": self.eval_batch_size >= 1,
            "learning_rate": self.learning_rate > 0,
            "weight_decay": self.weight_decay >= 0,
            "warmup_fraction": 0 <= self.warmup_fraction < 1,
            "label_smoothing": 0 <= self.label_smoothing < 1,
            "max_shift": self.max_shift is None or self.max_shift >= 0,
            "patience": self.patience is None or self.patience >= 1,
            "time_limit_s": self.time_limit_s is None or self.time_limit_s > 0,
            "clip_norm": self.clip_norm is None or self.clip_norm > 0,
            "progress_every": self.progress_every >= 0,
            "optimizer": self.optimizer in OPTIMIZERS,
            "momentum": 0 <= self.momentum < 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"TrainConfig: out-of-range value for {', '.join(bad)}")


@dataclass(frozen=True)
class Progress:
    """A training run's progress: epoch (1-based), global step, metrics so far, seconds since the start."""

    epoch: int
    step: int
    metrics: dict[str, float]
    elapsed_s: float


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train`.

    ``variables`` are the best epoch's (materialised when a reparam was used, whose trainable
    pytree is ``trainable``); ``history`` has one entry per evaluated epoch (a partial last epoch
    when the deadline struck mid-epoch); ``best_metric`` is that epoch's validation accuracy; ``step_s`` is one
    train step's seconds as last timed (0.0 when fewer than two steps ran: the first is mostly compilation).
    """

    variables: dict[str, Any]
    history: tuple[dict[str, float], ...]
    best_epoch: int
    best_metric: float
    stop_reason: str
    elapsed_s: float
    steps: int
    trainable: Any = field(default=None)
    step_s: float = 0.0


def shift_for(config: TrainConfig, modality: str, shape: tuple[int, ...]) -> int:
    """Return the random-shift range in pixels for a run: ``config.max_shift`` when set, else
    about 1/14 of the smaller image side (2 px for 28x28, 1 px for 8x8), 0 for non-images."""
    if modality != "image" or len(shape) != 3:
        return 0
    if config.max_shift is not None:
        return config.max_shift
    return round(min(shape[0], shape[1]) / 14)
