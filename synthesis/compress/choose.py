"""Per-layer settings chosen on validation: the most aggressive setting each layer tolerates alone, then backed
off together until the whole network does (the sensitivity analysis of Han et al., NeurIPS 2015); after a
choice that retrained outside the tolerance, only settings milder than it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def per_layer(grids: Mapping[str, Sequence[T]], score: Callable[[Mapping[str, T]], float], floor: float,
              stop: Callable[[], bool]) -> dict[str, T]:
    """Return one setting per layer from its grid (ordered mildest first; ``grid[0]`` changes nothing).

    Each layer gets the furthest grid entry whose ``score({layer: setting})`` is at least ``floor`` (a binary
    search, assuming the score falls along the grid); then, while the score of all of them together is below
    ``floor``, every layer steps one entry milder. ``stop()`` true ends the searches early with what was found.
    """
    chosen: dict[str, int] = {}
    for layer, grid in grids.items():
        lo, hi = 0, len(grid) - 1  # lo passes (it changes nothing); is anything beyond it passing?
        while lo < hi and not stop():
            mid = (lo + hi + 1) // 2
            if score({layer: grid[mid]}) >= floor:
                lo = mid
            else:
                hi = mid - 1
        chosen[layer] = lo
    while any(chosen.values()) and not stop():
        if score({layer: grids[layer][i] for layer, i in chosen.items()}) >= floor:
            break
        chosen = {layer: max(i - 1, 0) for layer, i in chosen.items()}
    if stop() and any(chosen.values()) and score({k: grids[k][i] for k, i in chosen.items()}) < floor:
        chosen = dict.fromkeys(chosen, 0)
    return {layer: grids[layer][i] for layer, i in chosen.items()}


def milder(grids: Mapping[str, Sequence[T]], rejected: Mapping[str, T] | None) -> dict[str, list[T]]:
    """``grids`` cut to the settings milder than ``rejected`` (a whole choice of the same grids that missed the
    tolerance): a layer it changed keeps the entries before its setting, a layer it left unchanged (or did not
    list) keeps only ``grid[0]``. None: ``grids`` as they are.

    A retry after a miss must differ from it: halving the slack alone often chose the same settings again (on
    digits, three bucketing rounds in a row shared every layer among 16 values and missed by the same images).
    """
    if rejected is None:
        return {layer: list(grid) for layer, grid in grids.items()}
    out: dict[str, list[T]] = {}
    for layer, grid in grids.items():
        values = list(grid)
        j = values.index(rejected[layer]) if layer in rejected and rejected[layer] in values else 0
        out[layer] = values[:max(j, 1)]
    return out
