"""What the core tests share: random variables of a spec's shapes."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from core import tree
from core.checkpoint import variable_shapes
from core.graph import validate
from core.spec import Spec


def random_variables(spec: Spec, seed: int = 0) -> dict[str, Any]:
    """Variables of the spec's shapes (core.checkpoint.variable_shapes), every leaf random, so that biases, norms and
    batch statistics all matter: variances in [0.5, 2), the rest normal with scale 0.5. NumPy draws them: cheaper
    than compiling Model.init."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for kind, shapes in variable_shapes(validate(spec)).items():
        if shapes or kind == "params":
            out[kind] = tree.unflatten({p: jnp.asarray((rng.uniform(0.5, 2.0, s) if p.endswith("var")
                                                        else rng.normal(0.0, 0.5, s)).astype(np.float32))
                                        for p, s in shapes.items()})
    return out
