"""The Pareto front of candidates: none of them is beaten on every objective by another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

OBJECTIVES: tuple[tuple[str, int], ...] = (("accuracy", +1), ("params", -1), ("latency_ms", -1))
"""The default objectives: (key, +1 to maximise / -1 to minimise)."""


def dominates(a: Mapping[str, Any], b: Mapping[str, Any],
              objectives: Sequence[tuple[str, int]] = OBJECTIVES) -> bool:
    """Whether `a` is at least as good as `b` on every objective and strictly better on one."""
    better = False
    for key, sign in objectives:
        va, vb = sign * float(a[key]), sign * float(b[key])
        if va < vb:
            return False
        better = better or va > vb
    return better


def pareto_front(points: Sequence[Mapping[str, Any]],
                 objectives: Sequence[tuple[str, int]] = OBJECTIVES) -> list[int]:
    """Indices of the non-dominated points, in input order (duplicates of a front point all stay)."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p, objectives) for j, q in enumerate(points) if j != i)]
