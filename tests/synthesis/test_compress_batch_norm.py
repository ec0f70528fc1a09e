"""Every compressed candidate is scored, and retrained, with batch-norm statistics re-estimated for it: the
statistics stored with the trained network describe the activations of a network that no longer exists."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from core import tree
from core.model import build
from core.spec import Spec
from core.training import train
from synthesis.compress.buckets import choose_buckets
from synthesis.compress.connections import prune_round
from synthesis.compress.context import Context, State
from synthesis.compress.filters import select_filters
from tests.synthesis.compress_setup import CONFIG, context, digits, mlp, start


@functools.cache
def trained_bn() -> tuple[Spec, dict[str, Any]]:
    spec = mlp(batch_norm=True)
    return spec, train(build(spec), digits(), CONFIG).variables


def _stats(variables: dict[str, Any]) -> dict[str, np.ndarray]:
    return {p: np.asarray(a) for p, a in tree.flatten(variables["batch_stats"]).items()}


def _prune(ctx: Context, state: State) -> State | None:
    return prune_round(ctx, state, 0.05)


def _bucket(ctx: Context, state: State) -> State | None:
    return choose_buckets(ctx, state, 0.05)


def _filters(ctx: Context, state: State) -> State | None:
    smaller, removed = select_filters(ctx, state, 0.05)
    return smaller if removed else None


@pytest.mark.parametrize("stage", [_prune, _bucket, _filters])
def test_each_stages_candidate_starts_from_statistics_re_estimated_for_it(
        stage: Callable[[Context, State], State | None]) -> None:
    ctx = context()
    spec, variables = trained_bn()
    before = start(ctx, spec, variables)
    candidate = stage(ctx, before)
    assert candidate is not None
    got = _stats(candidate.variables)
    want = _stats(ctx.recalibrated(candidate.spec, candidate.variables))
    assert got.keys() == want.keys()
    for path in got:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-6)
    stale = _stats(before.variables)
    if candidate.spec.to_json() == spec.to_json():  # filter selection removes units: the shapes differ
        assert any(not np.allclose(got[p], stale[p], rtol=1e-3) for p in got)
