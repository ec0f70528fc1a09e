"""Weight bucketing: per layer, the kept weights share ``k`` values (2 to 256), ``k`` chosen on validation.

Each weight leaf's kept entries (and each bias or normalisation vector of at least ``MIN_VECTOR`` entries) are
clustered by 1-D k-means (:func:`core.reparam.quantise`, linear
initialisation as in Han et al., 2016); ``k`` is the smallest power of two whose bucketing keeps the probe
accuracy within the stage's slack, among :func:`k_choices` (at least 16 values in a leaf's first round, at most
4 times fewer per round after it, and only where codebook plus indices are smaller than the kept values). Training
then updates the codebooks (each bucket's gradient summed). The stage runs
in rounds: a shared leaf may be shared again among fewer values (its k-means then runs on its current values), so
a retrained network can give up buckets that the untrained start could not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from core import tree
from core.packing import bits_for
from core.reparam import Reparam, shared_leaf
from core.spec import Spec
from synthesis.compress.connections import weight_leaves
from synthesis.compress.context import Context, State, with_params
from synthesis.compress.reinit import compressed_start, verify_same_outputs

K_GRID = (256, 128, 64, 32, 16, 8, 4, 2)
MIN_VECTOR = 32
FIRST_K = 16
"""The fewest values a leaf is shared among in its first round; each later round may at most quarter its values
(``STEP``), so the bits per weight come down gradually (incremental quantisation, Zhou et al., "Incremental Network
Quantization", ICLR 2017, https://arxiv.org/abs/1702.03044). Shared among 4 values at once in the first round,
MNIST's pruned CNN missed the tolerance by one and two validation images after retraining, at full and at half
slack: no bucketing round was kept and it shipped unshared, at 6.5x (on another machine the same run had kept the
first round and reached 45x)."""
STEP = 4


def k_choices(current: int | None, kept: int) -> list[int]:
    """The k a leaf may be shared among next (fewest last): fewer than ``current`` (None: not shared yet) but at
    least ``FIRST_K`` or a ``STEP``-th of ``current``, and only where codebook plus indices beat the kept values."""
    low = FIRST_K if current is None else max(2, current // STEP)
    high = K_GRID[0] if current is None else current - 1
    return [k for k in K_GRID if low <= k <= high and worth_it(k, kept)]


def worth_it(k: int, kept: int) -> bool:
    """Whether a codebook of ``k`` float32 values and ``kept`` indices are smaller than ``kept`` float32 values."""
    return 32 * k + kept * bits_for(k) < 32 * kept


def shareable(spec: Spec, params: Mapping[str, Any]) -> list[str]:
    """The leaves bucketing may share: the connection weights, and the other parameters of at least ``MIN_VECTOR``
    entries (biases, normalisation scales and offsets, which would otherwise stay float32)."""
    weights = weight_leaves(spec)
    return weights + sorted(p for p in params if p not in weights and np.size(params[p]) >= MIN_VECTOR)


def choose_buckets(ctx: Context, state: State, slack: float) -> State | None:
    """Share each :func:`shareable` leaf's values among k of them, fewer than it shares now (None when no leaf
    can)."""
    params = tree.flatten(state.variables["params"])
    masks = state.reparam.masks
    grids: dict[str, list[int]] = {}
    sizes = state.reparam.sizes
    for p in shareable(state.spec, params):
        kept = int(np.count_nonzero(np.asarray(masks[p]))) if p in masks else int(np.size(params[p]))
        ks = k_choices(sizes.get(p), kept)
        if ks:
            grids[p] = [0, *ks]
    cache: dict[tuple[str, int], tuple[jnp.ndarray, jnp.ndarray]] = {}

    def shared(p: str, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
        if (p, k) not in cache:
            cache[p, k] = shared_leaf(params[p], k, masks.get(p))
        return cache[p, k]

    def bucketed(choice: Mapping[str, int]) -> dict[str, Any]:
        flat = dict(params)
        flat.update({p: shared(p, k)[1] for p, k in choice.items() if k})
        return ctx.recalibrated(state.spec, with_params(state.variables, tree.unflatten(flat)))

    def score(choice: Mapping[str, int]) -> float:
        ctx.tick()
        return ctx.probe_accuracy(state.spec, bucketed(choice))

    floor = ctx.probe_floor(state.spec, state.variables, slack)
    choice = {p: k for p, k in ctx.choose(grids, score, floor).items() if k}
    if not choice:
        return None
    reparam = Reparam(masks, {**state.reparam.indices, **{p: shared(p, k)[0] for p, k in choice.items()}},
                      {**sizes, **choice})
    scored = bucketed(choice)
    start = with_params(scored, compressed_start(scored["params"], reparam))
    verify_same_outputs(ctx, (state.spec, scored), (state.spec, start))
    ctx.monitor.event("compress_buckets", {"k": choice})
    return ctx.state(state.spec, start, reparam)
