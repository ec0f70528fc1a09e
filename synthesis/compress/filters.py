"""Filter selection: remove the least important filters and dense units, making the network physically smaller.

Per layer, units are ranked by :func:`synthesis.compress.importance.unit_importance`; the number removed from each
is the largest (in steps of 1/16 of its width) whose removal keeps the probe accuracy within the stage's slack,
found with the removed units zeroed (exactly what removing them computes, :func:`core.surgery.zero_units`). The
chosen units are then cut out with :func:`core.surgery.remove_units_many` and the smaller network checked to
compute the zeroed one's logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.reparam import Reparam
from core.surgery import removable_nodes, remove_units_many, zero_units
from synthesis.compress.choose import per_layer
from synthesis.compress.context import Context, State
from synthesis.compress.importance import unit_importance
from synthesis.compress.reinit import verify_same_outputs

STEPS = 16


def ranking(ctx: Context, state: State) -> dict[str, np.ndarray]:
    """Each removable node's units, least important first."""
    nodes = removable_nodes(state.spec)
    scores = unit_importance(ctx, state.spec, state.variables, nodes, ctx.options.importance)
    return {n: np.argsort(s, kind="stable") for n, s in scores.items()}


def select_filters(ctx: Context, state: State, slack: float) -> tuple[State, dict[str, list[int]]]:
    """Return the smaller network (its accuracy measured) and the units removed per node; ``state`` itself
    and no units when nothing can go."""
    if state.reparam.masks or state.reparam.indices:
        raise ValueError("filter selection runs before masks and buckets")
    spec, variables = state.spec, state.variables
    order = ranking(ctx, state)
    grids = {n: sorted({round(len(o) * i / STEPS) for i in range(STEPS)} - {len(o)}) for n, o in order.items()}

    def zeroed(choice: Mapping[str, int]) -> dict[str, Any]:
        out = variables
        for node, count in choice.items():
            if count:
                out = zero_units(spec, out, node, order[node][:count].tolist())
        return ctx.recalibrated(spec, out) if out is not variables else out

    def score(choice: Mapping[str, int]) -> float:
        ctx.tick()
        return ctx.accuracy(spec, zeroed(choice), probe=True)

    floor = ctx.probe_floor(spec, variables, slack)
    choice = per_layer(grids, score, floor, ctx.stop)
    removed = {n: sorted(order[n][:c].tolist()) for n, c in choice.items() if c}
    if not removed:
        return state, {}
    z = zeroed(choice)
    keep = {n: sorted(set(range(len(order[n]))) - set(units)) for n, units in removed.items()}
    new_spec, new_vars = remove_units_many(spec, z, keep)
    verify_same_outputs(ctx, (spec, z), (new_spec, new_vars))
    return ctx.state(new_spec, new_vars, Reparam()), removed
