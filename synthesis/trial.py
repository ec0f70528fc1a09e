"""One candidate in the search: its row of the search log, its memory estimate, its training (stopped early by
the search's rule) and result.

A trial trains a candidate for up to `horizon` epochs in one call of `core.training.train` (one compilation),
asking the search after every epoch whether to go on — asynchronous successive halving (Li et al.,
"A System for Massively Parallel Hyperparameter Tuning", MLSys 2020) needs no resumption of stopped runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jax

from core.analysis import analyse
from core.compilation import CompileMeter, metered
from core.data import Dataset
from core.model import build
from core.spec import Spec
from core.train_config import Progress, TrainConfig
from core.training import train
from synthesis import space
from synthesis.progress import Stopped
from synthesis.select import excess_loss

PROGRESS_STEPS = 8
"""A trial tells its progress every that many steps, so its pace is known after a few steps, not an epoch."""

ADAM_COPIES = 4
"""Float32 copies of the parameters training holds: weights, gradients, and AdamW's two moments."""


def memory_estimate(spec: Spec, batch_size: int) -> int:
    """Bytes training `spec` at `batch_size` needs: parameter copies plus activations kept for the backward pass."""
    info = analyse(spec)
    return (info.params + info.state) * 4 * ADAM_COPIES + 2 * info.activation_bytes(batch_size)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception from training means the device ran out of memory."""
    return isinstance(exc, MemoryError) or "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower()


class _StopTrial(Exception):
    """Raised from the progress hook when the search stops a trial early."""


@dataclass
class TrialResult:
    """What one trial measured: its validation curve, how it ended, its cost and (when completed) its weights."""

    curve: list[float] = field(default_factory=list)
    status: str = "completed"  # completed | stopped | deadline | failed
    reason: str = ""
    seconds: float = 0.0
    epochs: int = 0
    variables: dict[str, Any] | None = None
    best_metric: float = 0.0
    best_loss: float | None = None  # the kept epoch's validation loss (synthesis.select.excess_loss; None: not kept)
    best_epoch: int = 0  # the epoch whose weights were kept (0: none)
    first_epoch_s: float = 0.0  # seconds to the first validation (compilation included)
    step_s: float = 0.0  # seconds a training step takes: over the latest whole epoch after the first (its data and
    # callbacks in, its validation out), else over the first steps after compilation (0 = unknown)
    compile_s: float = 0.0  # seconds before the first steps ran (mostly compilation)
    compile_seconds: float = 0.0  # seconds JAX spent compiling (or reading from its cache) the trial's programs
    eval_s: float = 0.0  # seconds of its fastest pass over the validation rows (0 = none ran)

    @property
    def score(self) -> tuple[float, float | None]:
        """The measured (accuracy, loss) of the kept epoch, not an extrapolation: what `synthesis.select` ranks."""
        return self.best_metric, self.best_loss


def run_trial(spec: Spec, config: TrainConfig, data: Dataset,
              keep_going: Callable[[list[float]], bool], on_epoch: Callable[[list[float]], None] | None = None,
              variables: dict[str, Any] | None = None, check: Callable[[], None] | None = None,
              on_weights: Callable[[int, dict[str, Any]], None] | None = None) -> TrialResult:
    """Train `spec` with `config` (from `variables` when given, else from a fresh initialisation); after each
    epoch `keep_going(curve)` may stop it. Failures are caught.

    Cancellation (`synthesis.progress.Stopped` raised by `on_epoch`, or by `check` before any step) propagates: it
    ends the whole search.
    """
    result = TrialResult()
    start = time.perf_counter()
    config = replace(config, progress_every=PROGRESS_STEPS)
    marks: list[tuple[int, float]] = []  # (global step, seconds) of each step's progress, to measure the pace
    ends: list[tuple[int, float]] = []  # (global step, seconds) at each epoch's end

    def hook(p: Progress) -> None:
        if "val_accuracy" not in p.metrics:
            if len(marks) < 2:
                marks.append((p.step, p.elapsed_s))
                if len(marks) == 2:
                    (s0, t0), (s1, t1) = marks
                    result.step_s = max(t1 - t0, 0.0) / max(s1 - s0, 1)
                    result.compile_s = max(t0 - s0 * result.step_s, 0.0)
            return
        result.curve.append(float(p.metrics["val_accuracy"]))
        if "eval_s" in p.metrics:
            result.eval_s = min(result.eval_s or math.inf, float(p.metrics["eval_s"]))
        if ends and p.step > ends[-1][0]:  # a whole epoch after the first: the pace without start-up costs
            seconds = p.elapsed_s - ends[-1][1] - float(p.metrics.get("eval_s", 0.0))
            result.step_s = max(seconds, 0.0) / (p.step - ends[-1][0]) or result.step_s
        ends.append((p.step, p.elapsed_s))
        result.epochs = p.epoch
        if p.epoch == 1:
            result.first_epoch_s = p.elapsed_s
        if on_epoch is not None:
            on_epoch(result.curve)
        if p.epoch < config.epochs and not keep_going(result.curve):
            raise _StopTrial

    meter: CompileMeter | None = None
    try:
        with metered() as meter:
            out = train(build(spec), data, config, variables=variables, on_progress=hook, check=check,
                        on_epoch_end=on_weights)
    except _StopTrial:
        result.status = "stopped"
    except Stopped:
        raise
    except Exception as exc:  # a failed candidate never fails the job
        result.status, result.reason = "failed", ("out of memory: " if is_out_of_memory(exc) else "") + str(exc)[:500]
    else:
        result.variables, result.best_metric, result.best_epoch = out.variables, out.best_metric, out.best_epoch
        kept = out.history[out.best_epoch - 1]  # the epoch whose weights training returns
        result.best_loss = excess_loss({k: kept[f"val_{k}"] for k in ("loss", "uniform_loss")},
                                       config.label_smoothing, spec.num_classes)
        result.status = "deadline" if out.stop_reason == "deadline" else "completed"
    result.seconds = time.perf_counter() - start
    result.compile_seconds = meter.seconds if meter is not None else 0.0
    result.best_metric = max(result.best_metric, max(result.curve, default=0.0))
    return result


def run_until(spec: Spec, config: TrainConfig, data: Dataset, epoch: int, check: Callable[[], None] | None = None,
              on_epoch: Callable[[list[float]], None] | None = None, variables: dict[str, Any] | None = None
              ) -> tuple[TrialResult, dict[str, Any] | None]:
    """`spec` trained with `config`'s whole schedule up to `epoch`, and that epoch's weights (None when the run did
    not get there): a run that repeats another's kept epoch keeps its learning rates, where a schedule cut to that
    epoch would bring the rate to zero early and train less."""
    kept: list[dict[str, Any]] = []

    def keep(at: int, weights: dict[str, Any]) -> None:
        if at == epoch:
            kept.append(jax.device_get(weights))

    out = run_trial(spec, config, data, lambda curve: len(curve) < epoch, on_epoch=on_epoch, variables=variables,
                    check=check, on_weights=keep)
    return out, kept[0] if kept and out.status in ("completed", "stopped") else None


@dataclass
class Trial:
    """One row of the search log."""

    index: int
    candidate: space.Candidate
    params: int = 0
    macs: int = 0
    memory_bytes: int = 0
    latency_ms: float = 0.0
    status: str = "proposed"
    reason: str = ""
    curve: list[float] = field(default_factory=list)
    predicted: float = 0.0
    seconds: float = 0.0
    started_at: float = 0.0  # the fraction of the budget spent when the trial started
    worker: str = ""  # where it trained: the coordinator's worker, another worker, or "local"
    result: TrialResult | None = None

    @property
    def accuracy(self) -> float:
        """The trial's best validation accuracy when it trained fully, else its predicted final accuracy."""
        if self.result is not None and self.result.status in ("completed", "deadline"):
            return max(self.result.best_metric, self.predicted)
        return self.predicted

    @property
    def loss(self) -> float | None:
        """The validation loss at the best epoch of a trial that trained fully (None otherwise: a stopped trial's
        loss comes from fewer epochs than its predicted accuracy stands for)."""
        if self.result is not None and self.result.status in ("completed", "deadline"):
            return self.result.best_loss
        return None

    @property
    def score(self) -> tuple[float, float | None]:
        """(accuracy, loss): what `synthesis.select` ranks trials by."""
        return self.accuracy, self.loss

    def to_dict(self) -> dict[str, Any]:
        """The search-log entry (JSON-ready)."""
        return {"index": self.index, **self.candidate.to_dict(), "params": self.params, "macs": self.macs,
                "memory_bytes": self.memory_bytes, "latency_ms": round(self.latency_ms, 4), "status": self.status,
                "reason": self.reason, "curve": [round(v, 6) for v in self.curve],
                "predicted": round(self.predicted, 6), "accuracy": round(self.accuracy, 6),
                "loss": None if self.loss is None else round(self.loss, 6),
                "epochs": len(self.curve), "seconds": round(self.seconds, 3), "started_at": round(self.started_at, 4),
                "worker": self.worker,
                "compile_seconds": round(self.result.compile_seconds, 3) if self.result is not None else 0.0}
