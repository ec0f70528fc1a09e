"""A job's fine-grained synthesis stage: compress the trained winner within the schedule's fine share and
deliver the compressed variant next to the dense one (NeuNetS; the compression itself is `synthesis.compress`).

A compression that fails never fails the job: it is logged and the dense model ships alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core import tree
from core.analysis import architecture
from core.data import Dataset
from core.spec import Spec
from core.train_config import TrainConfig
from domain.onnx_run import OnnxClassifier
from synthesis.budget import Budget
from synthesis.compress import Compressed, compress
from synthesis.deliver import Delivered
from synthesis.explain.summary import calibration
from synthesis.progress import INTERRUPTED, Cancelled, Monitor, Stopped
from synthesis.reserve import COMPRESSION_ROOM

TIME_SHARE = 0.75
"""Of the seconds left in a time budget's fine share, what compression gets (it keeps the measured cost of its final
measurements out of its retraining: `synthesis.compress.pipeline.MEASURE_MARGIN`); the rest absorbs what those
measurements take beyond the estimate."""
MIN_SECONDS = 1.0
"""A time budget's fine share below this is skipped: no retraining would fit in it."""
SKIP_BELOW = 0.5
"""Compression is skipped when the time left in its share is under this share of its estimated fixed costs
(`Budget.reserve`): it would overrun into delivery's and the reports' time by more than it has."""


@dataclass(frozen=True)
class CompressedVariant:
    """The compressed model as delivered: `model.weights` is the compressed artifact (:mod:`core.artifact`, its
    length the model's bytes), `model.onnx` its dense-equivalent verified export; `figures` the before / after
    figures of `synthesis.compress`; `stop_reason` ``completed``, or why its caller interrupted it (``cancelled``,
    ``time_limit``)."""

    model: Delivered
    figures: dict[str, Any]
    stop_reason: str

    @property
    def artifact(self) -> bytes:
        """The compressed artifact's bytes."""
        return self.model.weights


@dataclass(frozen=True)
class FineOutcome:
    """What the stage produced (None: skipped or failed) and, when its caller interrupted it (cancelled, or out of
    time), the stop reason (`synthesis.progress.INTERRUPTED`)."""

    variant: CompressedVariant | None
    interrupted: str | None = None


def nonzero_params(variables: dict[str, Any]) -> int:
    """Trainable parameters that are not exactly zero (pruned weights are)."""
    return int(sum(np.count_nonzero(np.asarray(a)) for a in tree.flatten(variables.get("params", {})).values()))


def fine_synthesis(spec: Spec, variables: dict[str, Any], data: Dataset, test: tuple[np.ndarray, np.ndarray],
                   budget: Budget, config: TrainConfig, tolerance: float, seed: int,
                   monitor: Monitor) -> FineOutcome:
    """Compress the trained network `spec`/`variables` within the fine share of `budget` (epochs for a
    reproducible budget, so the seed fixes the result) and evaluate the compressed variant on the `test` split.

    `Stopped` (but not `Cancelled`) propagates; any other error is reported as a ``compress_failed`` event.
    """
    end = budget.fine_end()
    if not budget.reserve.compress:
        monitor.event("compress_skipped", {"reason": f"its measurements alone need more than "
                                                     f"{COMPRESSION_ROOM:g} times its share of the budget"})
        return FineOutcome(None)
    if budget.reproducible:
        seconds, epochs = None, max(budget.epochs_left(end), 1)
    else:
        seconds, epochs = TIME_SHARE * budget.left(end), None
        if seconds < MIN_SECONDS or budget.left(end) < SKIP_BELOW * budget.reserve.compression_s:
            monitor.event("compress_skipped", {
                "reason": f"{budget.left(end):.1f} s left in the fine-synthesis share; its measurements alone need "
                          f"about {budget.reserve.compression_s} s"})
            return FineOutcome(None)
    try:
        compressed = compress(spec, variables, data, tolerance=tolerance, seconds=seconds, epochs=epochs, seed=seed,
                              monitor=monitor, config=config)
    except Cancelled as stop:
        return FineOutcome(None, interrupted=stop.reason)
    except Stopped:
        raise
    except Exception as exc:  # the dense model still ships
        monitor.event("compress_failed", {"error": f"{type(exc).__name__}: {exc}"[:2000]})
        return FineOutcome(None)
    finally:
        if epochs is not None:
            budget.spend_epochs(epochs)
    interrupted = compressed.stop_reason if compressed.stop_reason in INTERRUPTED else None
    return FineOutcome(delivered(compressed, *test), interrupted=interrupted)


def delivered(c: Compressed, x_test: np.ndarray, y_test: np.ndarray) -> CompressedVariant:
    """The compressed variant with its test accuracy and calibration (through its verified ONNX export, what ships)
    and figures."""
    after = c.figures["after"]
    proba = OnnxClassifier(c.onnx).predict_proba(x_test) if len(y_test) else None
    accuracy = float(np.mean(proba.argmax(axis=1) == y_test)) if proba is not None else None
    metrics = {**c.figures, "test_accuracy": accuracy, "val_accuracy": c.figures["val_accuracy_after"],
               "params": after["params"], "nonzero_params": nonzero_params(c.variables), "macs": after["macs"],
               "macs_nonzero": after["macs_nonzero"], "model_bytes": len(c.artifact), "weights_bytes": len(c.artifact),
               "onnx_bytes": len(c.onnx), "latency_ms": after["latency_ms"]}
    reliability = calibration(proba, y_test) if proba is not None else None
    metrics.update(test_ece=reliability and round(reliability["ece"], 6),
                   test_reliability=reliability and reliability["bins"])
    model = Delivered(spec=c.spec.to_dict(), weights=c.artifact, onnx=c.onnx, param_count=int(after["params"]),
                      metrics=metrics, architecture=architecture(c.spec))
    return CompressedVariant(model=model, figures=c.figures, stop_reason=c.stop_reason)
