"""Retraining a compressed network to early stopping, its masks and buckets held (Han et al., 2016)."""

from __future__ import annotations

from dataclasses import replace

from core.train_config import Progress
from core.training import train
from synthesis.compress.context import Context, State, grant


def retrain(ctx: Context, state: State, share: float, stage: str) -> State:
    """Return ``state`` fine-tuned for ``share`` of the budget (at a ``lr_scale`` of the base learning rate, early
    stopping on validation accuracy), or ``state`` itself when that validates better or nothing is left."""
    epochs, limit = grant(ctx.budget, share, ctx.options.max_epochs, ctx.until)
    if epochs == 0:
        return state
    ctx.seed += 1
    config = replace(ctx.config, epochs=epochs, learning_rate=ctx.config.learning_rate * ctx.options.lr_scale,
                     patience=ctx.options.patience, time_limit_s=limit, seed=ctx.seed, progress_every=0)
    r = state.reparam
    held = r if (r.masks or r.indices) else None

    def hook(_: Progress) -> None:
        ctx.tick()

    result = train(ctx.model(state.spec), ctx.data, config, variables=state.variables, reparam=held,
                   on_progress=hook)
    ctx.budget.spend_epochs(len(result.history))
    trained = ctx.state(state.spec, result.variables, r)
    ctx.reporter.event("compress_retrain", {"stage": stage, "epochs": len(result.history),
                                            "stop_reason": result.stop_reason, "val_accuracy": trained.accuracy,
                                            "start_accuracy": state.accuracy})
    return trained if trained.accuracy >= state.accuracy else state
