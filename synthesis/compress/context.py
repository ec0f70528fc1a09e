"""What every compression stage shares: the options, the budget, the validation data and the network being shrunk."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from core import artifact
from core.data import Dataset
from core.evaluation import evaluate, recalibrate
from core.model import Model, build
from core.reparam import Reparam
from core.spec import Spec
from core.train_config import TrainConfig
from synthesis.budget import Budget
from synthesis.compress.choose import milder, per_layer
from synthesis.progress import Monitor, NullMonitor

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """How hard to compress (the measurements behind the defaults: bench/README.md, "Why the compression options
    are set as they are").

    ``importance``: ``"taylor"`` (first-order Taylor expansion of the validation loss, Molchanov et al., ICLR 2017)
    or ``"l1"`` (kernel L1 norms, Li et al., ICLR 2017). ``filters``, ``connections``, ``buckets``: which stages
    run. The ``*_slack``: the probe accuracy a stage's per-layer choice may lose before its retraining, as a
    fraction of the error rate of always predicting the commonest class (:meth:`Context.probe_floor`), so that a
    slack means as much on an unbalanced set as on a balanced one; the tolerance itself is checked after
    retraining, and a stage that misses it is rolled back and retried more gently. ``probe_rows``: rows the
    per-layer searches score on, half validation and half training rows (validation rows alone are over-fitted
    by the search). ``stats_rows``: training rows each candidate's batch-norm statistics are re-estimated on before
    it is scored (:meth:`Context.recalibrated`), as pruning makes the stored ones stale. ``shares``: the shares of
    the retraining epochs or seconds for filters, connections (all rounds) and buckets. ``enough``: the compression
    ratio at which compression stops (None: as far as the tolerance allows), since past it each stage saves few
    bytes but still spends the tolerance. ``reserve``: the share of the tolerance each later stage keeps back from
    the stages before it. ``loss_rise``: how far, relative to the original network's, a kept network's
    validation loss may rise (None: no limit), as validation accuracy saturates on a few hundred rows.
    """

    importance: str = "taylor"
    filters: bool = True
    connections: bool = True
    buckets: bool = True
    filter_slack: float = 0.05
    prune_slack: float = 0.015
    bucket_slack: float = 0.03
    prune_rounds: int = 6
    bucket_rounds: int = 3
    probe_rows: int = 2048
    stats_rows: int = 1024
    lr_scale: float = 0.5
    patience: int = 4
    max_epochs: int = 30
    shares: tuple[float, float, float] = (0.25, 0.5, 0.25)
    output_atol: float = 1e-4
    enough: float | None = 100.0
    reserve: float = 0.25
    loss_rise: float | None = 0.3
    post_training: bool = True

    def __post_init__(self) -> None:
        if self.importance not in ("taylor", "l1"):
            raise ValueError(f"importance must be 'taylor' or 'l1', got {self.importance!r}")
        if min(self.filter_slack, self.prune_slack, self.bucket_slack, self.prune_rounds, self.bucket_rounds) < 0:
            raise ValueError("slacks and rounds must be non-negative")
        if not 0 <= self.reserve < 0.5:
            raise ValueError(f"reserve must be in [0, 0.5), got {self.reserve}")
        if self.loss_rise is not None and self.loss_rise < 0:
            raise ValueError(f"loss_rise must be non-negative or None, got {self.loss_rise}")
        if self.enough is not None and self.enough <= 1:
            raise ValueError(f"enough must be a ratio above 1 or None, got {self.enough}")


def grant(budget: Budget, share: float, max_epochs: int, until: float = 1.0) -> tuple[int, float | None]:
    """``(epochs, time limit)`` of one retraining worth ``share`` of the whole ``budget``, at most what is left
    before the fraction ``until``; epochs 0 when nothing is left."""
    if budget.epochs is not None:
        left = budget.epochs_left(until)
        return max(0, min(left, max_epochs, max(1, round(budget.epochs * share)))), None
    limit = min(budget.left(until), float(budget.seconds or 0.0) * share)
    return (max_epochs, limit) if limit > 1.0 else (0, None)


@dataclass(frozen=True)
class State:
    """A network during compression: spec, dense variables (masks and buckets applied), reparam, validation accuracy
    and loss (both NaN while not measured: :attr:`measured`, :meth:`Context.measure`)."""

    spec: Spec
    variables: dict[str, Any]
    reparam: Reparam
    accuracy: float
    loss: float  # validation cross-entropy

    @property
    def measured(self) -> bool:
        """Whether :attr:`accuracy` and :attr:`loss` were measured."""
        return not math.isnan(self.accuracy)


class Context:
    """The data, budget, options and monitor of one compression run, and its cache of compiled models."""

    def __init__(self, data: Dataset, budget: Budget, options: Options, config: TrainConfig,
                 monitor: Monitor | None = None, seed: int = 0) -> None:
        self.data, self.budget, self.options, self.config = data, budget, options, config
        self.monitor: Monitor = monitor or NullMonitor()
        self.seed = seed
        n = min(len(data.x_val), options.probe_rows // 2)
        order = np.random.default_rng(seed).permutation(len(data.x_train))
        rows = order[:n]
        self.x_probe = np.concatenate([data.x_val[:n], data.x_train[rows]])
        self.y_probe = np.concatenate([data.y_val[:n], data.y_train[rows]])
        self.x_stats = data.x_train[order[:options.stats_rows]]
        self.floor = 0.0
        self.original: State | None = None  # the network as it came (``compress`` sets it): :meth:`within`'s reference
        self.until = 1.0  # the fraction of the budget at which the running stage ends
        self._models: dict[str, Model] = {}
        self.dense_bytes = 0  # float32 bytes of the network being compressed (set by ``compress``)
        self._packed: tuple[State, bytes] | None = None
        self.proposed: dict[str, Any] = {}  # the per-layer choice behind the last candidate a stage proposed
        self.rejected: dict[str, Any] | None = None  # the last choice that missed the tolerance (None: none yet)
        self.val_row_s: float | None = None  # seconds per validation row of :meth:`state`'s evaluation (fastest)
        self.train_row_s: float | None = None  # seconds per row of the last retraining (evaluating in) or warm-up

    def model(self, spec: Spec) -> Model:
        """The compiled network of ``spec`` (one per distinct spec, so its evaluation compiles once)."""
        key = spec.to_json(indent=None)
        if key not in self._models:
            self._models[key] = build(spec)
        return self._models[key]

    def probe_accuracy(self, spec: Spec, variables: dict[str, Any]) -> float:
        """Accuracy on the probe rows the per-layer searches score on (:meth:`state` measures the validation rows)."""
        return float(evaluate(self.model(spec), variables, self.x_probe, self.y_probe)["accuracy"])

    def recalibrated(self, spec: Spec, variables: dict[str, Any]) -> dict[str, Any]:
        """``variables`` with their batch-norm statistics re-estimated on ``options.stats_rows`` training rows (what
        every candidate a per-layer search scores, and the network it then retrains, starts from)."""
        return recalibrate(self.model(spec), variables, self.x_stats)

    def choose(self, grids: Mapping[str, Sequence[T]], score: Callable[[Mapping[str, T]], float],
               floor: float) -> dict[str, T]:
        """One setting per layer (:func:`synthesis.compress.choose.per_layer` until the stage's share is spent),
        milder than :attr:`rejected` where a try of the running stage missed; remembered as :attr:`proposed`."""
        self.proposed = per_layer(milder(grids, self.rejected), score, floor, self.stop)
        return self.proposed

    def probe_floor(self, spec: Spec, variables: dict[str, Any], slack: float) -> float:
        """The probe accuracy a per-layer choice must keep: the network's minus ``slack`` times the error rate of
        the constant prediction of the commonest probe class."""
        counts = np.bincount(np.asarray(self.y_probe, np.int64))
        room = 1.0 - float(counts.max()) / len(self.y_probe) if len(self.y_probe) else 1.0
        return self.probe_accuracy(spec, variables) - slack * room

    def enough(self, state: State) -> bool:
        """Whether ``state`` is compressed as far as ``options.enough`` asks (its artifact that many times smaller
        than the dense float32 variables)."""
        if self.options.enough is None or not self.dense_bytes:
            return False
        return self.dense_bytes >= self.options.enough * len(self.packed(state))

    def packed(self, state: State) -> bytes:
        """``state``'s compressed artifact (:func:`core.artifact.encode`); the last one is kept, as a stage's last
        round, the next stage and the final packing ask for the same network."""
        if self._packed is None or self._packed[0] is not state:
            self._packed = (state, artifact.encode(state.spec, state.variables, state.reparam))
        return self._packed[1]

    def stop(self) -> bool:
        """Whether the running stage's share of the budget is spent."""
        return self.budget.used() >= self.until

    def tick(self) -> None:
        """Tell the monitor the progress (it may raise ``Cancelled`` or ``Stopped`` here)."""
        self.monitor.progress(min(self.budget.used(), 1.0), {})

    def state(self, spec: Spec, variables: dict[str, Any], reparam: Reparam) -> State:
        """A :class:`State` with its validation accuracy and loss measured."""
        began = time.perf_counter()
        scores = evaluate(self.model(spec), variables, self.data.x_val, self.data.y_val)
        took = (time.perf_counter() - began) / max(len(self.data.y_val), 1)
        self.val_row_s = took if self.val_row_s is None else min(self.val_row_s, took)
        return State(spec, variables, reparam, float(scores["accuracy"]), float(scores["loss"]))

    def measure(self, state: State) -> State:
        """``state``, measured on the validation rows where it was not."""
        return state if state.measured else self.state(state.spec, state.variables, state.reparam)

    @property
    def ceiling(self) -> float | None:
        """The validation loss a kept network may reach: :attr:`original`'s raised by ``options.loss_rise`` (None: no
        limit, or no original yet)."""
        rise = self.options.loss_rise
        return None if self.original is None or rise is None else self.original.loss * (1.0 + rise)

    def within(self, state: State) -> bool:
        """Whether ``state`` is within the running stage's tolerance: validation loss at most ``ceiling`` (None: any)
        and validation accuracy at least ``floor``, or :meth:`below_resolution`."""
        if self.ceiling is not None and state.loss > self.ceiling:
            return False
        return state.accuracy >= self.floor or self.below_resolution(state)

    def below_resolution(self, state: State) -> bool:
        """Whether ``state`` is at most one validation row less accurate than :attr:`original` while one row is
        worth more than the tolerance ``floor`` leaves, and its validation loss is no higher than the original's.

        Accuracy cannot resolve a tolerance finer than one row, so there the loss, which can, decides: a 120 s digits
        job (136 validation rows, one 0.74 points) could keep no network that changed any prediction, and turned
        down a retrained 16-value sharing whose loss had fallen from 0.146 to 0.112 for one image."""
        original, row = self.original, 1.0 / len(self.data.y_val)
        return (original is not None and original.accuracy - self.floor < row
                and state.accuracy >= original.accuracy - row - 1e-9 and state.loss <= original.loss)


def with_params(variables: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``variables`` with their ``params`` replaced."""
    return {**variables, "params": params}

