"""The scaling simulation's logic (bench/simulate_scale.py, a script: imported by path)."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

PATH = Path(__file__).resolve().parents[1] / "bench" / "simulate_scale.py"
sys.path.insert(0, str(PATH.parent))  # as when it runs as a script: its sibling modules (bench/protocol.py)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("simulate_scale", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["simulate_scale"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sim = _load()
M = sim.Measured()
D = sim.Design()
CAP = sim.Capacities()


def _run(workers: int, design=D, cap=CAP, **kw):
    kw.setdefault("horizon_s", 3 * 3600.0)
    kw.setdefault("warmup_s", 1800.0)
    return sim.simulate(sim.Scenario(workers, **kw), M, design, cap)


@pytest.mark.parametrize("load", [0.3, 0.9, 1.5, 3.0])
def test_utilisation_never_exceeds_one(load):
    r = _run(16, load=load)
    assert 0 < r["worker_utilisation"] <= 1 + 1e-9
    assert r["queue_wait_mean_s"] >= 0


def test_overload_fills_the_workers_and_the_queue():
    light, heavy = _run(16, load=0.3), _run(16, load=3.0)
    assert heavy["worker_utilisation"] > 0.95 > light["worker_utilisation"]
    assert heavy["queue_wait_mean_s"] > 10 * max(light["queue_wait_mean_s"], 0.1)
    assert heavy["counts"]["cancelled"] > 0  # queued trials outlived their searches


def test_no_queue_wait_when_workers_outnumber_demand():
    r = _run(1000, load=0.01, per_job=2)  # about 5 jobs at once, 2 trials each
    assert r["window"]["started"] > 100
    assert r["queue_wait_mean_s"] == 0 and r["queue_wait_p99_s"] == 0
    assert r["counts"]["cancelled"] == 0


def test_every_issued_trial_is_accounted_for():
    for load in (0.5, 2.0):
        c = _run(32, load=load)["counts"]
        assert c["issued"] == c["completed"] + c["cancelled"] + c["queued_or_running_at_end"]
        assert c["started"] >= c["completed"]
        assert c["issued"] > 0 and c["jobs"] > 0


def test_deterministic_for_a_seed():
    assert _run(32, seed=3) == _run(32, seed=3)
    assert _run(32, seed=3)["counts"] != _run(32, seed=4)["counts"]


@pytest.mark.parametrize("resource", ["postgres", "redis", "coordinator"])
def test_a_resource_at_capacity_is_the_bottleneck(resource):
    tiny = {"postgres": replace(CAP, postgres_tps=1.0), "redis": replace(CAP, redis_ops=1.0),
            "coordinator": replace(CAP, coordinator_cpu=1e-4)}[resource]
    r = _run(64, cap=tiny)
    assert r["bottleneck"] == resource
    assert r["utilisation"][resource] >= 1


def test_the_broadcasts_grow_with_workers_times_jobs():
    """As built, each coordinator's idle count is answered by every worker: Redis grows faster than linearly;
    with the shared counter it grows about linearly."""
    s = sim.Scenario(1)
    for design, low, high in ((D, 4, None), (D.improved(), 0.5, 2)):
        small, big = (sim.expected(n, s, M, design)["redis_ops"] for n in (1000, 8000))
        ratio = big / small / 8
        assert ratio > low and (high is None or ratio < high), (design.name, ratio)


def test_the_mean_value_model_matches_the_simulation():
    r = _run(256, horizon_s=4 * 3600.0, warmup_s=3600.0)
    model = sim.expected(256, sim.Scenario(256), M, D)
    # the simulation keeps fewer trials running than offered (trials cut at the search's end, refill delays)
    scale = r["worker_utilisation"] / 0.8
    assert r["jobs_running"] == pytest.approx(model["jobs_running"], rel=0.25)
    assert r["postgres_tps"] == pytest.approx(model["postgres_tps"] * (0.5 + 0.5 * scale), rel=0.25)


def test_limit_is_where_the_resource_reaches_capacity():
    s = sim.Scenario(1)
    n = sim.limit("redis", s, M, D, CAP)
    assert n is not None and n > 1
    assert sim.utilisations(sim.expected(n, s, M, D), CAP)["redis"] >= 1
    assert sim.utilisations(sim.expected(n - 2, s, M, D), CAP)["redis"] < 1
    improved = sim.limit("redis", s, M, D.improved(), CAP)
    assert improved is None or improved > 10 * n
    assert sim.limit("postgres", s, M, D, replace(CAP, postgres_tps=1e-3)) == 0.0
    assert sim.limit("coordinator", s, M, D, replace(CAP, coordinator_cpu=1e9)) is None


def test_measured_figures_are_read_from_scale_json(tmp_path):
    phase = {"jobs": [{"search_s": 60.0, "trained": 3, "train_s": 60.0}], "postgres": {"transactions_per_s": 5.0},
             "coordinator_cpu": {"submit_ms": 2.0, "poll_ms": 1.0, "decode_ms": None},
             "blobs": {"bytes_per_remote_trial": 1000}}
    doc = {"settings": {"budget_s": 120, "date": "today"},
           "phases": [{**phase, "name": "1 worker, 1 job", "jobs": [{"search_s": 60.0, "trained": 1, "train_s": 40.0},
                                                                    {"search_s": None, "trained": 0, "train_s": 0}]},
                      {**phase, "name": "2 workers, 1 job"}]}
    path = tmp_path / "scale.json"
    path.write_text(json.dumps(doc))
    m = sim.Measured.from_scale(path)
    assert (m.train_s, m.search_fraction, m.pg_job_tps, m.submit_ms, m.poll_ms) == (25.0, 0.5, 5.0, 2.0, 1.0)
    assert m.decode_ms == sim.Measured.decode_ms and m.weight_bytes == 1000
