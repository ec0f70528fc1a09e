"""Constraints prune networks before training; the latency model is a calibrated linear fit in MACs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis import analyse
from core.spec import Spec
from synthesis.space import Constraints, LatencyModel, SpaceInfo, check, sample, sample_admissible, seeds, to_spec

IMAGE = SpaceInfo("image", (28, 28, 1), 10, scale=1 / 255)
TEXT = SpaceInfo("text", (64,), 2, vocab_size=1000)


def hand_cnn() -> Spec:
    return to_spec(next(c for c in seeds(IMAGE) if c.origin == "seed:hand-cnn"), IMAGE)


def test_check_names_each_limit_broken_and_accepts_specs_within_them() -> None:
    spec = hand_cnn()
    figures = analyse(spec)
    assert check(spec, Constraints()) is None
    assert check(spec, Constraints(max_params=figures.params, max_model_bytes=figures.bytes_on_disk,
                                   max_macs=figures.macs)) is None
    assert check(spec, Constraints(max_params=100_000)) == f"params {figures.params:,} > max_params 100,000"
    assert check(spec, Constraints(max_model_bytes=figures.bytes_on_disk - 1)) == (
        f"model bytes {figures.bytes_on_disk:,} > max_model_bytes {figures.bytes_on_disk - 1:,}")
    reason = check(spec, Constraints(max_params=1000, max_macs=1000))
    assert reason is not None and "params 140,458 > max_params 1,000" in reason
    assert f"MACs {figures.macs:,} > max_macs 1,000" in reason


def test_latency_limits_use_the_latency_model() -> None:
    spec = hand_cnn()
    model = LatencyModel(ms_per_mmac=0.1, overhead_ms=1.0)
    expected = 1.0 + 0.1 * analyse(spec).macs / 1e6
    assert model.estimate_ms(spec) == pytest.approx(expected)
    assert check(spec, Constraints(max_latency_ms=expected + 0.01), model) is None
    reason = check(spec, Constraints(max_latency_ms=1.5), model)
    assert reason == f"latency {expected:,.3f} ms > max_latency_ms 1.5"
    with pytest.raises(ValueError, match="latency model"):
        check(spec, Constraints(max_latency_ms=1.5))


def test_calibrate_recovers_a_linear_relation() -> None:
    rng = np.random.default_rng(0)
    specs = [to_spec(c, IMAGE) for c in seeds(IMAGE)] + [to_spec(sample(rng, IMAGE), IMAGE) for _ in range(6)]
    truth = LatencyModel(ms_per_mmac=0.037, overhead_ms=0.8)
    fitted = LatencyModel.calibrate([(s, truth.estimate_ms(s)) for s in specs])
    assert fitted.ms_per_mmac == pytest.approx(0.037, rel=1e-9)
    assert fitted.overhead_ms == pytest.approx(0.8, rel=1e-9)
    factors = rng.uniform(0.95, 1.05, len(specs))
    noisy = LatencyModel.calibrate([(s, truth.estimate_ms(s) * f) for s, f in zip(specs, factors, strict=True)])
    assert noisy.ms_per_mmac == pytest.approx(0.037, rel=0.1)
    with pytest.raises(ValueError, match="two networks"):
        LatencyModel.calibrate([(specs[0], 1.0), (specs[0], 2.0)])


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1), st.sampled_from([IMAGE, TEXT]), st.sampled_from([40_000, 80_000, 300_000]))
def test_sample_admissible_honours_max_params(seed: int, info: SpaceInfo, max_params: int) -> None:
    candidate = sample_admissible(np.random.default_rng(seed), info, Constraints(max_params=max_params))
    assert analyse(to_spec(candidate, info)).params <= max_params
    assert candidate.origin == "random"


def test_sample_admissible_honours_every_limit_at_once() -> None:
    rng = np.random.default_rng(1)
    limits = Constraints(max_params=50_000, max_model_bytes=250_000, max_macs=5_000_000, max_latency_ms=2.0)
    model = LatencyModel(ms_per_mmac=0.5, overhead_ms=0.2)
    for _ in range(5):
        spec = to_spec(sample_admissible(rng, IMAGE, limits, model), IMAGE)
        assert check(spec, limits, model) is None


def test_sample_admissible_fails_when_nothing_fits() -> None:
    with pytest.raises(ValueError, match=r"no admissible image network in 50 tries.*max_params 10"):
        sample_admissible(np.random.default_rng(0), IMAGE, Constraints(max_params=10), tries=50)
    with pytest.raises(ValueError, match="no admissible text network"):  # the embedding alone is 32,000
        sample_admissible(np.random.default_rng(0), TEXT, Constraints(max_params=30_000))
