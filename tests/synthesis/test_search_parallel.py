"""The search's trial plans, and its trials elsewhere: a deterministic in-memory executor stands in for the
workers."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from synthesis.budget import Budget
from synthesis.executor import TrialOutcome, TrialRequest, run_request
from synthesis.progress import NullMonitor
from synthesis.search import Search
from synthesis.search_config import SearchConfig
from synthesis.space import Constraints
from synthesis.trial import Trial, TrialResult
from tests.synthesis.conftest import LATENCY


class ScriptedExecutor:
    """Runs nothing: each submitted trial ends at the next poll with a curve that depends on its index only.

    `silent` never returns anything (a queue no worker serves); `best_index` gets a near-perfect curve and
    weights that load as a marker."""

    local_worker = "coordinator"

    def __init__(self, slots: int, silent: bool = False, best_index: int | None = None) -> None:
        self.slots, self.silent, self.best_index = slots, silent, best_index
        self.requests: list[TrialRequest] = []
        self.pending: list[TrialRequest] = []
        self.cancelled = False
        self.loads = 0

    def free_slots(self) -> int:
        return max(self.slots - len(self.pending), 0)

    def submit(self, request: TrialRequest) -> None:
        # what crosses the wire is JSON: the round trip must give the same request
        assert TrialRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request
        self.requests.append(request)
        self.pending.append(request)

    def _weights(self) -> dict[str, Any]:
        self.loads += 1
        return {"params": {"marker": np.ones(1)}}

    def poll(self) -> list[TrialOutcome]:
        if self.silent:
            return []
        outcomes = []
        for request in self.pending:
            best = request.index == self.best_index
            curve = [0.9, 0.99, 1.0] if best else [0.1, 0.2 + 0.01 * (request.index % 7), 0.3]
            result = TrialResult(curve=curve, status="completed", epochs=3, seconds=1.0, best_metric=max(curve),
                                 first_epoch_s=0.5)
            outcome = TrialOutcome(request.index, result, f"remote-{request.index % 2}", {1: curve[0]},
                                 self._weights if best else None)
            outcomes.append(TrialOutcome.from_dict(json.loads(json.dumps(outcome.to_dict())), outcome.weights))
        self.pending = []
        return outcomes

    def cancel(self) -> None:
        self.cancelled = True
        self.pending = []


def _search(digits: tuple[Dataset, Any], budget: Budget, executor: ScriptedExecutor | None) -> Search:
    data, info = digits
    config = SearchConfig(horizon=4, seed=1)
    return Search(info, data, budget, config, Constraints(), LATENCY, NullMonitor(), executor)


def test_until_a_trial_has_trained_a_trial_may_take_all_the_search_has_left(digits: tuple[Dataset, Any]) -> None:
    """Cut short while nothing has trained (compilation alone can take most of its share on a busy machine), the
    first trial would leave the job nothing better than chance to deliver; later ones get half the search."""
    budget = Budget(seconds=100.0, clock=lambda: 0.0)
    search = _search(digits, budget, None)
    proposals = search.proposals()
    first = Trial(0, next(proposals))
    search.trials.append(first)
    assert search._plan(first)[1] == pytest.approx(100.0 * budget.search_end())
    first.curve = [0.5]
    second = Trial(1, next(proposals))
    search.trials.append(second)
    assert search._plan(second)[1] == pytest.approx(100.0 * budget.search_end() / 2)


def test_remote_results_are_merged_into_the_log_and_the_rungs(digits: tuple[Dataset, Any]) -> None:
    executor = ScriptedExecutor(slots=2, best_index=1)
    search = _search(digits, Budget(seconds=12), executor)
    trials = search.run()
    assert [t.index for t in trials] == list(range(len(trials)))  # every candidate logged once, in order
    remote = [t for t in trials if t.worker.startswith("remote-")]
    local = [t for t in trials if t.worker == "coordinator"]
    assert {t.index for t in remote} == {r.index for r in executor.requests}
    assert local and len(remote) >= 2
    assert all(t.status == "completed" and len(t.curve) == 3 for t in remote)
    assert not search.remote and all(t.status != "remote" for t in trials)
    # each remote trial's prediction at the first rung reached the coordinator's rung scores
    assert {t.curve[0] for t in remote} <= set(search.rung_scores[1])
    # the best remote trial's weights were fetched once, and it is the one whose weights the search keeps
    assert executor.loads == 1
    best = search.best_trained()
    assert best is not None and best.index == 1 and best.result is not None
    assert best.result.variables is not None and "marker" in best.result.variables["params"]
    entries = [t.to_dict() for t in trials]
    assert all("worker" in e for e in entries)


def test_remote_trials_are_sent_with_the_rung_snapshot_and_end_before_the_search(digits: tuple[Dataset, Any]
                                                                                 ) -> None:
    executor = ScriptedExecutor(slots=1)
    budget = Budget(seconds=12)
    started = time.time()
    _search(digits, budget, executor).run()
    assert executor.requests
    end = started + 12 * budget.search_end()
    for request in executor.requests:
        assert request.not_after <= end  # a remote trial's deadline ends by the search's end
        assert request.config["time_limit_s"] is not None and request.config["time_limit_s"] > 0
        assert set(request.rung_scores) == {1, 3}  # rungs(3, 4)
        assert request.train_rows == 360


def test_a_silent_executor_cannot_hold_the_search_past_its_end(digits: tuple[Dataset, Any]) -> None:
    executor = ScriptedExecutor(slots=1, silent=True)
    search = _search(digits, Budget(seconds=12), executor)
    trials = search.run()
    assert executor.cancelled
    sent = {r.index for r in executor.requests}
    assert sent and all(trials[i].status == "cancelled" and "search ended" in trials[i].reason for i in sent)
    assert any(t.curve for t in trials if t.index not in sent)  # the coordinator trained meanwhile
    assert search.best_trained() is not None


def test_an_epoch_budget_stays_in_process(digits: tuple[Dataset, Any]) -> None:
    executor = ScriptedExecutor(slots=4)
    trials = _search(digits, Budget(epochs=2), executor).run()
    assert not executor.requests
    assert all(t.worker in ("coordinator", "") for t in trials)  # trained here, or rejected


def test_the_remote_side_checks_its_data_and_its_deadline(digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    from synthesis import space

    candidate = space.seeds(info)[0]
    config = candidate.hparams.to_train_config(epochs=2, seed=0, time_limit_s=30.0, patience=None)
    from dataclasses import asdict

    request = TrialRequest(0, candidate.to_dict(), space.to_spec(candidate, info).to_dict(), asdict(config),
                           {1: [0.9, 0.95, 0.97]}, horizon=4, eta=3, not_after=time.time() + 60, train_rows=360)
    wrong = run_request(TrialRequest(**{**request.__dict__, "train_rows": 999}), data, "w")
    assert wrong.result.status == "failed" and "999" in wrong.result.reason
    late = run_request(TrialRequest(**{**request.__dict__, "not_after": time.time() - 1}), data, "w")
    assert late.result.status == "failed" and "after the search's end" in late.result.reason
    # a weak first epoch is below the rung's top third of the snapshot: ASHA stops it there
    stopped = run_request(request, data, "w")
    assert stopped.result.status == "stopped" and stopped.result.epochs == 1
    assert set(stopped.rung_predictions) == {1} and stopped.worker == "w"
    unwanted = run_request(TrialRequest(**{**request.__dict__, "rung_scores": {1: []}}), data, "w",
                           still_wanted=lambda: False)
    assert unwanted.result.status == "stopped" and unwanted.result.epochs == 1


def test_a_remote_report_carries_its_compile_seconds_and_older_ones_still_load() -> None:
    outcome = TrialOutcome(3, TrialResult(curve=[0.5], epochs=1, seconds=2.0, compile_seconds=1.5), "remote-0")
    doc = json.loads(json.dumps(outcome.to_dict()))
    assert TrialOutcome.from_dict(doc).result.compile_seconds == 1.5
    del doc["compile_seconds"]  # an outcome written before compile seconds were measured
    assert TrialOutcome.from_dict(doc).result.compile_seconds == 0.0
