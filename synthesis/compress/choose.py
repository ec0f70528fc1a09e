"""Per-layer settings chosen on validation: the most aggressive setting each layer tolerates alone, then backed
off together until the whole network does (the sensitivity analysis of Han et al., NeurIPS 2015)."""

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
