"""The synthesis engine on tiny data: a valid model within the budget, constraints held, failures isolated."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np
import pytest

from core import artifact, checkpoint, tree
from core.analysis import architecture
from core.data import Dataset
from core.evaluation import predict_proba
from core.model import build
from core.spec import Spec
from domain.onnx_run import OnnxClassifier
from synthesis import engine, select
from synthesis.budget import IMAGES, LARGE_DATA, STAGES, Budget
from synthesis.engine import synthesize
from synthesis.final import CALIBRATION_ROWS, validates_better
from synthesis.interface import Options, Synthesis, Task
from synthesis.pareto import dominates
from synthesis.search import Search
from synthesis.space import Constraints, SpaceInfo, seeds, to_spec
from synthesis.trial import Trial
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events


def _stable(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The search log without its wall-clock fields."""
    return [{k: v for k, v in e.items() if k not in ("seconds", "started_at", "latency_ms", "compile_seconds")}
            for e in log]


def trained_entries(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The search-log entries of the candidates that trained (the linear floor is fitted, not compiled)."""
    return [e for e in log if e["curve"] and e["arch"].get("encoder") != "linear"]


def _run(task: Task, epochs: int, seed: int = 0, **options: Any) -> Synthesis:
    return synthesize(task, Budget(epochs=epochs), Options(seed=seed, latency=LATENCY, **options))


@pytest.fixture(scope="module")
def twin_runs(digits_task: Task) -> tuple[Synthesis, Synthesis]:
    """Two runs with the same seed and epoch budget (compression included): the slowest runs here, shared."""
    return _run(digits_task, epochs=8, seed=3), _run(digits_task, epochs=8, seed=3)


def test_search_returns_a_valid_model(digits_task: Task, twin_runs: tuple[Synthesis, Synthesis]) -> None:
    result = twin_runs[0]
    spec = Spec.from_dict(result.model.spec)
    assert spec.num_classes == 10
    assert result.model.architecture == architecture(spec)
    assert result.model.metrics["test_accuracy"] > 0.5  # 10 classes: chance is 0.1
    assert "warning" not in result.model.metrics  # it learned
    assert len(result.log) >= 2 and result.log[0]["origin"].startswith("seed:")
    assert any(p["delivered"] for p in result.pareto)
    # what compilation cost: each trained candidate's share, the job's total (which includes them)
    assert all(e["compile_seconds"] > 0 for e in trained_entries(result.log))
    assert result.model.metrics["compile_seconds"] == round(result.compile_seconds, 3) > 0
    assert result.compile_seconds >= sum(e["compile_seconds"] for e in trained_entries(result.log)) - 0.01
    x_test = digits_task.x[:16].astype(np.float32)
    assert OnnxClassifier(result.model.onnx).predict_proba(x_test).shape == (16, 10)
    trained = [e for e in result.log if e["curve"]]
    assert sum(e["epochs"] for e in trained) <= 8 * Budget(epochs=8).search_end()  # the search share holds
    _check_compressed(result, x_test)


FIGURES = ("params", "nonzeros", "dense_bytes", "compressed_bytes", "onnx_bytes", "onnx_gzip_bytes", "macs",
           "macs_nonzero", "latency_ms", "accuracy")


def _check_compressed(result: Synthesis, x: np.ndarray) -> None:
    """The compressed variant: its artifact decodes to the network its ONNX export computes, it has its
    before / after figures, it keeps validation accuracy within the tolerance, and it is on the Pareto front
    (or beaten there on every objective)."""
    c = result.compressed
    assert c is not None
    decoded = artifact.decode(c.artifact)
    assert decoded.spec.to_dict() == c.model.spec and len(c.artifact) == c.model.metrics["model_bytes"]
    assert c.model.architecture == architecture(decoded.spec)
    proba = predict_proba(build(decoded.spec), decoded.variables, x)
    assert np.max(np.abs(OnnxClassifier(c.model.onnx).predict_proba(x) - proba)) <= 1e-3
    figures = c.figures
    assert all(figures[side][k] is not None for side in ("before", "after") for k in FIGURES)
    assert figures["after"]["compressed_bytes"] == len(c.artifact)
    assert figures["val_accuracy_after"] >= figures["val_accuracy_before"] - figures["tolerance"] - 1e-9
    assert figures["tolerance"] == Options().tolerance and c.model.metrics["test_accuracy"] is not None
    assert 0 <= c.model.metrics["test_ece"] <= 1  # the compressed variant's own calibration on the test split
    assert sum(b["count"] for b in c.model.metrics["test_reliability"]) == result.split["test"]
    assert c.model.metrics["candidate"] == result.model.metrics["candidate"]
    point = {"accuracy": figures["val_accuracy_after"], "params": c.model.metrics["nonzero_params"],
             "latency_ms": c.model.metrics["latency_ms"]}
    assert (any(p.get("variant") == "compressed" for p in result.pareto)
            or any(dominates(p, point) for p in result.pareto))


def test_reproducible_mode_gives_the_same_search_log(twin_runs: tuple[Synthesis, Synthesis]) -> None:
    first, second = twin_runs
    assert _stable(first.log) == _stable(second.log)
    assert first.model.metrics["candidate"] == second.model.metrics["candidate"]
    weights = [tree.flatten(checkpoint.from_bytes(r.model.weights).variables) for r in (first, second)]
    assert weights[0].keys() == weights[1].keys()
    assert all(np.array_equal(weights[0][k], weights[1][k]) for k in weights[0])  # bit-identical training
    assert first.compressed is not None and second.compressed is not None
    assert first.compressed.artifact == second.compressed.artifact  # and the same compression


def test_a_candidate_over_the_memory_limit_fails_alone(digits_task: Task) -> None:
    result = _run(digits_task, epochs=16, memory_limit=2 * 2**20, compress=False)  # 2 MiB: only small networks fit
    failed = [e for e in result.log if e["status"] == "failed"]
    assert failed and all(e["reason"].startswith("out of memory") for e in failed)
    assert all(e["memory_bytes"] <= 2 * 2**20 for e in result.log if e["curve"])
    assert result.model.metrics["test_accuracy"] is not None


def test_constraints_are_never_violated(digits_task: Task) -> None:
    limit = Constraints(max_params=20_000)
    result = _run(digits_task, epochs=16, constraints=limit, compress=False)
    assert result.model.param_count <= 20_000
    assert all(e["params"] <= 20_000 for e in result.log if e["status"] != "rejected")
    assert all("max_params" in e["reason"] for e in result.log if e["status"] == "rejected")


def test_time_budget_trials_start_within_the_search_share(digits_task: Task) -> None:
    budget = Budget(seconds=15)
    result = synthesize(digits_task, budget, Options(latency=LATENCY))
    assert result.log and all(e["started_at"] < budget.search_end() for e in result.log)
    assert result.seconds > 0


def test_an_image_time_budget_mostly_trains_the_network_that_ships_and_says_where_its_seconds_went(
        digits_task: Task) -> None:
    """Under a time budget an image job gets the image schedule; the final training continues the leader's search
    weights on the training and validation rows, with its schedule planned in seconds, and the model's metrics
    account for every stage's seconds and the share that trained the shipped network."""
    events, budget = Events(), Budget(seconds=30)
    result = synthesize(digits_task, budget, Options(latency=LATENCY, compress=False), events)
    assert budget.schedule == IMAGES and IMAGES.final > 0.6
    (final,) = events.of("final")
    assert final["refit"] and final["from_search"]
    assert final["train_rows"] == result.split["train"] + result.split["val"] - min(CALIBRATION_ROWS,
                                                                                    result.split["val"] // 2)
    spent = result.model.metrics["time_spent"]
    assert events.of("time_spent") == [spent]
    stages = [spent[f"{stage}_s"] for stage in STAGES]
    assert all(s >= 0 for s in stages) and spent["total_s"] == pytest.approx(sum(stages), abs=0.3)
    winner = next(e for e in result.log if e["id"] == result.model.metrics["candidate"])
    assert spent["shipped_network_training_s"] == pytest.approx(winner["seconds"] + final["seconds"], abs=0.2)
    assert spent["shipped_network_training_share"] == pytest.approx(spent["shipped_network_training_s"] / 30, abs=5e-3)
    assert result.model.metrics["refit"] is True
    assert result.model.metrics["val_accuracy"] is None  # the refit trained on the validation rows
    assert result.model.metrics["search_val_accuracy"] == pytest.approx(max(winner["curve"]), abs=1e-6)  # measured


def test_large_data_is_searched_on_a_sample_and_trained_finally_on_the_labelled_rows_calibration_leaves(
        digits_task: Task, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image search on a sample; the final training continues the leader's search weights on all training and
    validation rows but the ones it leaves out to calibrate its own weights on (the refit), and the image schedule
    gives it most of the budget."""
    monkeypatch.setattr(engine, "SEARCH_ROWS", 120)  # digits_task trains on 360 rows: "large" here
    events, budget, searches = Events(), Budget(epochs=8), _record_searches(monkeypatch)
    result = synthesize(digits_task, budget, Options(latency=LATENCY, compress=False), events)
    train_rows, searched_rows = result.split["train"], [len(s.data.x_train) for s in searches]
    assert searched_rows == [events.of("split")[0]["search_train"]] and abs(searched_rows[0] - 120) <= 10
    (final,) = events.of("final")
    left_out = min(CALIBRATION_ROWS, result.split["val"] // 2)
    assert final["train_rows"] == train_rows + result.split["val"] - left_out and train_rows > 300 and final["refit"]
    assert [e["rows"] for e in events.of("calibration")] == [left_out] and left_out > 0
    assert budget.schedule == LARGE_DATA  # an epoch budget: the final training, on all rows, gets the larger share
    assert result.model.metrics["refit"] is True and result.model.metrics["test_accuracy"] > 0.3
    _assert_final_start(events, searches[0], from_search=True)  # images continue from the search weights


def test_on_all_rows_the_final_training_starts_from_the_winners_search_weights(
        digits_task: Task, monkeypatch: pytest.MonkeyPatch) -> None:
    events, searches = Events(), _record_searches(monkeypatch)
    synthesize(digits_task, Budget(epochs=8), Options(latency=LATENCY, compress=False), events)
    _assert_final_start(events, searches[0], from_search=True)


def _record_searches(monkeypatch: pytest.MonkeyPatch) -> list[Search]:
    """The engine's searches, recorded as they are made."""
    searches: list[Search] = []

    class _Recorded(Search):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            searches.append(self)

    monkeypatch.setattr(engine, "Search", _Recorded)
    return searches


def _assert_final_start(events: Events, search: Search, from_search: bool) -> None:
    final = events.of("final")[0]
    winner = next(t for t in search.trials if t.candidate.id == final["candidate"])
    assert winner.result is not None and winner.result.variables is not None  # the search kept its weights ...
    assert final["from_search"] is from_search  # ... and they are the start only where no rows are new


def test_a_network_no_better_than_the_commonest_class_ships_with_a_warning() -> None:
    """Identical images cannot be told apart: whatever the network learns, it validates at most as well as
    always answering the commonest class (70 %), and the user is told so."""
    y = np.arange(200) % 10 < 7
    events = Events()
    result = synthesize(Task("image", np.zeros((200, 8, 8, 1), np.uint8), y.astype(np.int64), 2), Budget(epochs=4),
                        Options(latency=LATENCY, compress=False), events)
    warning = result.model.metrics["warning"]
    assert "commonest class alone 70.0%" in warning and "larger budget" in warning
    assert events.of("warning") == [{"message": warning}]


def test_a_caller_keeping_its_own_test_rows_gets_a_model_and_no_report() -> None:
    """``test_fraction`` 0 (the benchmarks keep their own test rows): the explainability report, which is of the test
    rows, is left out rather than failing the job after its model was trained."""
    rng = np.random.default_rng(0)
    y = np.arange(120) % 2
    x = (rng.random((120, 8, 8, 1)) * 60 + 150 * y[:, None, None, None]).astype(np.uint8)
    result = synthesize(Task("image", x, y.astype(np.int64), 2), Budget(epochs=3),
                        Options(latency=LATENCY, compress=False, test_fraction=0.0))
    assert result.split["test"] == 0 and result.model.onnx and result.model.report is None


def test_the_chance_level_warning_compares_with_the_commonest_class() -> None:
    y = np.array([0, 0, 0, 1])
    assert select.chance_level_warning(0.75, y) is not None and select.chance_level_warning(0.5, y) is not None
    assert select.chance_level_warning(1.0, y) is None and select.chance_level_warning(0.0, y[:0]) is None


def test_search_data_samples_only_the_training_rows() -> None:
    x, y = np.arange(30_000, dtype=np.float32).reshape(-1, 1), np.arange(30_000) % 3
    data = Dataset(x, y, x[:50], y[:50])
    sample = engine.search_data(data, seed=1)
    assert abs(len(sample.x_train) - engine.SEARCH_ROWS) <= 3 and sample.x_val is data.x_val  # 3 classes round
    assert set(sample.x_train[:, 0].astype(int)) <= set(range(30_000))
    assert np.array_equal(sample.y_train, y[sample.x_train[:, 0].astype(int)])  # rows stay with their labels
    small = Dataset(x[:900], y[:900], x[:50], y[:50])
    assert engine.search_data(small, seed=1) is small


def test_text_task() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    x = rng.integers(2, 50, (300, 12)).astype(np.int32)
    x[:, 0] = np.where(y == 1, 60, 61)  # the first token gives the class away
    result = _run(Task("text", x, y, 2, vocab_size=64), epochs=24, compress=False)  # compression: tested above
    metrics = result.model.metrics
    assert metrics["test_accuracy"] >= 0.9 and metrics["refit"] is True  # trained again on all labelled rows
    assert result.compressed is None and all(p.get("variant") != "compressed" for p in result.pareto)


def test_between_the_final_network_and_a_kept_trial_a_validation_tie_goes_to_the_lower_loss() -> None:
    """Equal validation accuracy (a few hundred rows often tie) is broken by the validation loss, as between a
    training run's epochs (core.training.better)."""
    info = SpaceInfo("image", (8, 8, 1), 3)
    candidate = seeds(info)[0]
    model = build(to_spec(candidate, info))
    sure = model.init(jax.random.key(0))
    x = np.random.default_rng(0).normal(0, 1, (40, 8, 8, 1)).astype(np.float32)
    y = np.asarray(predict_proba(model, sure, x).argmax(axis=1), np.int32)  # every answer right: accuracy 1
    flat = tree.flatten(sure)
    flat["params/logits/kernel"] = flat["params/logits/kernel"] * 0.1  # the same answers, less sure of them
    unsure = tree.unflatten(flat)
    data = Dataset(x, y, x, y)
    trial = Trial(0, candidate)
    assert validates_better((trial, sure), (trial, unsure), info, data)
    assert not validates_better((trial, unsure), (trial, sure), info, data)


def test_with_no_time_left_for_an_epoch_the_search_weights_ship_without_a_final_training(digits_task: Task) -> None:
    """A restarted job's small remainder: when the search ends with less of the budget left than the winner's first
    epoch took, the final training (which could only overrun the budget) is skipped and the search's weights ship."""
    offset = [0.0]
    budget = Budget(seconds=15, clock=lambda: time.monotonic() + offset[0])

    class Late(Events):
        def stage(self, name: str) -> None:
            if name == "final_training":  # the search ends with half a second of the budget left
                offset[0] += budget.left(1.0) - 0.5

    events = Late()
    result = synthesize(digits_task, budget, Options(latency=LATENCY, compress=False), events)
    (final,) = events.of("final")
    assert final["status"] == "skipped" and final["from_search"] and "first epoch took" in final["reason"]
    best = max((e for e in result.log if e["curve"]), key=lambda e: e["accuracy"])
    assert result.model.metrics["candidate"] == best["id"]
    assert not Budget(epochs=3).too_short_for(1e9) and Budget(seconds=10).too_short_for(11.0)
