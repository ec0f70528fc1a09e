"""The search hands its time to a leader far ahead: at equal epochs and beyond noise, several challengers in a row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from synthesis import search as search_module
from synthesis.budget import Budget
from synthesis.engine import space_info
from synthesis.interface import Task
from synthesis.search import Search
from synthesis.search_config import SearchConfig
from synthesis.space import Constraints, LatencyModel
from synthesis.stopping import AHEAD_AFTER, Run, beaten, leader_ahead
from synthesis.trial import TrialResult
from tests.synthesis.events import Events

LATENCY = LatencyModel(ms_per_mmac=0.02, overhead_ms=0.05)
ROWS = 1_000


def test_without_times_a_curve_is_beaten_at_equal_epochs_and_beyond_noise() -> None:
    def beats(a: list[float], b: list[float]) -> bool:
        return beaten(Run(a), Run(b), ROWS)

    assert beats([0.5, 0.7, 0.8], [0.3])  # the leader's first epoch against the challenger's only one
    assert not beats([0.2, 0.7, 0.8], [0.3])  # a slow start is not held against the challenger's
    assert not beats([0.5, 0.7], [0.49])  # within noise (two standard errors: about 0.045 here)
    assert beats([0.5, 0.7], [0.4, 0.6, 0.9])  # the challenger's third epoch is not compared
    assert not beats([0.5, 0.7], [0.4, 0.75])
    assert not beats([], [0.4]) and not beats([0.9], [])


def test_with_times_a_curve_is_beaten_at_equal_training_seconds() -> None:
    leader = Run([0.41, 0.50, 0.54, 0.58, 0.61, 0.62], epoch_s=13.0)  # the hand CNN on 32x32 photos
    assert beaten(leader, Run([0.45, 0.549], epoch_s=45.0), ROWS)  # a ResNet: ahead per epoch, behind per second
    assert not beaten(leader, Run([0.463], epoch_s=20.0), ROWS)  # a wider CNN, ahead after its one epoch
    assert not beaten(leader, Run([0.40, 0.62], epoch_s=5.0), ROWS)  # a faster one: level at 10 s
    assert beaten(leader, Run([0.30, 0.35, 0.40, 0.45, 0.5, 0.52, 0.53, 0.54], epoch_s=13.0), ROWS)  # longer, worse
    assert beaten(Run([0.41], epoch_s=13.0), Run([0.2], epoch_s=1.0), ROWS)  # at least each one's first epoch
    assert not beaten(leader, Run([0.45, 0.549], epoch_s=0.0), ROWS)  # a time unknown: at equal epochs


def test_the_leader_must_beat_the_last_challengers_in_a_row_after_it() -> None:
    def ahead(curves: list[list[float]], rows: int = ROWS) -> int | None:
        return leader_ahead([Run(c) for c in curves], rows)

    far, low = [0.6, 0.8, 0.9], [0.3]
    assert ahead([far] + [low] * AHEAD_AFTER) == 0
    assert ahead([far] + [low] * (AHEAD_AFTER - 1)) is None  # too few challengers yet
    assert ahead([low, far] + [low] * AHEAD_AFTER) == 1  # older, beaten trials do not matter
    assert ahead([far] + [low] * (AHEAD_AFTER - 1) + [[0.58]]) is None  # one came within noise
    assert ahead([low] * AHEAD_AFTER + [far]) is None  # a new leader has beaten no one yet
    assert ahead([far, [], low, [], low, low]) == 0  # untrained (failed) candidates are skipped
    assert ahead([far] + [low] * AHEAD_AFTER, 10) is None  # 10 rows: 0.6 against 0.3 is within noise


def _data() -> tuple[Dataset, Any]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (200, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, 200)
    info = space_info(Task("image", x, y, 10), np.arange(100))
    return Dataset(x[:100], y[:100], x[100:], y[100:]), info


@pytest.mark.parametrize(("challenger", "ends", "budget"), [
    (0.3, True, "epochs"), (0.3, True, "seconds"), (0.85, False, "epochs")])
def test_the_search_ends_when_its_leader_is_far_ahead(challenger: float, ends: bool, budget: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted curves: the first candidate leads from its first epoch; the others stay at `challenger` (under a
    time budget each scripted trial reports 1 s of training)."""

    def scripted(spec: Any, config: Any, data: Any, keep_going: Any, **_: Any) -> TrialResult:
        first = not calls
        calls.append(config)
        curve = [0.8, 0.9] if first else [challenger, challenger]
        return TrialResult(curve=curve, status="completed", epochs=2, seconds=1.0, best_metric=max(curve),
                           first_epoch_s=0.5, best_loss=0.5)

    calls: list[Any] = []
    monkeypatch.setattr(search_module, "run_trial", scripted)
    events = Events()
    data, info = _data()
    limit = Budget(epochs=60) if budget == "epochs" else Budget(seconds=600)
    search = Search(info, data, limit, SearchConfig(horizon=2, seed=0, converged_after=100), Constraints(), LATENCY,
                    events)
    trials = search.run()
    if ends:
        assert search.stop_reason == "leader_ahead" and len(trials) == AHEAD_AFTER + 1
        (payload,) = events.of("leader_ahead")
        assert payload == {"candidate": trials[0].candidate.id, "beaten": [t.candidate.id for t in trials[1:]]}
    else:  # within noise of the leader (100 rows): the search goes on to its end
        assert search.stop_reason == "budget" and len(trials) > AHEAD_AFTER + 1
        assert not events.of("leader_ahead")
