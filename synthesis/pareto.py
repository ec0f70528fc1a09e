"""The Pareto front of candidates: none of them is beaten on every objective by another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synthesis.deliver import Delivered
    from synthesis.fine import CompressedVariant
    from synthesis.trial import Trial

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


def delivered_front(trials: list[Trial], winner: Trial, model: Delivered,
            compressed: CompressedVariant | None) -> list[dict[str, Any]]:
    """The front over every trained candidate and the delivered variants (validation accuracy; a compressed
    variant's params are its non-zero parameters and its accuracy the dense one's less what compression lost;
    delivered variants' latencies are measured)."""
    points = [{"candidate": t.candidate.id, "accuracy": t.accuracy, "params": t.params,
               "latency_ms": t.latency_ms, "latency": "estimated", "delivered": False}
              for t in trials if t.curve and t.status != "failed" and t is not winner]  # delivered: below
    points.append({"candidate": winner.candidate.id, "accuracy": winner.accuracy, "params": model.param_count,
                   "latency_ms": model.metrics["latency_ms"], "latency": "measured", "delivered": True,
                   "variant": "dense"})
    if compressed is not None:  # the dense point's accuracy less what compression lost on the validation rows,
        m = compressed.model.metrics  # which a refit network trained on: its absolute figure there is not held out
        lost = compressed.figures["val_accuracy_before"] - compressed.figures["val_accuracy_after"]
        points.append({"candidate": winner.candidate.id, "accuracy": winner.accuracy - lost,
                       "params": m["nonzero_params"], "latency_ms": m["latency_ms"], "latency": "measured",
                       "delivered": True, "variant": "compressed", "model_bytes": m["model_bytes"]})
    return [points[i] for i in pareto_front(points)]
