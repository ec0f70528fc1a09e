"""Text networks scored on the floor's folds of the labelled rows: each row by the network that did not train on it,
the choice and the ensemble's weight made on those rows, and the folds' networks averaged in what ships."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import jax
import numpy as np
import pytest

from core.evaluation import predict_proba
from core.model import build
from core.train_config import TrainConfig
from synthesis.budget import Budget, Schedule
from synthesis.engine import synthesize
from synthesis.ensemble import finish
from synthesis.final import Final
from synthesis.floor import fit_trial, labelled
from synthesis.folds import FoldNetworks, probabilities_log, recipe, spec_proba, train_folds
from synthesis.interface import Options
from synthesis.linear import LinearFit, folds, scores
from synthesis.search import Search
from synthesis.space import seeds, to_spec
from synthesis.trial import Trial, TrialResult, run_trial
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events
from tests.synthesis.test_linear_floor import floor_candidate, halves, info_of
from tests.synthesis.test_text_refit import word_task

TASK = word_task(n=300, classes=2)
INFO, DATA = info_of(TASK), halves(TASK)


@pytest.fixture(scope="module")
def trained() -> tuple[Trial, LinearFit, Final]:
    """The floor fitted on the labelled rows and a small network's validated final run."""
    floor_trial = Trial(0, floor_candidate(TASK))
    floor_trial.result, fitted = fit_trial(INFO, DATA, 0.0, None)
    assert fitted is not None
    network = next(c for c in seeds(INFO) if c.origin == "seed:kim-cnn")
    config = network.hparams.to_train_config(epochs=8, seed=0, patience=None, time_limit_s=None)
    run = run_trial(to_spec(network, INFO), config, DATA, lambda _curve: True)
    assert run.variables is not None and run.best_epoch >= 1
    return floor_trial, fitted, Final(Trial(1, network), run.variables, run.seconds, False, run.best_metric, config,
                                      None, run)


def folded_run(trained: tuple[Trial, LinearFit, Final], budget: Budget, events: Events) -> FoldNetworks | None:
    floor_trial, fitted, final = trained
    search = SimpleNamespace(floor=(floor_trial, fitted), tick=lambda: None)
    return train_folds(final, cast(Search, search), INFO, DATA, budget, events, seed=0)


@pytest.fixture(scope="module")
def folded(trained: tuple[Trial, LinearFit, Final]) -> FoldNetworks:
    events = Events()
    out = folded_run(trained, Budget(epochs=200), events)
    assert out is not None
    (done,) = events.of("folds")
    assert done["status"] == "completed" and done["folds"] == 5 and done["rows"] == len(DATA.y_train) + len(DATA.y_val)
    assert done["epochs"] == trained[2].validated.best_epoch  # type: ignore[union-attr]  # it started afresh
    assert done["schedule_epochs"] == 8  # the validated run's schedule
    return out


def test_the_folds_repeat_the_schedule_of_the_run_that_won_and_keep_its_epoch(
    trained: tuple[Trial, LinearFit, Final],
) -> None:
    floor_trial, fitted, final = trained
    assert final.validated is not None
    repeated = recipe(final)
    assert repeated is not None and repeated[0] is final.validated
    assert repeated[1].epochs == 8 and repeated[2] == final.validated.best_epoch
    trial = Trial(2, final.winner.candidate)
    trial.result = TrialResult(epochs=12, best_epoch=6, variables={"params": {}})
    # the search trial's weights ship: its schedule as long as it ran, kept at its kept epoch
    repeated = recipe(Final.of_trial(trial, {"params": {}}))
    assert repeated is not None and repeated[0] is trial.result and (repeated[1].epochs, repeated[2]) == (12, 6)
    # a final run that continued the trial's weights: the trial's kept epochs, then its own, on one schedule
    continued = Final(trial, {}, 0.0, False, 0.9, TrainConfig(epochs=10), {"params": {}},
                      TrialResult(epochs=10, best_epoch=3))
    repeated = recipe(continued)
    assert repeated is not None and (repeated[1].epochs, repeated[2]) == (16, 9)
    # each fold trains on the whole schedule's rates but stops at the kept epoch
    early = Final(final.winner, final.variables, 0.0, False, 0.9, final.schedule, None,
                  replace(final.validated, best_epoch=3))
    events, budget = Events(), Budget(epochs=200)
    search = SimpleNamespace(floor=(floor_trial, fitted), tick=lambda: None)
    assert train_folds(early, cast(Search, search), INFO, DATA, budget, events, seed=0) is not None
    (done,) = events.of("folds")
    assert (done["epochs"], done["schedule_epochs"]) == (3, 8) and budget.epochs_used == 5 * 3


def test_every_labelled_row_is_scored_by_the_network_of_the_fold_that_held_it_out(folded: FoldNetworks) -> None:
    x, y = labelled(DATA)
    spec = to_spec(next(c for c in seeds(INFO) if c.origin == "seed:kim-cnn"), INFO)
    splits = folds(y, 0)  # the floor's folds
    assert len(folded.variables) == len(splits) and not folded.shipped
    for (_, test), variables in zip(splits, folded.variables, strict=True):
        np.testing.assert_allclose(folded.held_out[test], probabilities_log(spec_proba(spec, variables, x[test])),
                                   atol=1e-5)
    assert scores(folded.held_out, y)[0] >= 0.85  # the class is in the first word: the networks read it
    assert {tuple(np.sort(np.concatenate([test for _, test in splits])))} == {tuple(range(len(y)))}


def test_the_choice_is_made_on_every_labelled_row_and_the_folds_networks_ship_averaged(
    trained: tuple[Trial, LinearFit, Final], folded: FoldNetworks,
) -> None:
    floor_trial, fitted, final = trained
    events = Events()

    def refit() -> None:
        raise AssertionError("the folds' networks ship: no network is refitted")

    shipped, validated, delivered = finish([floor_trial, final.winner], (floor_trial, fitted), final.winner,
                                           final.variables, INFO, DATA, events, 0, refit, folded)
    (choice,) = events.of("ensemble")
    y = labelled(DATA)[1]
    assert choice["scored_on"] == "folds" and choice["rows"] == len(y)
    assert choice["chosen"] in ("network", "ensemble") and choice["fold_networks"] == 5 and folded.shipped
    assert shipped.candidate.origin.endswith(f"{final.winner.candidate.id}*5") and validated is delivered
    # what ships: the weighted sum of its members' log-probabilities, the folds' networks at equal weights
    weights = shipped.candidate.arch["weights"]
    members = [fitted.log_proba(DATA.x_val)] if choice["chosen"] == "ensemble" else []
    spec = to_spec(final.winner.candidate, INFO)
    members += [probabilities_log(spec_proba(spec, v, DATA.x_val)) for v in folded.variables]
    assert len(set(weights[-5:])) == 1 and len(weights) == len(members)
    expected = jax.nn.softmax(sum(w * m for w, m in zip(weights, members, strict=True)), axis=-1)
    got = predict_proba(build(to_spec(shipped.candidate, INFO)), delivered, DATA.x_val)
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_folds_are_skipped_when_their_epochs_do_not_fit_and_without_a_floor_on_these_rows(
    trained: tuple[Trial, LinearFit, Final],
) -> None:
    budget = Budget(epochs=40)
    budget.spend_epochs(29)  # 40 * 0.75 = 30 epochs until the final training ends: 1 left, fewer than 5 folds need
    events = Events()
    assert folded_run(trained, budget, events) is None
    (skipped,) = events.of("folds")
    assert skipped["status"] == "skipped" and "epochs" in skipped["reason"]
    floor_trial, fitted, final = trained
    # a floor fitted on fewer rows (a search on a sample): its folds are not these rows
    sample = SimpleNamespace(floor=(floor_trial, LinearFit(**{**fitted.__dict__, "held_out": fitted.held_out[:-1]})),
                             tick=lambda: None)
    assert train_folds(final, cast(Search, sample), INFO, DATA, Budget(epochs=200), Events(), 0) is None


def test_a_text_job_with_time_for_the_folds_ships_the_folds_networks() -> None:
    events = Events()
    budget = Budget(epochs=600, schedule=Schedule(search=0.1, fine=0.05, final=0.75, delivery=0.05, explain=0.05))
    result = synthesize(word_task(n=300, classes=2), budget, Options(seed=0, latency=LATENCY, compress=False), events)
    (done,) = events.of("folds")
    (choice,) = events.of("ensemble")
    assert done["status"] == "completed" and choice["scored_on"] == "folds" and choice["chosen"] != "floor"
    assert not [e for e in events.of("refit") if e["model"] == "network"]
    metrics = result.model.metrics
    assert metrics["refit"] is True and metrics["val_accuracy"] is None
    assert result.log[-1]["origin"].endswith(f"*{choice['fold_networks']}") and metrics["test_accuracy"] >= 0.8


def test_when_the_time_runs_out_between_two_folds_the_folds_are_given_up_not_the_job(
    trained: tuple[Trial, LinearFit, Final],
) -> None:
    """A fold that ends at the final training's end leaves no time for the next: the folds are given up (the
    validation rows decide), and the next fold is not started with a time limit of zero, which failed the job."""
    floor_trial, fitted, final = trained
    now = {"t": 0.0}
    budget = Budget(seconds=100_000.0, clock=lambda: now["t"])

    def tick() -> None:  # the first epoch of the first fold takes the final training's time
        now["t"] = 100_000.0 * budget.final_end()

    search = SimpleNamespace(floor=(floor_trial, fitted), tick=tick)
    events = Events()
    assert train_folds(final, cast(Search, search), INFO, DATA, budget, events, seed=0) is None
    (given_up,) = events.of("folds")
    assert given_up["status"] == "deadline" and given_up["fold"] == 1
