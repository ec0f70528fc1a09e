"""Retraining a compressed network to early stopping, its masks and buckets held (Han et al., 2016)."""

from __future__ import annotations

from dataclasses import replace

from core.train_config import TrainConfig
from core.training import train
from synthesis.compress.context import Context, Options, State, grant
from synthesis.space.hparams import carried_rate
from synthesis.split import training_sample

RETRAIN_ROWS = 10_000
"""Under a time budget, the most training rows one retraining trains on (a stratified sample, drawn anew for each
retraining; the validation rows stay whole): fine-tuning a trained network's masks and codebooks needs steps more
than fresh rows, and a 120 s MNIST job's retraining spent its 15 s on part of one 54,000-row epoch, a 1,200 s one's
about 40 s per epoch, so that no pruning round was retrained. Epoch budgets keep every row (their unit is an epoch
of the training set)."""


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
    config = retraining(ctx.config, ctx.options, epochs, limit, ctx.seed)
    r = state.reparam
    held = r if (r.masks or r.indices) else None
    data = ctx.data if ctx.budget.reproducible else training_sample(ctx.data, RETRAIN_ROWS, ctx.seed)
    result = train(ctx.model(state.spec), data, config, variables=state.variables, reparam=held, check=ctx.tick)
    ctx.budget.spend_epochs(len(result.history))
    trained = ctx.state(state.spec, result.variables, r)
    ctx.reporter.event("compress_retrain", {"stage": stage, "epochs": len(result.history),
                                            "stop_reason": result.stop_reason, "val_accuracy": trained.accuracy,
                                            "start_accuracy": state.accuracy})
    return trained if trained.accuracy >= state.accuracy else state
