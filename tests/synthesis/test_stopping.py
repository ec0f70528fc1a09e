"""The search hands its time to a leader far ahead: at equal epochs and beyond noise, several challengers in a row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from synthesis import search as search_module
from synthesis.budget import Budget
from synthesis.engine import Task, space_info
from synthesis.progress import NullReporter
from synthesis.search import Search, SearchConfig
from synthesis.space import Constraints, LatencyModel
from synthesis.stopping import AHEAD_AFTER, beaten, leader_ahead
from synthesis.trial import TrialResult

LATENCY = LatencyModel(ms_per_mmac=0.02, overhead_ms=0.05)
ROWS = 1_000


def test_a_curve_is_beaten_only_at_equal_epochs_and_beyond_noise() -> None:
    assert beaten([0.5, 0.7, 0.8], [0.3], ROWS)  # the leader's first epoch against the challenger's only one
    assert not beaten([0.2, 0.7, 0.8], [0.3], ROWS)  # a slow start is not held against the challenger's
    assert not beaten([0.5, 0.7], [0.49], ROWS)  # within noise (two standard errors: about 0.045 here)
    assert beaten([0.5, 0.7], [0.4, 0.6, 0.9], ROWS)  # the challenger's third epoch is not compared
    assert not beaten([0.5, 0.7], [0.4, 0.75], ROWS)
    assert not beaten([], [0.4], ROWS) and not beaten([0.9], [], ROWS)


def test_the_leader_must_beat_the_last_challengers_in_a_row_after_it() -> None:
    far, low = [0.6, 0.8, 0.9], [0.3]
    assert leader_ahead([far] + [low] * AHEAD_AFTER, ROWS) == 0
    assert leader_ahead([far] + [low] * (AHEAD_AFTER - 1), ROWS) is None  # too few challengers yet
    assert leader_ahead([low, far] + [low] * AHEAD_AFTER, ROWS) == 1  # older, beaten trials do not matter
    assert leader_ahead([far] + [low] * (AHEAD_AFTER - 1) + [[0.58]], ROWS) is None  # one came within noise
    assert leader_ahead([low] * AHEAD_AFTER + [far], ROWS) is None  # a new leader has beaten no one yet
    assert leader_ahead([far, [], low, [], low, low], ROWS) == 0  # untrained (failed) candidates are skipped
    assert leader_ahead([far] + [low] * AHEAD_AFTER, 10) is None  # 10 rows: 0.6 against 0.3 is within noise


def _data() -> tuple[Dataset, Any]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (200, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, 200)
    info = space_info(Task("image", x, y, 10), np.arange(100))
    return Dataset(x[:100], y[:100], x[100:], y[100:]), info


@pytest.mark.parametrize(("challenger", "ends"), [(0.3, True), (0.85, False)])
def test_the_search_ends_when_its_leader_is_far_ahead(challenger: float, ends: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted curves: the first candidate leads from its first epoch; the others stay at `challenger`."""

    def scripted(spec: Any, config: Any, data: Any, keep_going: Any, **_: Any) -> TrialResult:
        first = not calls
        calls.append(config)
        curve = [0.8, 0.9] if first else [challenger, challenger]
        return TrialResult(curve=curve, status="completed", epochs=2, seconds=1.0, best_metric=max(curve),
                           first_epoch_s=0.5, best_loss=0.5)

    calls: list[Any] = []
    monkeypatch.setattr(search_module, "run_trial", scripted)
    events: list[tuple[str, Any]] = []

    class Recorder(NullReporter):
        def event(self, kind: str, payload: Any) -> None:
            events.append((kind, payload))

    data, info = _data()
    search = Search(info, data, Budget(epochs=60), SearchConfig(horizon=2, seed=0, converged_after=100), Constraints(),
                    LATENCY, Recorder())
    trials = search.run()
    if ends:
        assert search.stop_reason == "leader_ahead" and len(trials) == AHEAD_AFTER + 1
        ((_kind, payload),) = [e for e in events if e[0] == "leader_ahead"]
        assert payload == {"candidate": trials[0].candidate.id, "beaten": [t.candidate.id for t in trials[1:]]}
    else:  # within noise of the leader (100 rows): the search goes on to its end
        assert search.stop_reason == "budget" and len(trials) > AHEAD_AFTER + 1
        assert not [e for e in events if e[0] == "leader_ahead"]
