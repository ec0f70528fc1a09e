"""Re-initialisation that keeps the output: every compressed network starts from exactly what it replaces.

Removing filters starts from the trained network with those filters zeroed (:func:`core.surgery.zero_units`,
then :func:`core.surgery.remove_units_many`); masks and buckets start from the trainable pytree whose
materialisation is the pruned, bucketed network the per-layer search scored (:func:`compressed_start`).
:func:`verify_same_outputs` checks each hand-over on validation inputs instead of assuming it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core import reparam as rp
from core.model import Model
from core.spec import Spec
from synthesis.compress.context import Context

CHECK_ROWS = 256
"""Validation rows whose logits each hand-over compares."""


class ReinitError(RuntimeError):
    """The compressed network does not compute what the network it replaces computed."""


@functools.partial(jax.jit, static_argnums=0)
def _logits(model: Model, variables: dict[str, Any], x: jax.Array) -> jax.Array:
    return model.apply(variables, x)[0]


def logits(ctx: Context, spec: Spec, variables: dict[str, Any]) -> np.ndarray:
    """The network's logits on the first validation rows (eval mode)."""
    x = ctx.x_probe[:CHECK_ROWS]
    return np.asarray(_logits(ctx.model(spec), variables, x))


def verify_same_outputs(ctx: Context, before: tuple[Spec, dict[str, Any]], after: tuple[Spec, dict[str, Any]]
                        ) -> float:
    """Return the largest |difference| of the two networks' logits on validation rows; raise
    :class:`ReinitError` when it exceeds ``ctx.options.output_atol`` (relative to the logits' scale, at least 1)."""
    a, b = logits(ctx, *before), logits(ctx, *after)
    gap = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = max(1.0, float(np.max(np.abs(a))) if a.size else 1.0)
    if not gap <= ctx.options.output_atol * scale:
        raise ReinitError(f"the compressed network's logits differ by {gap:.3g} (allowed "
                          f"{ctx.options.output_atol * scale:.3g})")
    return gap


def compressed_start(params: dict[str, Any], reparam: rp.Reparam) -> dict[str, Any]:
    """Dense parameters as training under ``reparam`` starts from them: ``materialise(trainable(params))``
    (pruned entries exactly zero, each bucket at its mean; :func:`core.reparam.host_start`)."""
    out: dict[str, Any] = jax.tree.map(jnp.asarray, rp.host_start(params, reparam))
    return out
