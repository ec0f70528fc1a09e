"""Small helpers to draw and nudge genes on discrete grids with a NumPy generator."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
N = TypeVar("N", int, float)


def pick(rng: np.random.Generator, choices: Sequence[T]) -> T:
    """Return one of ``choices`` uniformly at random (a plain Python value, not a NumPy scalar)."""
    return choices[int(rng.integers(len(choices)))]


def pick_other(rng: np.random.Generator, choices: Sequence[T], current: T) -> T:
    """Return one of ``choices`` other than ``current`` (``current`` itself when it is the only one)."""
    others = [c for c in choices if c != current]
    return pick(rng, others) if others else current


def step(choices: Sequence[N], value: N, delta: int) -> N:
    """Return the grid value ``delta`` places from the grid value nearest ``value``, clipped to the grid."""
    nearest = min(range(len(choices)), key=lambda i: abs(choices[i] - value))
    return choices[min(max(nearest + delta, 0), len(choices) - 1)]


def nudge(rng: np.random.Generator, choices: Sequence[N], value: N) -> N:
    """Return a neighbour of ``value`` on the grid (one place up or down), different from it when possible."""
    moves = [v for v in (step(choices, value, -1), step(choices, value, 1)) if v != value]
    return pick(rng, moves) if moves else value


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """Return a draw that is uniform in log space between ``low`` and ``high``, to 3 significant digits."""
    return significant(float(np.exp(rng.uniform(np.log(low), np.log(high)))))


def significant(value: float, digits: int = 3) -> float:
    """Return ``value`` rounded to ``digits`` significant digits (stable, readable genomes)."""
    return float(f"{value:.{digits - 1}e}")


def lower_moves(target: dict[str, Any], grids: Mapping[str, Sequence[int]]) -> list[Callable[[], object]]:
    """Return the moves that each set one gene of ``target`` one grid place lower (genes above their minimum)."""
    return [functools.partial(_lower, target, name, grid) for name, grid in grids.items()
            if name in target and target[name] > grid[0]]


def _lower(target: dict[str, Any], name: str, grid: Sequence[int]) -> None:
    target[name] = step(grid, target[name], -1)


def change(rng: np.random.Generator, genome: dict[str, Any], gene: str, grid: Sequence[Any]) -> None:
    """Move ``genome[gene]`` to another value of ``grid``: a neighbour for numbers, any other for names."""
    value = genome[gene]
    genome[gene] = pick_other(rng, grid, value) if isinstance(value, str) else nudge(rng, grid, value)
