"""Filter selection: remove the least important filters and dense units, making the network physically smaller.

Per layer, units are ranked by :func:`synthesis.compress.importance.unit_importance`; the number removed from each
is the largest (in steps of 1/16 of its width) whose removal keeps the probe accuracy within the stage's slack,
found with the removed units zeroed (exactly what removing them computes, :func:`core.surgery.zero_units`). The
chosen units are then cut out with :func:`core.surgery.remove_units_many` and the smaller network checked to
compute the zeroed one's logits. Nodes whose own weights are a negligible share of the network's
(:func:`selectable`) keep their units, as connection pruning leaves them dense (``connections.MIN_SHARE``):
removing them saves next to no bytes. On SMS Spam the wide text network's word CNN (0.3 % of its weights) had lost
120 of its 128 filters in one round (that run lost 0.68 points on test, this rule's run 0.48; in both the word
table was later pruned to a few rows, so the difference is not the filters alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core import tree
from core.reparam import Reparam
from core.spec import Spec
from core.surgery import removable_nodes, remove_units_many, zero_units
from synthesis.compress import connections
from synthesis.compress.connections import weight_shares
from synthesis.compress.context import Context, State
from synthesis.compress.importance import unit_importance
from synthesis.compress.reinit import verify_same_outputs

STEPS = 16


def selectable(spec: Spec, params: Mapping[str, Any]) -> list[str]:
    """The nodes filter selection may remove units of: removable ones whose own connection weights hold at least
    ``connections.MIN_SHARE`` of the network's."""
    shares = weight_shares(spec, params)
    return [n for n in removable_nodes(spec)
            if sum(share for p, share in shares.items() if p.split("/")[0] == n) >= connections.MIN_SHARE]


def ranking(ctx: Context, state: State) -> dict[str, np.ndarray]:
    """Each :func:`selectable` node's units, least important first."""
    nodes = selectable(state.spec, tree.flatten(state.variables["params"]))
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
        return ctx.recalibrated(spec, out)

    def score(choice: Mapping[str, int]) -> float:
        ctx.tick()
        return ctx.probe_accuracy(spec, zeroed(choice))

    floor = ctx.probe_floor(spec, variables, slack)
    choice = ctx.choose(grids, score, floor)
    removed = {n: sorted(order[n][:c].tolist()) for n, c in choice.items() if c}
    if not removed:
        return state, {}
    z = zeroed(choice)
    keep = {n: sorted(set(range(len(order[n]))) - set(units)) for n, units in removed.items()}
    new_spec, new_vars = remove_units_many(spec, z, keep)
    verify_same_outputs(ctx, (spec, z), (new_spec, new_vars))
    return ctx.state(new_spec, new_vars, Reparam()), removed
