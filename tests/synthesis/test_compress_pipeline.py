"""compress() end to end: the chosen network honours the tolerance on validation, its artifact decodes to it, a
cancellation still delivers, budgets are counted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core import artifact, tree
from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from core.reparam import Reparam
from core.train_config import TrainConfig
from domain.onnx_run import OnnxClassifier
from domain.rules import DEFAULT_TOLERANCE
from synthesis.budget import Budget
from synthesis.compress import Options, compress, grant, pipeline
from synthesis.compress.context import Context, State
from synthesis.compress.figures import figures
from synthesis.compress.retrain import retraining
from synthesis.progress import Cancelled, Stopped
from tests.synthesis.compress_setup import CONFIG, Recorder, digits, trained


def test_the_compressed_network_honours_the_tolerance_and_packs_exactly() -> None:
    spec, variables = trained()
    data = digits()
    recorder = Recorder()
    c = compress(spec, variables, data, tolerance=0.01, epochs=10, seed=1, monitor=recorder,
                 options=Options(prune_rounds=2), config=CONFIG)
    before = evaluate(build(spec), variables, data.x_val, data.y_val)["accuracy"]
    after = evaluate(build(c.spec), c.variables, data.x_val, data.y_val)["accuracy"]
    assert after >= before - 0.01
    assert c.figures["val_accuracy_after"] == pytest.approx(after)
    assert c.stop_reason == "completed" and c.ratio > 1.2
    assert 1 <= c.figures["epochs_used"] <= 10
    decoded = artifact.decode(c.artifact)
    for path, leaf in tree.flatten(c.variables["params"]).items():
        assert np.asarray(leaf, np.float32).tobytes() == tree.flatten(decoded.variables["params"])[path].tobytes()
    onnx = OnnxClassifier(c.onnx).predict(data.x_val)
    assert np.mean(onnx == data.y_val) == pytest.approx(after, abs=2 / len(data.y_val))
    b, a = c.figures["before"], c.figures["after"]
    assert a["nonzeros"] <= b["nonzeros"] and a["compressed_bytes"] == len(c.artifact) < b["compressed_bytes"]
    assert c.figures["ratio"] == pytest.approx(b["dense_bytes"] / a["compressed_bytes"])
    for key in ("params", "macs", "macs_nonzero", "onnx_gzip_bytes", "latency_ms", "accuracy"):
        assert a[key] is not None and b[key] is not None
    assert [k for k, _ in recorder.events if k.startswith("compress")]


def test_a_cancellation_delivers_the_best_accepted_network_and_stopped_propagates() -> None:
    spec, variables = trained()
    data = digits()
    cancelled = compress(spec, variables, data, epochs=8, monitor=Recorder(fail_at=3, error=Cancelled()))
    assert cancelled.stop_reason == "cancelled"
    assert cancelled.figures["val_accuracy_after"] >= cancelled.figures["val_accuracy_before"] - 0.005
    with pytest.raises(Stopped):
        compress(spec, variables, data, epochs=8, monitor=Recorder(fail_at=3, error=Stopped()),
                 options=Options(filters=False))


def test_retraining_grants_follow_the_budget() -> None:
    epochs = Budget(epochs=10)
    assert grant(epochs, 0.25, 30) == (2, None)
    epochs.spend_epochs(9)
    assert grant(epochs, 0.5, 30) == (1, None)
    assert grant(epochs, 0.5, 30, until=0.5)[0] == 0
    epochs.spend_epochs(1)
    assert grant(epochs, 0.5, 30)[0] == 0
    now = [0.0]
    seconds = Budget(seconds=100, clock=lambda: now[0])
    assert grant(seconds, 0.2, 30) == (30, 20.0)
    now[0] = 50.0
    epochs_granted, limit = grant(seconds, 0.5, 30, until=0.6)
    assert epochs_granted == 30 and limit == pytest.approx(10.0)
    assert grant(seconds, 0.5, 30, until=0.5) == (0, None)


def test_retraining_fine_tunes_with_adamw_at_a_share_of_the_networks_rate() -> None:
    adamw = TrainConfig(epochs=40, learning_rate=1e-3, warmup_fraction=0.05, patience=None, batch_size=64)
    sgd = TrainConfig(epochs=40, learning_rate=0.2, optimizer="sgd", warmup_fraction=0.15, batch_size=128)
    options = Options(lr_scale=0.5, patience=4)
    same = retraining(adamw, options, 12, None, seed=3)
    assert same == replace(adamw, epochs=12, learning_rate=5e-4, patience=4, seed=3)
    moved = retraining(sgd, options, 12, 30.0, seed=4)
    assert (moved.optimizer, moved.warmup_fraction) == ("adamw", 0.05)
    assert moved.learning_rate == pytest.approx(1e-3)
    assert (moved.batch_size, moved.epochs, moved.patience, moved.time_limit_s, moved.seed) == (128, 12, 4, 30.0, 4)


def test_compression_stops_once_the_network_is_compressed_enough() -> None:
    """No stage or round runs after an accepted network reaches ``enough``; without it the same run goes on."""
    spec, variables = trained()
    data = digits()
    runs = {}
    for enough in (None, 1.3):
        recorder = Recorder()
        c = compress(spec, variables, data, tolerance=0.05, epochs=12, seed=1, monitor=recorder,
                     options=Options(prune_rounds=3, enough=enough, post_training=False), config=CONFIG)
        runs[enough] = (c, [kind for kind, _ in recorder.events if kind.startswith("compress_")
                            and kind != "compress_retrain"])
    full, stopped = runs[None], runs[1.3]
    assert full[0].ratio > stopped[0].ratio >= 1.3
    assert len(stopped[1]) < len(full[1])
    assert stopped[1] == full[1][:len(stopped[1])]  # the same run, cut short
    with pytest.raises(ValueError, match="enough"):
        Options(enough=1.0)


def test_each_later_stage_keeps_back_its_reserved_share_of_the_tolerance() -> None:
    """With reserve r, filter selection may spend 1 - 2r of the tolerance, pruning 1 - r, bucketing all of it."""
    spec, variables = trained()
    recorder = Recorder()
    c = compress(spec, variables, digits(), tolerance=0.05, epochs=12, seed=1, monitor=recorder,
                 options=Options(prune_rounds=2, reserve=0.2, enough=None, loss_rise=None, post_training=False),
                 config=CONFIG)
    rounds = [p for kind, p in recorder.events if kind == "compress_round"]
    assert {p["stage"] for p in rounds} == {"filters", "connections", "buckets"}
    start = c.figures["val_accuracy_before"]
    spent = {"filters": 0.6, "connections": 0.8, "buckets": 1.0}
    for p in rounds:
        assert p["floor"] == pytest.approx(start - spent[p["stage"]] * 0.05)
        assert p["kept"] == (p["val_accuracy"] >= p["floor"]) and p["ceiling"] is None
    assert c.figures["val_accuracy_after"] >= start - 0.05
    for reserve in (0.5, -0.1):
        with pytest.raises(ValueError, match="reserve"):
            Options(reserve=reserve)


def test_a_network_whose_validation_loss_rose_past_the_limit_is_not_kept() -> None:
    """``loss_rise`` 0: a retrained network must validate at no higher a loss than the original, whatever its
    accuracy; rounds within the accuracy tolerance are rolled back for their loss alone."""
    spec, variables = trained()
    recorder = Recorder()
    c = compress(spec, variables, digits(), tolerance=0.2, epochs=12, seed=1, monitor=recorder,
                 options=Options(prune_rounds=3, enough=None, loss_rise=0.0), config=CONFIG)
    rounds = [p for kind, p in recorder.events if kind == "compress_round"]
    ceiling = c.figures["val_loss_before"]
    assert all(p["ceiling"] == pytest.approx(ceiling) for p in rounds)
    for p in rounds:
        assert p["kept"] == (p["val_accuracy"] >= p["floor"] and p["val_loss"] <= ceiling)
    assert any(p["val_accuracy"] >= p["floor"] and not p["kept"] for p in rounds)  # rolled back for the loss
    assert c.figures["val_loss_after"] <= ceiling
    with pytest.raises(ValueError, match="loss_rise"):
        Options(loss_rise=-0.1)


@pytest.mark.parametrize(("seconds", "retrains"), [(4.0, False), (1_000.0, True)])
def test_a_time_budget_keeps_the_measured_cost_of_the_final_measurements(monkeypatch: pytest.MonkeyPatch,
                                                                         seconds: float, retrains: bool) -> None:
    """Measuring a network (export, verification, latency) takes 3 s on this fake clock, which stands still
    otherwise: a 4 s budget must keep 3 s and half as much again for the end, so nothing is left to retrain."""
    now = [0.0]

    def slow_figures(*args: Any, **kwargs: Any) -> Any:
        now[0] += 3.0
        return figures(*args, **kwargs)

    monkeypatch.setattr(pipeline, "figures", slow_figures)
    spec, variables = trained()
    recorder = Recorder()
    c = compress(spec, variables, digits(), seconds=seconds, seed=1, monitor=recorder,
                 options=Options(prune_rounds=1, max_epochs=1), config=CONFIG, clock=lambda: now[0])
    assert any(kind == "compress_retrain" for kind, _ in recorder.events) is retrains
    assert c.figures["before"]["params"] == c.figures["after"]["params"] or retrains


@pytest.mark.parametrize(("val_rows", "lost_rows", "loss", "kept"), [
    (136, 1, 0.19, True),  # one row is 0.74 points, more than the tolerance: the loss decides
    (136, 1, 0.21, False),  # ... and it rose
    (136, 2, 0.10, False),  # two rows are more than the resolution excuses
    (400, 1, 0.10, True),  # one row is 0.25 points, within the tolerance anyway
    (400, 3, 0.10, False),  # 0.75 points: accuracy resolves the tolerance, the loss does not matter
])
def test_a_tolerance_finer_than_one_validation_row_lets_the_loss_decide_that_row(
        val_rows: int, lost_rows: int, loss: float, kept: bool) -> None:
    x, y = np.zeros((val_rows, 8, 8, 1), np.float32), np.arange(val_rows) % 10
    ctx = Context(Dataset(x, y, x, y), Budget(epochs=1), Options(loss_rise=None), CONFIG)
    spec, variables = trained()
    ctx.original = State(spec, variables, Reparam(), 1.0, 0.2)
    ctx.floor = 1.0 - DEFAULT_TOLERANCE
    assert ctx.within(State(spec, variables, Reparam(), 1.0 - lost_rows / val_rows, loss)) is kept
