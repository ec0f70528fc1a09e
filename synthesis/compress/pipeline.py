"""Fine-grained synthesis end to end: shrink a trained network within an accuracy tolerance and pack it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core import artifact, tree
from core.data import Dataset
from core.evaluation import predict_proba
from core.reparam import Reparam
from core.spec import Spec
from core.train_config import TrainConfig
from domain.rules import DEFAULT_TOLERANCE
from synthesis.budget import Budget
from synthesis.calibrate import calibrated_like
from synthesis.compress.connections import weight_leaves
from synthesis.compress.context import Context, Options, State
from synthesis.compress.figures import dense_bytes, figures
from synthesis.compress.posttraining import (
    BOUNDS,
    Sharing,
    first_round,
    share_and_retrain,
    share_without_retraining,
)
from synthesis.compress.retrain import warm_up
from synthesis.compress.stages import bucket_stage, connection_stage, filter_stage
from synthesis.progress import Cancelled, Monitor


@dataclass(frozen=True)
class Compressed:
    """A compressed network: its (smaller) spec, dense-equivalent variables (pruned entries exactly zero, shared
    weights at their codebook values), the masks and codebooks as a :class:`Reparam`, the packed artifact
    (:mod:`core.artifact`; its length is the model's bytes), the verified ONNX export, the before / after figures
    and why it stopped (``completed`` or ``cancelled``).

    ``figures`` keys: ``tolerance``, ``val_accuracy_before`` / ``_after``, ``val_loss_before`` / ``_after``,
    ``ratio``, ``before`` / ``after`` (:func:`synthesis.compress.figures.figures` on the validation rows), ``bits``
    (k per shared layer), ``kept_fraction`` (per masked layer), ``stop_reason``, ``epochs_used`` (retraining
    epochs, for an epoch budget's accounting) and ``seconds``. All JSON-serialisable."""

    spec: Spec
    variables: dict[str, Any]
    reparam: Reparam
    artifact: bytes
    onnx: bytes
    figures: dict[str, Any]
    stop_reason: str

    @property
    def ratio(self) -> float:
        """Dense float32 bytes of the original network over the artifact's bytes."""
        return float(self.figures["ratio"])


RETRAINED_SHARE = 0.25
"""Of a time budget's compression, what sharing with retraining may spend before the stages (after sharing
without retraining, and as much again kept for that pass at the end): on a quiet machine a 120 s digits job's
sharing pass took 0.4 s, its stages got 12 s and kept nothing (4.3x), where retrained sharing had reached 8.1x in
13.5 s. Epoch budgets leave the stages their epochs and seeds (digits' 240-epoch bench fell from 44.9x to 28.8x
when retrained sharing ran before the stages there)."""

STAGE_ROOM = 8.0
"""A time budget's stages run only when what is left after sharing without retraining (and as much again kept for
that pass at the end) is at least this many times what that pass took: their per-layer searches score dozens of
networks where the pass scored a handful, and a 120 s digits job's 13.5 s of compression went to them before any
retraining. Short of that, the time goes to sharing with retraining
(:func:`synthesis.compress.posttraining.share_and_retrain`)."""

MEASURE_MARGIN = 0.5
"""A time budget's compression measures the original network first (ONNX export, verification, latency) and keeps
half that time back from its retraining for measuring the compressed network at its end; the rest of that
measurement comes out of the quarter of the fine share that :data:`synthesis.fine.TIME_SHARE` leaves. On short
budgets those fixed costs took several seconds past compression's share (bench/faults.py); keeping 1.5 times the
measurement back left a 120 s SMS Spam job's compression, whose two measurements of a 17M-parameter network take
about 12 of its 17.6 s, no time to try a single sharing bound (1.1x, where half gave 10.8x)."""


def compress(spec: Spec, variables: dict[str, Any], data: Dataset, *, tolerance: float = DEFAULT_TOLERANCE,
             seconds: float | None = None, epochs: int | None = None, seed: int = 0,
             monitor: Monitor | None = None, options: Options | None = None,
             config: TrainConfig | None = None, clock: Callable[[], float] = time.monotonic) -> Compressed:
    """Compress a trained network (NeuNetS' fine-grained synthesis; Han et al.'s Deep Compression, 2016).

    Stages, each kept only when the retrained network's validation accuracy is at least the original's minus
    ``tolerance`` (a fraction: 0.005 = 0.5 points; each stage but the last may spend ``options.reserve`` less of
    it than the stage after it; :meth:`Context.within` says when one row is allowed) and its validation loss at most
    ``1 + options.loss_rise`` times the original's:
    remove the least important filters and units; prune each
    neuron to its N most important inputs (N per layer, in rounds); share each layer's weights among k values
    (k per layer, 2-256). Every compressed start computes what it replaces (verified). Retraining spends either
    ``seconds`` of wall clock or ``epochs`` (reproducible with ``seed``); ``config`` gives the base training
    hyper-parameters (the learning rate is scaled by ``options.lr_scale``). With ``options.post_training``, the
    weights are first shared without retraining (:mod:`synthesis.compress.posttraining`; with ``seconds``, then a
    retrained sharing, and the stages only with :data:`STAGE_ROOM`), and the smaller of that network and the
    stages' ships. A ``Cancelled`` raised by ``monitor`` ends the run with the best accepted network so far;
    ``Stopped`` propagates.
    """
    options = options or Options()
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    began = clock()
    ctx = Context(data, Budget(seconds, epochs, clock=clock), options, config or TrainConfig(), monitor, seed)
    start = ctx.original = ctx.state(spec, variables, Reparam())
    measuring = clock()
    before = figures(spec, variables, None, start.accuracy, data.x_val)[0]
    if seconds is not None:  # measuring the compressed network at the end costs what measuring this one did
        now = clock()
        left = seconds - (now - began) - (now - measuring) * MEASURE_MARGIN
        ctx.budget = Budget(max(left, 1e-3), clock=clock)
    ctx.dense_bytes = dense_bytes(spec)
    ctx.monitor.stage("compressing")
    best, stop_reason = start, "completed"
    enabled = [(s, share) for s, share, on in zip((filter_stage, connection_stage, bucket_stage), options.shares,
                                                   (options.filters, options.connections, options.buckets),
                                                   strict=True) if on]
    total = sum(share for _, share in enabled) or 1.0
    fallback = start
    try:
        first = 0.0
        if options.post_training:  # a network that ships even when no retraining fits in the budget
            ctx.floor, ctx.until = start.accuracy - tolerance, 1.0
            sharing = Sharing(ctx, start)
            warmed = warm_up(ctx, start, sharing.options) if seconds is not None else None
            fallback, bound = share_without_retraining(ctx, sharing)
            first = ctx.budget.used()  # the pass at the end costs about as much: the stages end that much earlier
            if warmed is not None:  # (its compilation is the first retraining's, not the pass's: not in ``first``)
                warmed()
            if seconds is not None:  # a time budget: the stages may not get to retrain, so sharing retrains first
                hurried = 1.0 - 2 * first < STAGE_ROOM * first and first_round(bound) < len(BOUNDS)
                ctx.until = 1.0 if hurried else first + (1.0 - 2 * first) * RETRAINED_SHARE
                fallback = share_and_retrain(ctx, sharing, bound, 1.0) or fallback
                enabled = [] if hurried else enabled
        began_stages, end = ctx.budget.used(), 0.0
        span = max(1.0 - first - began_stages, 0.0)
        for i, (stage, share) in enumerate(enabled):
            end += share / total
            ctx.until = min(began_stages + span * end, 1.0)
            if best is not start and ctx.enough(best):
                break
            ctx.floor = start.accuracy - tolerance * (1.0 - options.reserve * (len(enabled) - 1 - i))
            best = stage(ctx, best)
        if options.post_training and best is not start and not shared_weights(best):
            ctx.floor, ctx.until = start.accuracy - tolerance, 1.0
            best = share_without_retraining(ctx, Sharing(ctx, best))[0]
    except Cancelled as stop:
        stop_reason = stop.reason
    if best is start or (fallback is not start and len(ctx.packed(fallback)) < len(ctx.packed(best))):
        best = fallback  # (packing the original network, when either is it, would only cost time)
    return finish(ctx, start, best, stop_reason, tolerance, before, lambda: clock() - began)


def shared_weights(state: State) -> bool:
    """Whether any of ``state``'s connection weights share values (bucketing kept a round)."""
    return any(p in state.reparam.sizes for p in weight_leaves(state.spec))


def finish(ctx: Context, start: State, best: State, stop_reason: str, tolerance: float,
           before: dict[str, Any], took: Callable[[], float]) -> Compressed:
    """Pack the accepted network, check the artifact decodes to it bit for bit, measure it (`before`: the
    original's figures; `took`: the seconds compression has taken so far). Its logits are first scaled so that its
    probabilities match the original's (`synthesis.calibrate.calibrated_like`): the original ships calibrated."""
    reference = predict_proba(ctx.model(start.spec), start.variables, ctx.data.x_val)
    best = replace(best, variables=calibrated_like(best.spec, best.variables, reference, ctx.data.x_val, ctx.monitor))
    packed = ctx.packed(best)
    check_round_trip(packed, best)
    after, delivered = figures(best.spec, best.variables, best.reparam, best.accuracy, ctx.data.x_val, packed)
    measured = {"tolerance": tolerance, "val_accuracy_before": start.accuracy, "val_accuracy_after": best.accuracy,
              "val_loss_before": start.loss, "val_loss_after": best.loss,
              "ratio": before["dense_bytes"] / after["compressed_bytes"], "before": before, "after": after,
              "bits": {p: int(k) for p, k in best.reparam.sizes.items()},
              "kept_fraction": {p: float(np.mean(np.asarray(m) != 0)) for p, m in best.reparam.masks.items()},
              "stop_reason": stop_reason, "epochs_used": ctx.budget.epochs_used,
              "seconds": round(took(), 3)}
    ctx.monitor.event("compressed", {k: measured[k] for k in ("ratio", "val_accuracy_before", "val_accuracy_after")})
    return Compressed(best.spec, best.variables, best.reparam, packed, delivered.onnx, measured, stop_reason)


def check_round_trip(packed: bytes, state: State) -> None:
    """Raise ``RuntimeError`` unless ``packed`` decodes to exactly ``state``'s spec and variables."""
    decoded = artifact.decode(packed)
    want = {k: tree.flatten(v) for k, v in state.variables.items()}
    got = {k: tree.flatten(v) for k, v in decoded.variables.items()}
    same = decoded.spec.to_json() == state.spec.to_json() and want.keys() == got.keys() and all(
        want[k].keys() == got[k].keys()
        and all(np.asarray(want[k][p], np.float32).tobytes() == got[k][p].tobytes() for p in want[k])
        for k in want)
    if not same:
        raise RuntimeError("the compressed artifact does not decode to the compressed network")
