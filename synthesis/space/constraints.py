"""Deployment constraints that prune the space before any training: size, compute and latency."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.analysis import analyse
from core.spec import Spec
from synthesis.space.candidates import sample, shrink, to_spec
from synthesis.space.latency import LatencyModel
from synthesis.space.types import Candidate, SpaceInfo


@dataclass(frozen=True)
class Constraints:
    """Upper limits a network must meet (``None`` = no limit): parameters, saved-model bytes,
    multiply-adds per example and predicted latency of one example."""

    max_params: int | None = None
    max_model_bytes: int | None = None
    max_macs: int | None = None
    max_latency_ms: float | None = None


def check(spec: Spec, constraints: Constraints, latency_model: LatencyModel | None = None) -> str | None:
    """Return None when ``spec`` meets ``constraints``, else the reasons it does not (one per limit broken).

    A latency limit needs ``latency_model`` (``ValueError`` without one).
    """
    if constraints.max_latency_ms is not None and latency_model is None:
        raise ValueError("a latency limit needs a latency model")
    figures = analyse(spec)
    reasons = [f"{what} {value:,} > {limit_name} {limit:,}" for what, value, limit_name, limit in (
        ("params", figures.params, "max_params", constraints.max_params),
        ("model bytes", figures.bytes_on_disk, "max_model_bytes", constraints.max_model_bytes),
        ("MACs", figures.macs, "max_macs", constraints.max_macs)) if limit is not None and value > limit]
    if constraints.max_latency_ms is not None and latency_model is not None:
        latency = latency_model.estimate_from_macs(figures.macs)
        if latency > constraints.max_latency_ms:
            reasons.append(f"latency {latency:,.3f} ms > max_latency_ms {constraints.max_latency_ms:,}")
    return "; ".join(reasons) or None


def sample_admissible(rng: np.random.Generator, info: SpaceInfo, constraints: Constraints,
                      latency_model: LatencyModel | None = None, tries: int = 200) -> Candidate:
    """Return a random candidate whose spec meets ``constraints``, within ``tries`` specs looked at.

    A rejected draw is shrunk step by step (each step a try) before a fresh one is drawn, so tight limits
    still find the largest designs that fit. ``ValueError`` (with the last reason) when none was found.
    """
    reason = "no candidate tried"
    left = tries
    while left > 0:
        candidate: Candidate | None = sample(rng, info)
        while candidate is not None and left > 0:
            left -= 1
            reason = check(to_spec(candidate, info), constraints, latency_model) or ""
            if not reason:
                return candidate
            candidate = shrink(rng, candidate, info)
    raise ValueError(f"no admissible {info.modality} network in {tries} tries; the last: {reason}")
