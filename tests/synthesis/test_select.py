"""Which trained network wins: accuracy beyond its noise, within it the lower validation loss."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from synthesis import select
from synthesis.budget import Budget
from synthesis.executor import TrialOutcome
from synthesis.final import ranked
from synthesis.progress import NullMonitor
from synthesis.search import Search
from synthesis.search_config import SearchConfig
from synthesis.space import Constraints, LatencyModel, seeds, to_spec
from synthesis.trial import Trial, TrialResult, run_trial


def test_the_noise_is_the_standard_error_of_a_difference_and_at_least_one_row() -> None:
    assert select.noise(0.99, 0.99, 413) == pytest.approx(2 * np.sqrt(2 * 0.99 * 0.01 / 413))
    assert select.noise(0.99, 0.99, 413) * 413 == pytest.approx(5.72, abs=0.01)  # about six rows
    # SMS Spam, split seed 2: the word CNN validated 412 / 413, the wide text CNN 410 / 413: a tie
    assert 3 / 413 < select.noise(412 / 413, 410 / 413, 413) < 4 / 413
    assert select.noise(1.0, 1.0, 136) == pytest.approx(1 / 136)  # perfect scores still have a row's noise
    assert select.noise(0.5, 0.5, 0) >= 1.0  # no validation rows: every accuracy ties


def test_within_the_noise_the_lower_loss_wins_and_beyond_it_the_higher_accuracy() -> None:
    rows = 413
    one_row, seven_rows = 1 / rows, 7 / rows
    assert select.beats((0.98, 0.08), (0.98 + one_row, 0.12), rows)  # one row fewer right, much surer: wins
    assert not select.beats((0.98 + one_row, 0.12), (0.98, 0.08), rows)
    assert select.beats((0.98 + seven_rows, 0.12), (0.98, 0.08), rows)  # seven rows: beyond the noise (6.1)
    assert not select.beats((0.98, 0.08), (0.98 + seven_rows, 0.12), rows)
    assert not select.beats((0.99, 0.08), (0.99, 0.08), rows)  # a tie is no win
    assert select.beats((0.99, 0.5), (0.99, None), rows)  # an unknown loss never wins a tie ...
    assert not select.beats((0.99 + one_row, None), (0.99, 0.5), rows)
    assert select.beats((0.99 + one_row, None), (0.99, None), rows)  # ... two unknown: the accuracy


def test_rank_orders_the_tied_by_loss_then_the_rest_by_accuracy() -> None:
    rows = 100  # noise between 0.97 and 0.96: 5.2 rows; between 0.97 and 0.90: 6.9 rows
    scores = {"best-acc": (0.97, 0.30), "tied-surer": (0.96, 0.10), "tied-unknown": (0.97, None),
              "behind": (0.88, 0.01), "far-behind": (0.80, 0.01)}
    ranked = select.rank(list(scores), scores.__getitem__, rows)
    assert ranked == ["tied-surer", "best-acc", "tied-unknown", "behind", "far-behind"]
    assert select.rank([], scores.__getitem__, rows) == []


def test_losses_within_the_margin_leave_the_choice_to_the_accuracy_even_within_its_noise() -> None:
    """Issue 24's question-type search: 0.852 against 0.885 on 541 rows is within the noise (0.041), and the losses
    0.3484 against 0.3488 decided for the less accurate candidate."""
    rows = 541
    assert select.tied(0.852, 0.885, rows)
    assert select.beats((0.885, 0.3488), (0.852, 0.3484), rows)
    assert not select.beats((0.852, 0.3484), (0.885, 0.3488), rows)
    assert select.beats((0.852, 0.30), (0.885, 0.3488), rows)  # a loss 14 % lower still decides a tie
    scores = {"surer-by-a-hair": (0.852, 0.3484), "more-accurate": (0.885, 0.3488), "surer": (0.86, 0.30)}
    assert select.rank(list(scores), scores.__getitem__, rows) == ["surer", "more-accurate", "surer-by-a-hair"]
    near = {"surer-by-a-hair": (0.852, 0.3484), "more-accurate": (0.885, 0.3488)}
    assert select.rank(list(near), near.__getitem__, rows) == ["more-accurate", "surer-by-a-hair"]


def test_the_excess_loss_is_the_divergence_from_the_smoothed_targets() -> None:
    """At label smoothing s the excess loss is KL(smoothed targets || predictions): zero for a network that
    predicts the smoothed targets exactly, whatever s, so networks trained with different smoothing compare."""
    y = np.array([0, 2, 1, 1])
    for s in (0.0, 0.1):
        for p in (np.full((4, 3), 1 / 3), np.where(np.eye(3)[y] > 0, 0.9 + 0.1 / 3, 0.1 / 3)):
            logp = np.log(p)
            metrics = {"loss": float(-logp[np.arange(4), y].mean()), "uniform_loss": float(-logp.mean())}
            q = np.where(np.eye(3)[y] > 0, 1 - s + s / 3, s / 3)
            kl = float(np.mean(np.sum(q * (np.log(np.where(q > 0, q, 1)) - logp), axis=1)))
            assert select.excess_loss(metrics, s, 3) == pytest.approx(kl, abs=1e-12)
            assert kl > 1e-3 or (s == 0.1 and p[0, 0] > 0.5)  # zero only where the network is the target


def test_a_trial_records_the_validation_loss_of_the_epoch_it_keeps(digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    candidate = seeds(info)[0]
    spec = to_spec(candidate, info)
    config = candidate.hparams.to_train_config(epochs=3, seed=0, time_limit_s=None, patience=None)
    result = run_trial(spec, config, data, lambda _curve: True)
    assert result.status == "completed" and result.variables is not None and result.best_loss is not None
    kept = evaluate(build(spec), result.variables, data.x_val, data.y_val)
    assert kept["accuracy"] == pytest.approx(result.best_metric)
    assert config.label_smoothing > 0
    assert select.excess_loss(kept, config.label_smoothing, 10) == pytest.approx(result.best_loss, rel=1e-4)
    outcome = TrialOutcome(0, result)  # the loss crosses the wire to the coordinator; older outcomes lack it
    assert TrialOutcome.from_dict(json.loads(json.dumps(outcome.to_dict()))).result.best_loss == result.best_loss
    doc = outcome.to_dict()
    del doc["best_loss"]
    assert TrialOutcome.from_dict(doc).result.best_loss is None


def _trial(index: int, candidate: Any, accuracy: float, loss: float | None, status: str = "completed") -> Trial:
    kept = {"params": {"marker": np.full(1, index)}} if status == "completed" else None
    result = TrialResult(curve=[accuracy], status=status, epochs=1, best_metric=accuracy, best_loss=loss,
                         variables=kept)
    return Trial(index, candidate, status=status, curve=[accuracy], predicted=accuracy, result=result)


def test_the_search_keeps_and_ranks_the_weights_that_validate_best_within_the_noise(
        digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    rows = len(data.y_val)
    search = Search(info, data, Budget(epochs=10), SearchConfig(horizon=4), Constraints(),
                    LatencyModel(ms_per_mmac=0.02, overhead_ms=0.05), NullMonitor())
    candidate = seeds(info)[0]
    top, surer = _trial(0, candidate, 0.9, 0.30), _trial(1, candidate, 0.9 - 1 / rows, 0.10)
    stopped = _trial(2, candidate, 0.9, 0.05, status="stopped")  # its accuracy an extrapolation: its loss not counted
    search.trials += [top, surer, stopped]
    assert search.best_trained() is surer
    assert ranked(search) == [surer, top, stopped]
    ahead = _trial(3, candidate, 0.9 + 8 / rows, 0.50)  # beyond the noise (6.3 rows here): accuracy decides
    search.trials.append(ahead)
    assert search.best_trained() is ahead
    assert ranked(search)[0] is ahead


def test_the_search_keeps_the_weights_of_its_likely_winner_and_of_its_best_validated(
        digits: tuple[Dataset, Any]) -> None:
    """A trial trained halfway ranks by its extrapolated accuracy; one that validates as well at a lower loss is
    the fallback: both keep their weights, so the final training starts from the winner's."""
    data, info = digits
    rows = len(data.y_val)
    search = Search(info, data, Budget(epochs=10), SearchConfig(horizon=4), Constraints(),
                    LatencyModel(ms_per_mmac=0.02, overhead_ms=0.05), NullMonitor())
    candidate = seeds(info)[0]
    halfway = _trial(0, candidate, 0.9, 0.30)
    halfway.predicted = 0.9 + 8 / rows  # its extrapolation: beyond the noise (6.3 rows) of the others' 0.9
    surer, third = _trial(1, candidate, 0.9, 0.10), _trial(2, candidate, 0.9, 0.20)
    for trial in (halfway, surer, third):
        search.trials.append(trial)
        search._forget_weights_of_all_but_the_best()
    assert ranked(search)[0] is halfway and search.best_trained() is surer
    assert [t.result.variables is not None for t in search.trials if t.result] == [True, True, False]
