"""Retraining a compressed network to early stopping, its masks and buckets held (Han et al., 2016)."""

from __future__ import annotations

from dataclasses import replace

from core.data import Dataset
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
    ``options.max_epochs``; :func:`retraining`, early stopping on validation accuracy), or ``state`` itself when that
    validates better or nothing is left."""
    epochs, limit = grant(ctx.budget, share, max_epochs or ctx.options.max_epochs, ctx.until)
    if epochs == 0:
        return state
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
        ctx.train_row_s = result.elapsed_s / (result.steps * config.batch_size)
    trained = ctx.state(state.spec, result.variables, r)
    ctx.reporter.event("compress_retrain", {"stage": stage, "epochs": len(result.history),
                                            "stop_reason": result.stop_reason, "val_accuracy": trained.accuracy,
                                            "start_accuracy": state.accuracy})
    return trained if trained.accuracy >= state.accuracy else state


def plan_for(ctx: Context, epochs: int, limit: float) -> tuple[int, int]:
    """:func:`planned` for a retraining of ``ctx``'s network on at most :data:`RETRAIN_ROWS` training rows and
    :data:`VAL_ROWS` validation rows, at the last retraining's pace (before one: a train step taken as
    ``1 / EVAL_PER_STEP`` times the validation evaluation's time per row; ``epochs`` and the sample as they are
    while neither is measured)."""
    rows, val_rows = min(len(ctx.data.y_train), RETRAIN_ROWS), min(len(ctx.data.y_val), VAL_ROWS)
    if ctx.val_row_s is None:
        return epochs, rows
    train_row_s = ctx.train_row_s if ctx.train_row_s is not None else ctx.val_row_s / EVAL_PER_STEP
    return planned(epochs, limit, rows, val_rows, train_row_s, ctx.val_row_s)
