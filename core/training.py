"""Supervised training of a compiled network: AdamW or Nesterov SGD, warm-up + cosine schedule, early stopping.

:func:`train` runs epochs of jitted steps (data parallel over the local devices, see
:mod:`core.parallel`), evaluates on the validation set after every epoch, keeps the weights of the
best validation accuracy, and stops on completion, on stalled validation accuracy (``patience``)
or before a wall-clock deadline would be overrun. With a :class:`~core.reparam.Reparam` the
optimiser works on the *trainable* pytree (shared leaves as codebooks) and the loss sees
``materialise(trainable, reparam)``; masked weights stay exactly zero.

References: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (AdamW), 2019;
Szegedy et al., "Rethinking the Inception Architecture" (label smoothing), 2016.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core import parallel, programs
from core import reparam as rp
from core.data import (
    Dataset,
    prefetch_to_device,
    steps_per_epoch,
    train_batches,
)
from core.evaluation import evaluate, evaluate_on_mesh, predict_proba
from core.model import Model
from core.step import TrainState, TrainStep, init_state, make_optimizer, make_train_step
from core.train_config import Progress, TrainConfig, TrainResult

__all__ = [
    "Progress",
    "TrainConfig",
    "TrainResult",
    "TrainState",
    "TrainStep",
    "evaluate",
    "make_optimizer",
    "make_train_step",
    "predict_proba",
    "train",
]


EVAL_PER_STEP = 0.5
"""Until the first validation pass is timed, the deadline counts it as this fraction of a train step per batch of
validation rows (a forward pass without the backward). Counted as free, the first pass of a 54,000-row MNIST
epoch cut at its deadline ran 2.4 s past the final training's share (6,000 rows at about 1,500 images/s on two
cores), time that compression, which follows, then lacked."""


def train(
    model: Model,
    data: Dataset,
    config: TrainConfig,
    *,
    variables: dict[str, Any] | None = None,
    reparam: rp.Reparam | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    devices: Sequence[parallel.Device] | None = None,
    check: Callable[[], None] | None = None,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train ``model`` on ``data`` and return the best validation epoch's weights.

    ``variables`` default to ``model.init(fold_in(key(seed), 0))``. ``devices`` default to every
    local device; the batch size is rounded up to a multiple of their count. The same seed gives a
    bit-identical result on the same devices when no deadline cuts the run short (on GPU only with
    ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``, which the calling process must set).
    ``check`` is called before every step; an exception it raises ends the run and propagates (a caller's
    cancellation takes effect within a step, not at the epoch's end). ``on_epoch_end(epoch, variables)`` receives
    each epoch's weights after its evaluation (on the device: a caller that keeps them copies them to the host).
    """
    start = time.perf_counter()
    deadline = math.inf if config.time_limit_s is None else start + config.time_limit_s
    mesh = parallel.data_mesh(devices)
    root = jax.random.key(config.seed)
    if variables is None:
        variables = model.init(jax.random.fold_in(root, 0))
    n = len(data.x_train)
    batch = parallel.round_batch(min(config.batch_size, n), mesh)
    per_epoch = steps_per_epoch(n, batch)
    optimizer = make_optimizer(config, config.epochs * per_epoch)
    given, reparam = reparam, None if reparam is None else programs.padded(reparam)  # one program for any k
    state = parallel.replicate(init_state(model, variables, optimizer, reparam), mesh)
    step_fn = make_train_step(model, optimizer, config, reparam, mesh, total_steps=config.epochs * per_epoch)
    key = parallel.replicate(jax.random.fold_in(root, 1), mesh)

    history: list[dict[str, float]] = []
    best: tuple[int, float, float, Any] | None = None  # (epoch, val accuracy, val loss, host state parts)
    steps, stop_reason, since_best = 0, "completed", 0
    step_s, eval_s = 0.0, None  # latest measured durations (a step includes its compilation once)

    def elapsed() -> float:
        return time.perf_counter() - start

    planned, epoch, last_step = config.epochs, 0, config.epochs * per_epoch  # the schedule ends at ``last_step``
    timed_from: tuple[int, float] | None = None  # (steps, seconds) when the first step after compilation ended
    while epoch < planned:
        epoch += 1
        metrics: list[dict[str, Any]] = []
        pending: dict[str, Any] | None = None
        last_done = time.perf_counter()
        batches = train_batches(data.x_train, data.y_train, batch, config.seed, epoch)
        for x, y in prefetch_to_device(batches, mesh):
            if check is not None:
                check()
            in_flight = 1 if pending is not None else 0
            evaluating = eval_s if eval_s is not None else step_s * len(data.x_val) / batch * EVAL_PER_STEP
            if steps >= last_step:  # a schedule shortened within an epoch (``shortened``) has ended
                break
            if time.perf_counter() + step_s * (1 + in_flight) + evaluating > deadline:
                stop_reason = "deadline"
                break
            state, out = step_fn(state, x, y, key)
            steps += 1
            metrics.append(out)
            # keep one step queued and time the one before it (an epoch's first step: itself; the run's first
            # step, mostly compilation, is not timed: taken as a step's time it stopped short runs after one step)
            done = out if pending is None else pending
            jax.block_until_ready(done)  # type: ignore[no-untyped-call]
            now = time.perf_counter()
            if pending is not None:
                step_s = now - last_done
            elif steps > 1:
                step_s = max(step_s, now - last_done)
            if pending is not None and timed_from is None:
                timed_from = (steps, now)
            pending, last_done = out, now
            if config.until_deadline and timed_from is not None and steps - timed_from[0] >= TIMED_STEPS \
                    and math.isfinite(deadline):
                mean_step_s = (now - timed_from[1]) / (steps - timed_from[0])
                fit = shortened(steps, last_step, deadline - now - evaluating, mean_step_s)
                if fit < last_step:
                    last_step, planned = fit, max(epoch, math.ceil(fit / per_epoch))
                    step_fn.retime(fit)
            if on_progress and config.progress_every and steps % config.progress_every == 0:
                on_progress(Progress(epoch, steps, _mean(metrics[-config.progress_every :]),
                                     elapsed()))
        if not metrics and best is not None:
            break
        t0 = time.perf_counter()
        params = _materialised(state.params, reparam)
        val = evaluate_on_mesh(model, {"params": params, "batch_stats": state.batch_stats},
                               data.x_val, data.y_val, config.eval_batch_size, mesh)
        eval_s = time.perf_counter() - t0
        if on_epoch_end is not None:
            on_epoch_end(epoch, {"params": params, "batch_stats": state.batch_stats} if "batch_stats" in variables
                         else {"params": params})
        record = {"epoch": float(epoch), "steps": float(len(metrics)),
                  **{f"train_{k}": v for k, v in _mean(metrics).items()},
                  **{f"val_{k}": v for k, v in val.items()}, "eval_s": eval_s, "elapsed_s": elapsed()}
        history.append(record)
        if best is None or config.keep_last or better(val, best[1], best[2]):
            best = (epoch, val["accuracy"], val["loss"], jax.device_get((state.params, state.batch_stats)))
            since_best = 0
        else:
            since_best += 1
        if on_progress:
            on_progress(Progress(epoch, steps, record, elapsed()))
        if stop_reason == "deadline":
            break
        if config.patience is not None and since_best >= config.patience:
            stop_reason = "early_stopping" if epoch < planned else "completed"
            break
        if config.until_deadline and math.isfinite(deadline) and step_s > 0 and steps < last_step:
            planned = replanned(epoch, config.epochs, deadline - time.perf_counter(), step_s * per_epoch + eval_s)
            last_step = planned * per_epoch
            step_fn.retime(last_step)

    assert best is not None  # an epoch is always evaluated
    best_epoch, best_acc, _, (trainable, stats) = best
    trainable = jax.tree.map(jnp.asarray, trainable)
    result_vars: dict[str, Any] = {"params": _materialised(trainable, reparam)}
    if "batch_stats" in variables:
        result_vars["batch_stats"] = jax.tree.map(jnp.asarray, stats)
    return TrainResult(
        variables=result_vars, history=tuple(history), best_epoch=best_epoch,
        best_metric=float(best_acc), stop_reason=stop_reason, elapsed_s=elapsed(), steps=steps,
        trainable=programs.unpadded(trainable, given) if given is not None else None, step_s=step_s,
    )


UNTIL_DEADLINE_MARGIN = 0.97
"""The share of the time left that a run trained until its deadline plans to fill with whole epochs (step times
vary by a few per cent between epochs; a schedule cut short by the deadline ends at a high learning rate)."""


def replanned(epoch: int, first_plan: int, seconds_left: float, epoch_s: float) -> int:
    """The epochs a run trained until its deadline (``TrainConfig.until_deadline``) plans after ``epoch``: those done
    and the whole epochs (training and validation, ``epoch_s`` each) that fit in ``UNTIL_DEADLINE_MARGIN`` of
    ``seconds_left``, at most twice the caller's ``first_plan`` (a misjudged pace cannot run away)."""
    more = int(UNTIL_DEADLINE_MARGIN * max(seconds_left, 0.0) / max(epoch_s, 1e-9))
    return max(epoch, min(epoch + more, 2 * first_plan))


TIMED_STEPS = 8
"""Steps timed after compilation before a run trained until its deadline may shorten its schedule within an epoch
(``shortened``): one step's time varies too much to plan on."""
IN_FLIGHT = 2
"""Steps that the deadline's check keeps room for (the one queued and the next): a shortened schedule ends before
them."""
SHORTEN_BELOW = 0.99
"""A schedule is shortened within an epoch only to end before this fraction of its planned steps: the deadline cuts
the last per cent, where a cosine's rate is near zero, and the rate is not re-planned at every step."""


def shortened(done: int, last_step: int, seconds_left: float, step_s: float) -> int:
    """The step at which a run trained until its deadline ends its schedule, ``done`` steps in: ``last_step`` while
    nearly all steps left fit in ``UNTIL_DEADLINE_MARGIN`` of ``seconds_left`` at ``step_s`` each, else the last
    step that fits. Replanned only between epochs, a run whose first epoch outlasts its deadline (a 120 s job on
    MNIST's 53,000 rows) was cut at its learning rate's peak."""
    fit = done + int(UNTIL_DEADLINE_MARGIN * max(seconds_left, 0.0) / max(step_s, 1e-9)) - IN_FLIGHT
    return max(fit, done + 1) if fit < SHORTEN_BELOW * last_step else last_step


def better(val: Mapping[str, float], best_accuracy: float, best_loss: float) -> bool:
    """Whether an epoch's validation ``{"accuracy", "loss"}`` beats the best so far: higher accuracy, or the
    same accuracy at a lower loss — on a small validation set accuracy saturates early in a schedule, and the
    first epoch to reach it is rarely the best trained one."""
    if val["accuracy"] != best_accuracy:
        return val["accuracy"] > best_accuracy
    return val["loss"] < best_loss


_materialise = jax.jit(rp.materialise)  # one program per network, where each leaf's gather compiled its own


def _materialised(params: Any, reparam: rp.Reparam | None) -> Any:
    return params if reparam is None else _materialise(params, reparam)


def _mean(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Return the mean of each metric over a list of per-step device scalars (one transfer)."""
    if not metrics:
        return {"loss": math.nan, "accuracy": math.nan}
    stacked = {k: jnp.stack([m[k] for m in metrics]) for k in metrics[0]}
    return {k: float(np.mean(v)) for k, v in jax.device_get(stacked).items()}
