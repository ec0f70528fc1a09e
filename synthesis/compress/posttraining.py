"""Weight sharing without retraining: each layer's k from its quantisation error, one error bound for the whole
network chosen on validation (post-training quantisation).

Bucketing with retraining (:mod:`synthesis.compress.buckets`) needs epochs that a job's fine-synthesis share often
does not hold: a 120 s digits job left compression 13.5 s, which its per-layer searches spent before any
retraining, and it shipped 1.2x smaller. Here every shareable leaf is clustered once per k
(:func:`core.reparam.shared_leaf`, 1-D k-means), each k's relative squared error ``|w_k - w|^2 / |w|^2`` noted,
and a bound ``e`` shared by all layers picks, per layer, the fewest values whose error is at most ``e``: a layer
whose weights cluster well gets fewer values than one whose weights do not (the error-driven bit allocation of
HAWQ-style mixed precision, Dong et al., ICCV 2019, with the weight's own error as the sensitivity). The largest
bound whose network (its own batch-norm statistics kept) is within the tolerance on the validation rows is found by
bisection over :data:`BOUNDS`: a handful of whole-network evaluations instead of a per-layer search's dozens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from core import tree
from core.evaluation import evaluate
from core.reparam import FIT_SAMPLE, Reparam, fit_centroids, nearest, shared_leaf
from synthesis.compress.buckets import K_GRID, shareable, worth_it
from synthesis.compress.context import Context, State, with_params
from synthesis.compress.reinit import compressed_start, verify_same_outputs
from synthesis.compress.retrain import retrain

SCREEN_ROWS = 1024
"""Validation rows the bisection over :data:`BOUNDS` screens each bound on, when there are more than twice as many
(the bound it finds is then confirmed on all of them): evaluating MNIST's 6,000 took 4 s of a 120 s job's 12 s of
compression, per bound."""
FINE = 4
"""Bounds per step of about 1.9 times the error (about half a bit for most layers): at one, MNIST's 120 s job kept
k=16 at one bound and missed at the next, 6.6x where the same layers at 8 values give 10x."""
BOUNDS = tuple(float(e) for e in np.geomspace(1e-4, 0.25, 12 * FINE + 1))
"""Relative squared errors a layer's sharing may add, mildest first (each about 1.18 times the one before; bounds
that pick the same k for every layer are measured once)."""

Option = tuple[int, jnp.ndarray, jnp.ndarray, float]  # k, indices, dense leaf, relative squared error


class LeafOptions:
    """The ways one leaf may be shared: each k of :data:`K_GRID` worth it (:func:`worth_it`), with the relative
    squared error ``|w_k - w|^2 / |w|^2`` of its centroids on (at most :data:`core.reparam.FIT_SAMPLE` of) the
    kept values, and, for a k picked, its indices and dense leaf (clustered when first asked for: an 8.4M-entry
    embedding table takes about a second per k)."""

    def __init__(self, leaf: Any, mask: Any | None) -> None:
        self.leaf, self.mask = leaf, mask
        w = np.asarray(leaf, np.float64).ravel()
        self.kept = w if mask is None else w[np.asarray(mask).ravel() != 0]
        self.ks = [k for k in K_GRID if worth_it(k, self.kept.size)]
        self.sample = self.kept if self.kept.size <= FIT_SAMPLE else self.kept[
            np.random.default_rng(1).integers(0, self.kept.size, FIT_SAMPLE)]
        self.norm = float(np.sum(self.sample ** 2)) or 1.0
        self._centroids: dict[int, np.ndarray | None] = {}
        self._errors: dict[int, float] = {}
        self._done: dict[int, Option] = {}

    def error(self, k: int) -> float:
        """The relative squared error of sharing among ``k`` values."""
        if k not in self._errors:
            c = self._centroids[k] = fit_centroids(self.kept, k)
            gap = self.sample - c[nearest(self.sample, c)] if c is not None else 0.0
            self._errors[k] = float(np.sum(np.square(gap))) / self.norm
        return self._errors[k]

    def option(self, k: int) -> Option:
        """Sharing among ``k`` values (the centroids :meth:`error` fitted, not fitted again)."""
        if k not in self._done:
            error = self.error(k)
            idx, dense = shared_leaf(self.leaf, k, self.mask, self._centroids[k])
            self._done[k] = (k, idx, dense, error)
        return self._done[k]

    def fewest_within(self, bound: float) -> Option | None:
        """The option with the fewest values whose error is at most ``bound``, walking from the most values down
        (the error grows as k falls); None when even the most values exceed it."""
        found = None
        for k in self.ks:
            if self.error(k) > bound:
                break
            found = k
        return None if found is None else self.option(found)


def pick(options: Mapping[str, LeafOptions], bound: float) -> dict[str, Option]:
    """Per leaf, the option with the fewest values whose error is at most ``bound`` (leaves with none left out)."""
    chosen = {p: o.fewest_within(bound) for p, o in options.items()}
    return {p: o for p, o in chosen.items() if o is not None}


class Sharing:
    """A network's shareable leaves (:class:`LeafOptions`, each clustered once per k), and the networks that
    :data:`BOUNDS` give, measured on the validation rows with the network's own batch-norm statistics. (Re-estimated
    on training rows, as pruning needs them, :meth:`Context.recalibrated`, they cost a 120 s digits job's network
    four of its 272 validation images before any weight was shared, and no bound passed.)"""

    def __init__(self, ctx: Context, state: State) -> None:
        self.ctx, self.state = ctx, state
        self.params = tree.flatten(state.variables["params"])
        masks, sizes = state.reparam.masks, state.reparam.sizes
        every = {p: LeafOptions(self.params[p], masks.get(p)) for p in shareable(state.spec, self.params)
                 if p not in sizes}
        self.options = {p: o for p, o in every.items() if o.ks}
        self._at: dict[tuple[tuple[str, int], ...], State | None] = {}
        self._screened: dict[tuple[tuple[str, int], ...], tuple[float, float] | None] = {}
        self._screen: tuple[float, float] | None = None  # the original's accuracy and loss on the screening rows

    def shared(self, i: int) -> tuple[dict[str, Any], Reparam] | None:
        """The variables and reparam of the network with each leaf shared as :data:`BOUNDS` ``[i]`` picks (None: no
        leaf is)."""
        self.ctx.tick()
        chosen, state = pick(self.options, BOUNDS[i]), self.state
        if not chosen:
            return None
        flat = {**self.params, **{p: o[2] for p, o in chosen.items()}}
        variables = with_params(state.variables, tree.unflatten(flat))  # its batch-norm statistics kept
        return variables, Reparam(state.reparam.masks,
                                  {**state.reparam.indices, **{p: o[1] for p, o in chosen.items()}},
                                  {**state.reparam.sizes, **{p: o[0] for p, o in chosen.items()}})

    def unmeasured(self, i: int) -> State | None:
        """The network of :meth:`shared` ``(i)``, not measured (None: no leaf is shared): what a retraining starts
        from, which measures what it ends with."""
        shared = self.shared(i)
        return None if shared is None else State(self.state.spec, *shared, math.nan, math.nan)

    def key(self, i: int) -> tuple[tuple[str, int], ...]:
        """What bound ``i`` picks: each shared leaf's k (bounds that pick the same are the same network)."""
        return tuple(sorted((p, o[0]) for p, o in pick(self.options, BOUNDS[i]).items()))

    def at(self, i: int) -> State | None:
        """The network of :meth:`shared` ``(i)``, measured on the validation rows (None: no leaf is shared)."""
        key = self.key(i)
        if key not in self._at:
            shared = self.shared(i)
            self._at[key] = None if shared is None else self.ctx.state(self.state.spec, *shared)
        return self._at[key]

    def screened(self, i: int) -> bool:
        """Whether the network of bound ``i`` keeps, on the first :data:`SCREEN_ROWS` validation rows, the
        accuracy :attr:`Context.floor` allows there (the original's on them minus the tolerance the floor leaves)
        and a loss within :attr:`Context.ceiling`'s rise; only :meth:`at` decides what is kept."""
        ctx, spec = self.ctx, self.state.spec
        x, y = ctx.data.x_val[:SCREEN_ROWS], ctx.data.y_val[:SCREEN_ROWS]
        if self._screen is None:
            base = evaluate(ctx.model(spec), self.state.variables, x, y)
            self._screen = (float(base["accuracy"]), float(base["loss"]))
        key = self.key(i)
        if key not in self._screened:
            shared = self.shared(i)
            scores = None if shared is None else evaluate(ctx.model(spec), shared[0], x, y)
            self._screened[key] = None if scores is None else (float(scores["accuracy"]), float(scores["loss"]))
        accuracy, loss = self._screen
        ceiling = None if ctx.ceiling is None else loss * ctx.ceiling / self.state.loss
        got = self._screened[key]
        return got is not None and (got[0] >= accuracy - (self.state.accuracy - ctx.floor)
                                    and (ceiling is None or not got[1] > ceiling))

    def log_round(self, shared: State, kept: bool, i: int, stage: str) -> None:
        """A ``compress_round`` event for the network of bound ``i``."""
        ctx = self.ctx
        ctx.monitor.event("compress_round", {
            "stage": stage, "kept": kept, "val_accuracy": shared.accuracy, "floor": ctx.floor,
            "val_loss": shared.loss, "ceiling": ctx.ceiling, "bound": BOUNDS[i],
            "k": {p: int(shared.reparam.sizes[p]) for p in self.options if p in shared.reparam.sizes}})


def share_without_retraining(ctx: Context, sharing: Sharing) -> tuple[State, int]:
    """``(network, i)``: ``sharing``'s network with its not yet shared leaves shared as the largest bound
    ``BOUNDS[i]`` allows within the tolerance without retraining (:attr:`Context.floor` and :attr:`Context.ceiling`
    on the validation rows); ``(network, -1)`` when none does or the stage's share of the budget runs out first."""

    def passes(i: int) -> bool:
        shared = sharing.at(i)
        kept = shared is not None and ctx.within(shared)
        if shared is not None:
            sharing.log_round(shared, kept, i, "shared")
        return kept

    screening = len(ctx.data.y_val) > 2 * SCREEN_ROWS
    lo, hi = -1, len(BOUNDS) - 1  # BOUNDS[lo] passes (-1: nothing shared); does any bound above it?
    while lo < hi and not ctx.stop():
        mid = (lo + hi + 1) // 2
        if sharing.screened(mid) if screening else passes(mid):
            lo = mid
        else:
            hi = mid - 1
    while screening and lo >= 0 and not passes(lo):  # confirmed on every validation row, else the next milder
        lo = -1 if ctx.stop() else milder(sharing, lo)
    best = sharing.at(lo) if lo >= 0 else None
    if best is None:
        return sharing.state, -1
    return started(ctx, best), lo


def milder(sharing: Sharing, i: int) -> int:
    """The largest bound below ``BOUNDS[i]`` that picks another network (-1: none)."""
    key = sharing.key(i)
    return next((j for j in range(i - 1, -1, -1) if sharing.key(j) != key), -1)


STEP = 2 * FINE
"""Bounds a round of retrained sharing goes beyond the last kept one: about 3.6 times the error, one halving of
most layers' values (a layer's error grows about four times per halving of k)."""
ROUND_EPOCHS = 5
"""The most epochs one round of retrained sharing trains the codebooks: enough to win back the images sharing among
16 values lost on digits."""


def share_and_retrain(ctx: Context, sharing: Sharing, after: int, share: float) -> State | None:
    """``sharing``'s network with its not yet shared leaves shared beyond what holds without retraining
    (``BOUNDS[after]``), in rounds of :data:`STEP` bounds (the first: :func:`first_round`), each retrained
    (codebooks trained, ``share`` of the budget and at most :data:`ROUND_EPOCHS` per round) and kept only within the
    tolerance; after a miss, one round halfway back, which may run past the stage's end (:attr:`Context.until`) by
    as much as the missed round took. None when no round is kept.

    (Without that overrun, a 120 s digits job's missed round at 8 values ended the stage's share, its bucketing
    stage then spent 13 s choosing k per layer and had no time left to retrain: 6.3x, where a 300 s job had kept
    16 values retrained, 8.5x.)"""
    best, kept_at, i, took = None, after, first_round(after), 0.0
    while kept_at < i < len(BOUNDS):
        if ctx.stop():
            if not took:
                break
            ctx.until = min(ctx.budget.used() + took, 1.0)  # the halfway round after a miss: as long as the miss
        shared = sharing.unmeasured(i)  # (measured on every validation row, it cost MNIST's 120 s job 1.4 s of 12)
        if shared is None:
            break
        began = ctx.budget.used()
        trained = retrain(ctx, started(ctx, shared), share, "shared", ROUND_EPOCHS)
        kept = ctx.within(trained)
        sharing.log_round(trained, kept, i, "shared-retrained")
        if kept:
            best, kept_at, i, took = trained, i, i + STEP, 0.0
        else:  # one try halfway back (not finer: retraining costs more than the bytes it could still save)
            gap = (i - kept_at) // 2
            i, took = (kept_at + gap, ctx.budget.used() - began) if gap >= FINE and not took else (kept_at, 0.0)
    return best


def first_round(after: int) -> int:
    """The bound retrained sharing tries first after ``BOUNDS[after]`` held without retraining: :data:`STEP` bounds
    beyond it, or the largest bound when that is nearer (``len(BOUNDS)``, none, when ``after`` is the largest).
    (Beyond the grid, a 300 s SMS Spam job whose sharing held to ``BOUNDS[42]`` tried nothing and shipped 10.8x.)"""
    return min(after + STEP, len(BOUNDS) - 1) if after < len(BOUNDS) - 1 else len(BOUNDS)


def started(ctx: Context, shared: State) -> State:
    """``shared`` with its dense variables at exactly what training under its reparam starts from (verified)."""
    start = with_params(shared.variables, compressed_start(shared.variables["params"], shared.reparam))
    verify_same_outputs(ctx, (shared.spec, shared.variables), (shared.spec, start))
    return State(shared.spec, start, shared.reparam, shared.accuracy, shared.loss)
