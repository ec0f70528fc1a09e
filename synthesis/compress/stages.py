"""The three stages, each accepted only when its retrained network is within the tolerance, else rolled back and
retried more gently: filters, connections (iterated), buckets."""

from __future__ import annotations

from collections.abc import Callable

from synthesis.compress.buckets import choose_buckets
from synthesis.compress.connections import prune_round
from synthesis.compress.context import Context, State
from synthesis.compress.filters import select_filters
from synthesis.compress.retrain import retrain

ATTEMPTS = 2


def _rounds(ctx: Context, state: State, stage: str, slack: float, share: float,
            choose: Callable[[Context, State, float], State | None], rounds: int, once: bool) -> State:
    """Up to ``rounds`` tries of ``choose`` then retraining (each worth ``share / rounds``); a try within the
    tolerance is kept (and ends the loop when ``once`` or when it is compressed :meth:`Context.enough`), a miss is
    undone, halves the slack and restricts the next try to settings milder than its own
    (:func:`synthesis.compress.choose.milder`; each try is reported as a ``compress_round`` event)."""
    ctx.rejected = None
    for _ in range(rounds):
        if ctx.stop():
            break
        candidate = choose(ctx, state, slack)
        if candidate is None:
            break
        trained = _retrained(ctx, candidate, share / max(rounds, 1), stage)
        kept = ctx.within(trained)
        ctx.monitor.event("compress_round", {"stage": stage, "kept": kept, "val_accuracy": trained.accuracy,
                                             "floor": ctx.floor, "val_loss": trained.loss,
                                             "ceiling": ctx.ceiling,
                                             "slack": slack})
        if kept:
            state, ctx.rejected = trained, None
            if once or ctx.enough(state):
                break
        else:
            slack, ctx.rejected = slack / 2, ctx.proposed
    return state


def _retrained(ctx: Context, candidate: State, share: float, stage: str) -> State:
    """``candidate`` retrained; retrained once more from where it got to when that is still below the tolerance."""
    trained = retrain(ctx, candidate, share, stage)
    if not ctx.within(trained) and not ctx.stop():
        trained = retrain(ctx, trained, share / 2, stage)
    return trained


def _filters(ctx: Context, state: State, slack: float) -> State | None:
    candidate, removed = select_filters(ctx, state, slack)
    if not removed:
        return None
    ctx.monitor.event("compress_filters", {"removed": {n: len(u) for n, u in removed.items()}})
    return candidate


def filter_stage(ctx: Context, state: State) -> State:
    """Remove filters and units (physically), retrain; halve the slack once if that misses the tolerance."""
    return _rounds(ctx, state, "filters", ctx.options.filter_slack, ctx.options.shares[0], _filters, ATTEMPTS, True)


def connection_stage(ctx: Context, state: State) -> State:
    """Prune connections in rounds, each retrained; a round that misses the tolerance is undone and the slack
    halved."""
    return _rounds(ctx, state, "connections", ctx.options.prune_slack, ctx.options.shares[1], prune_round,
                   ctx.options.prune_rounds, False)


def bucket_stage(ctx: Context, state: State) -> State:
    """Bucket the weights, retrain the codebooks, in rounds (each sharing among fewer values); a round that misses
    the tolerance is undone and the slack halved."""
    return _rounds(ctx, state, "buckets", ctx.options.bucket_slack, ctx.options.shares[2], choose_buckets,
                   ctx.options.bucket_rounds, False)
