"""Retraining a compressed network to early stopping, its masks and buckets held (Han et al., 2016)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

import jax.numpy as jnp
import numpy as np

from core import tree
from core.data import Dataset
from core.reparam import Reparam
from core.train_config import TrainConfig
from core.training import EVAL_PER_STEP, train
from synthesis.compress.context import Context, Options, State, grant
from synthesis.space.hparams import carried_rate
from synthesis.split import training_sample

RETRAIN_ROWS = 10_000
"""Under a time budget, the most training rows one retraining trains on (a stratified sample, drawn anew for each
retraining; the validation rows stay whole): fine-tuning a trained network's masks and codebooks needs steps more
than fresh rows, and a 120 s MNIST job's retraining spent its 15 s on part of one 54,000-row epoch, a 1,200 s one's
about 40 s per epoch, so that no pruning round was retrained. Epoch budgets keep every row (their unit is an epoch
of the training set)."""


VAL_ROWS = 2048
"""Under a time budget, the validation rows a retraining picks its best epoch on (the first ones; the network it
returns is then measured on all of them, :meth:`Context.state`): each epoch of a 120 s MNIST job's retraining
evaluated 6,000 rows, 3.9 s of its 7 s."""
MIN_ROWS = 512
"""The fewest training rows :func:`planned` cuts a retraining to."""


def planned(epochs: int, limit: float, rows: int, val_rows: int, train_row_s: float, val_row_s: float
            ) -> tuple[int, int]:
    """``(epochs, rows)`` of a retraining of at most ``epochs`` epochs of ``rows`` training rows (and ``val_rows``
    evaluated after each) that ends within ``limit`` seconds at ``train_row_s`` and ``val_row_s`` seconds per row:
    fewer epochs, and below one epoch fewer rows (at least :data:`MIN_ROWS`), so that its learning-rate schedule
    runs to its end instead of being cut by the deadline at its peak."""
    per_epoch = rows * train_row_s + val_rows * val_row_s
    if limit >= per_epoch:
        return max(1, min(epochs, int(limit // per_epoch))), rows
    room = limit - val_rows * val_row_s
    return 1, max(min(rows, int(room / train_row_s)), min(rows, MIN_ROWS))


def retraining(config: TrainConfig, options: Options, epochs: int, limit: float | None, seed: int) -> TrainConfig:
    """The training hyper-parameters of one retraining: ``config``'s with AdamW at ``options.lr_scale`` of its
    learning rate (of AdamW's equivalent, :func:`synthesis.space.hparams.carried_rate`, for a network trained with
    SGD), for at most ``epochs`` (and ``limit`` seconds), stopping after ``options.patience`` epochs without a better
    validation epoch. Compression's settings (``Options``) were measured with AdamW's fine-tuning; a per-weight
    step also suits layers whose masks and shared values change the scale of their gradients."""
    rate = carried_rate(config.learning_rate, config.optimizer, "adamw")
    return replace(config, epochs=epochs, learning_rate=rate * options.lr_scale, optimizer="adamw",
                   warmup_fraction=TrainConfig.warmup_fraction, patience=options.patience, time_limit_s=limit,
                   seed=seed, progress_every=0)


def retrain(ctx: Context, state: State, share: float, stage: str, max_epochs: int | None = None) -> State:
    """Return ``state`` fine-tuned for ``share`` of the budget and at most ``max_epochs`` (default
    ``options.max_epochs``; :func:`retraining`, early stopping on validation accuracy), or ``state`` itself (measured,
    :meth:`Context.measure`) when nothing is left or when it was measured and validates better."""
    epochs, limit = grant(ctx.budget, share, max_epochs or ctx.options.max_epochs, ctx.until)
    if epochs == 0:
        return ctx.measure(state)
    ctx.seed += 1
    data = ctx.data
    if limit is not None:  # a time budget: a sample, planned to end its schedule within the limit
        epochs, rows = plan_for(ctx, epochs, limit)
        data = training_sample(ctx.data, rows, ctx.seed)
        if len(data.y_val) > VAL_ROWS:
            data = Dataset(data.x_train, data.y_train, data.x_val[:VAL_ROWS], data.y_val[:VAL_ROWS])
    config = retraining(ctx.config, ctx.options, epochs, limit, ctx.seed)
    r = state.reparam
    held = r if (r.masks or r.indices) else None
    result = train(ctx.model(state.spec), data, config, variables=state.variables, reparam=held, check=ctx.tick)
    ctx.budget.spend_epochs(len(result.history))
    if limit is not None and result.steps:
        # its wall time per row, evaluation in (which the plan adds again: plans err short); its steps' own time
        # planned a 300 s MNIST job's second retraining to two epochs, and the deadline cut the second
        ctx.train_row_s = result.elapsed_s / (result.steps * config.batch_size)
    trained = ctx.state(state.spec, result.variables, r)
    ctx.monitor.event("compress_retrain", {"stage": stage, "epochs": len(result.history),
                                           "stop_reason": result.stop_reason, "val_accuracy": trained.accuracy,
                                           "start_accuracy": state.accuracy if state.measured else None})
    return trained if not state.measured or trained.accuracy >= state.accuracy else state


def plan_for(ctx: Context, epochs: int, limit: float) -> tuple[int, int]:
    """:func:`planned` for a retraining of ``ctx``'s network on at most :data:`RETRAIN_ROWS` training rows and
    :data:`VAL_ROWS` validation rows, at the pace the last retraining or :func:`warm_up` timed (before either: a
    train step taken as ``1 / EVAL_PER_STEP`` times the validation evaluation's time per row; ``epochs`` and the
    sample as they are while neither is measured)."""
    rows, val_rows = min(len(ctx.data.y_train), RETRAIN_ROWS), min(len(ctx.data.y_val), VAL_ROWS)
    if ctx.val_row_s is None:
        return epochs, rows
    train_row_s = ctx.train_row_s if ctx.train_row_s is not None else ctx.val_row_s / EVAL_PER_STEP
    return planned(epochs, limit, rows, val_rows, train_row_s, ctx.val_row_s)


WARM_STEPS = 3
"""Train steps :func:`warm_up` takes: the first compiles, the later ones time the step for planning
(:attr:`Context.train_row_s`)."""


def warm_up(ctx: Context, state: State, shared: Iterable[str]) -> Callable[[], None]:
    """Start compiling, in a background thread, the program a time-budgeted retraining of ``state``'s network with
    the leaves ``shared`` shared runs (its train step, with codebooks of any k: :func:`core.programs.padded`), by
    training :data:`WARM_STEPS` steps on the first training rows, and timing its step for the first retraining's plan
    (:attr:`Context.train_row_s`); return the function that waits for it to end. The thread is a daemon: a run that
    ends early (cancelled) leaves it to finish its few steps.

    Compilation is single-threaded where evaluation uses every core, so it overlaps the sharing pass that precedes
    the retraining: a 120 s MNIST job's first retraining spent about 2.4 s of its 3.8 s compiling its step, and,
    planned at twice the validation pass's time per row (a step took four times that), its schedule was cut at its
    peak after 12 of 113 steps, 4 validation images short of the tolerance. Timed beside the sharing pass, the step
    is slower than alone (0.12-0.15 s against 0.06 s there), so that plan errs short; later ones use the pace
    the retraining itself timed. The throwaway run changes nothing a retraining computes (the step is kept per network
    and settings, :func:`core.programs.jitted_step`)."""
    params = state.variables["params"]
    flat = tree.flatten(params)
    indices = {p: jnp.zeros(np.shape(flat[p]), jnp.int32) for p in shared}  # any k: codebooks are padded
    held = state.reparam  # its masks and shared leaves, as the retraining holds them
    reparam = Reparam(held.masks, {**held.indices, **indices}, {**held.sizes, **dict.fromkeys(indices, 1)})
    config = retraining(ctx.config, ctx.options, 1, None, 0)
    n = min(WARM_STEPS * config.batch_size, len(ctx.data.y_train))
    val = min(config.eval_batch_size, len(ctx.data.y_val))  # the evaluation program measuring already compiled
    data = Dataset(ctx.data.x_train[:n], ctx.data.y_train[:n], ctx.data.x_val[:val], ctx.data.y_val[:val])
    model = ctx.model(state.spec)

    def run() -> None:
        try:
            result = train(model, data, config, variables=state.variables, reparam=reparam)
        except Exception:  # a warm-up only: the retraining itself meets whatever failed here
            return
        if result.step_s and ctx.train_row_s is None:
            ctx.train_row_s = result.step_s / config.batch_size

    thread = threading.Thread(target=run, name="compile-retraining", daemon=True)
    thread.start()
    return thread.join
