"""What lets one compiled train step serve many training runs: codebooks of a fixed size whatever their k, and
jitted steps kept per network and settings.

Compression retrains one network several times, each time shared among other k: with codebooks of k entries and
a step jitted per run, each retraining compiled its own program.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from core import parallel, tree
from core.reparam import Reparam
from core.train_config import TrainConfig

MIN_SLOTS = 256
"""The fewest entries a codebook has while training (:func:`padded`)."""


def slots(k: int) -> int:
    """The entries a codebook of ``k`` values has while training: the next power of two, at least
    :data:`MIN_SLOTS`."""
    return max(MIN_SLOTS, 1 << max(k - 1, 0).bit_length())


def padded(reparam: Reparam) -> Reparam:
    """``reparam`` with each codebook given :func:`slots` entries, the ones past its ``k`` unused (no index points
    at them: always 0, no gradient): training a network shared among any k then runs one compiled program, where
    each set of k compiled its own (a retrained sharing round on digits spent 9-16 s compiling)."""
    return Reparam(reparam.masks, reparam.indices, {p: slots(k) for p, k in reparam.sizes.items()})


def unpadded(trainable: Mapping[str, Any], reparam: Reparam) -> dict[str, Any]:
    """``trainable`` (of :func:`padded` ``(reparam)``) with each codebook cut back to its ``k`` entries (NumPy arrays:
    slicing through JAX compiles once per k)."""
    flat = tree.flatten(dict(trainable))
    out: dict[str, Any] = tree.unflatten({p: np.asarray(v)[: reparam.sizes[p]] if p in reparam.indices else v
                                          for p, v in flat.items()})
    return out


KEPT_PROGRAMS = 4
"""Jitted train steps kept for later runs of the same model and settings (the most recently used): compression
retrains one network several times, and each run compiled its step anew."""
_PROGRAMS: OrderedDict[tuple[Any, TrainConfig, Any], Any] = OrderedDict()


def program_config(config: TrainConfig) -> TrainConfig:
    """``config`` without the settings a train step's program does not depend on (run length, seed, deadline,
    patience, progress and evaluation batch): runs whose program configs are equal share one jitted step."""
    return replace(config, epochs=1, seed=0, time_limit_s=None, patience=None, progress_every=0, eval_batch_size=1,
                   warmup_fraction=0.0, until_deadline=False, keep_last=False)


def jitted_step(step: Callable[..., Any], mesh: jax.sharding.Mesh | None, key: tuple[Any, TrainConfig] | None) -> Any:
    """``step`` jitted (:func:`jit_step`), or the step kept for an earlier run with the same ``key`` (model, config)
    when its :func:`program_config` and ``mesh`` are equal; ``key`` None: jitted afresh and not kept."""
    if key is None:
        return jit_step(step, mesh)
    full = (key[0], program_config(key[1]), mesh)
    jitted = _PROGRAMS.pop(full, None) or jit_step(step, mesh)
    _PROGRAMS[full] = jitted
    while len(_PROGRAMS) > KEPT_PROGRAMS:
        _PROGRAMS.popitem(last=False)
    return jitted


def jit_step(step: Callable[..., Any], mesh: jax.sharding.Mesh | None) -> Any:
    """``step`` jitted with its state donated (with ``mesh``: state, key, reparam and lengths replicated, the
    batch split over the mesh)."""
    if mesh is None:
        return jax.jit(step, donate_argnums=0)
    rep, dat = parallel.replicated(mesh), parallel.batch_sharded(mesh)
    return jax.jit(step, in_shardings=(rep, dat, dat, rep, rep, rep), out_shardings=(rep, rep), donate_argnums=0)
