"""The final training: the search's leading network trained on for the rest of its share of the budget.

Images follow one recipe: the final training continues from the leader's search weights (its search time is
training of the network that ships, not lost), trains on the training and validation rows together once the
search's validation has chosen the network, the flips and the recipe (every labelled row but the held-out test rows
trains the shipped network), and plans its learning-rate schedule in seconds, so it ends at the share's end
(`core.train_config.TrainConfig.until_deadline`). Text networks train on the training rows, validated, and start
afresh when the search trained on a sample (`synthesis.ensemble` then weighs them against the linear floor on the
validation rows); a text network that ships is then trained again the same way on the training and validation rows
together, for the epochs validation kept (`refit_network`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from core.spec import Spec
from core.train_config import TrainConfig
from synthesis import folds, select, space
from synthesis.augment import flip_test
from synthesis.budget import Budget
from synthesis.floor import labelled
from synthesis.linear import FOLDS
from synthesis.pace import FINAL_MARGIN
from synthesis.progress import Cancelled, Monitor, OutOfTime
from synthesis.reports import Snapshots
from synthesis.search import Search
from synthesis.trial import Trial, TrialResult, run_trial, run_until

VALIDATED_SHARE = 0.45
"""The share of the final training's time a text network's validated run plans for; the rest is for its refit on the
training and validation rows (`refit_network`): at most as many epochs, on about a ninth more rows. Not tuned on a
set."""
FOLDED_SHARE = 1 / (FOLDS + 1)
"""The share a text network's validated run plans for when the folds follow it (`synthesis.folds`): one run's time
for it, the rest for the folds' networks, each about as long."""


def refits(info: space.SpaceInfo) -> bool:
    """Whether the final training of `info`'s networks trains on the validation rows too (images)."""
    return info.modality == "image"


CALIBRATION_ROWS = 1000
"""The most validation rows a refit leaves out, so that its own weights are calibrated on rows they did not train on
(half the validation rows when there are fewer than twice as many): another network's temperature does not fit them,
as the search's weights, trained on fewer rows for fewer epochs, are more or less sure of themselves."""


def calibration_rows(data: Dataset) -> int:
    """How many validation rows, the last ones, a refit leaves out for calibration."""
    return min(CALIBRATION_ROWS, len(data.y_val) // 2)


def refit_rows(data: Dataset) -> Dataset:
    """The training rows and the validation rows but the last `calibration_rows` together as training rows; the
    rows left out are evaluated after each epoch, as a check that training went well, and calibrate the weights."""
    cut = len(data.y_val) - calibration_rows(data)
    x, y = labelled(Dataset(data.x_train, data.y_train, data.x_val[:cut], data.y_val[:cut]))
    return Dataset(x, y, data.x_val[cut:], data.y_val[cut:])


@dataclass
class Final:
    """The network that ships and what trained it: its trial, its weights, the seconds of training they hold (the
    search trial's when the final training continued from them or they ship as they are, plus the final
    training's), whether they trained on the validation rows too, and their accuracy on the validation rows while
    those were held out (None after a refit: then only the test split measures them). A validated final training
    also leaves what `refit_network` repeats: its recipe, the weights it started from and its run."""

    winner: Trial
    variables: dict[str, Any]
    trained_s: float = 0.0
    refit: bool = False
    val_accuracy: float | None = None
    schedule: TrainConfig | None = None
    start: dict[str, Any] | None = None
    validated: TrialResult | None = None

    @classmethod
    def of_trial(cls, trial: Trial, variables: dict[str, Any], trained_s: float | None = None) -> Final:
        """`trial`'s network with `variables` as its search kept them (measured on held-out validation rows)."""
        measured = trial.result.best_metric if trial.result is not None else None
        return cls(trial, variables, trial.seconds if trained_s is None else trained_s, val_accuracy=measured)

    def held_out(self, data: Dataset) -> tuple[np.ndarray, np.ndarray]:
        """The validation rows this network's weights did not train on: all of them, or after a refit
        (`refit_rows`) those it left out."""
        held = refit_rows(data) if self.refit else data
        return held.x_val, held.y_val


def ranked(search: Search) -> list[Trial]:
    """The trained trials, best first (`Search.ranked`); raises when none trained."""
    trained = [t for t in search.trials if t.curve and t.status != "failed"]
    if not trained:
        raise RuntimeError(f"no candidate could be trained ({search.stop_reason}): "
                           + "; ".join(sorted({t.reason for t in search.trials if t.reason})[:3]))
    return search.ranked(trained)


def best_so_far(search: Search) -> Final:
    """The trained trial with the best validation accuracy; the interruption (`Cancelled` or `OutOfTime`) again
    when none finished training."""
    best = search.best_trained()
    if best is None or best.result is None or best.result.variables is None:
        stop = OutOfTime if search.stop_reason == OutOfTime.reason else Cancelled
        raise stop(f"{search.stop_reason} before any candidate finished training")
    return Final.of_trial(best, best.result.variables)


def flips(search: Search, info: space.SpaceInfo, data: Dataset, monitor: Monitor) -> bool:
    """Whether the final training (and compression's retraining) flips images, by the flip test of the best
    network the search trained (`synthesis.augment`; search trials never flip); False for text."""
    best = search.best_trained()
    if info.modality != "image" or best is None or best.result is None or best.result.variables is None:
        return False
    test = flip_test(space.to_spec(best.candidate, info), best.result.variables, best.result.best_metric, data)
    if test is not None:
        monitor.event("augmentation", {"candidate": best.candidate.id, **test.to_dict()})
    return test is not None and test.flip


def train_final(search: Search, info: space.SpaceInfo, data: Dataset, budget: Budget, monitor: Monitor,
                flip: bool = False, snapshots: list[dict[str, Any]] | None = None) -> Final:
    """Train the best-ranked network further with a schedule sized to the time left, run to its end (the best
    weights come as the learning rate decays, which early stopping would cut off). Held-out validation decides
    between the final weights and the search's, and between this network and a trial that validates better; after
    a refit (`refits`) the validation rows trained it, so only a final training that ended below the search's own
    validation accuracy (one that went wrong) gives way. When the final weights are kept, `snapshots` receives
    those a `synthesis.reports.Snapshots` kept (TracIn). The text floor is fitted, not trained: it competes
    afterwards (`synthesis.ensemble`), or ships alone when no network trained. Images are mirrored at random when
    `flip` (`flips`)."""
    refit = refits(info)
    rows = refit_rows(data) if refit else data
    share = 1.0 if refit else FOLDED_SHARE if folds.planned(search, data) else VALIDATED_SHARE  # the rest: a refit
    for winner in (t for t in ranked(search) if not space.is_fitted(t.candidate)):  # the floor needs no training
        end, most = budget.final_end(), 10 * search.config.horizon  # small data: hundreds of epochs fit
        if budget.reproducible:
            epochs, time_limit = min(most, max(int(budget.epochs_left(end) * share), 1)), None
        else:  # as many epochs as fit, so the learning-rate schedule completes before the deadline
            time_limit = max(budget.left(end) * share, 1.0)
            epochs = search.pace.epochs_within(time_limit, winner.macs, len(rows.x_train), most,
                                               measured=winner.result, batch_size=winner.candidate.hparams.batch_size,
                                               margin=FINAL_MARGIN)
        config = replace(winner.candidate.hparams.to_train_config(
            epochs=epochs, seed=search.config.seed + 10_000, patience=None, time_limit_s=time_limit), flip=flip,
            until_deadline=refit and time_limit is not None, keep_last=refit)
        searched = winner.result.variables if winner.result is not None else None
        if winner.result is not None and searched is not None and budget.too_short_for(winner.result.first_epoch_s):
            monitor.event("final", {"candidate": winner.candidate.id, "status": "skipped", "from_search": True,
                                    "reason": f"{budget.left(1.0):.1f} s left; its first epoch took "
                                              f"{winner.result.first_epoch_s:.1f} s"})
            return Final.of_trial(winner, searched)  # a final training could only overrun the budget
        # weights trained on a sample start a text network's final training afresh (new rows); images continue
        start = searched if refit or len(search.data.x_train) == len(data.x_train) else None
        snaps = Snapshots(epochs)
        final = run_trial(space.to_spec(winner.candidate, info), config, rows, lambda _curve: True,
                          on_epoch=lambda _curve: search.tick(), variables=start, check=search.tick, on_weights=snaps)
        budget.spend_epochs(final.epochs)
        monitor.event("final", {"candidate": winner.candidate.id, "status": final.status, "from_search": start
                                is not None, "val_accuracy": final.best_metric, "epochs": final.epochs,
                                "kept_epoch": final.best_epoch,
                                "planned_epochs": epochs, "seconds": round(final.seconds, 1), "refit": refit,
                                "time_limit_s": time_limit and round(time_limit, 1), "train_rows": len(rows.x_train)})
        # the same network before and after its final schedule: accuracy decides (ties: the final weights), as
        # the schedule's end lowers the loss by itself; synthesis.select ranks different networks
        measured = winner.result.best_metric if winner.result is not None else 0.0  # not the extrapolation
        before = winner.seconds if start is not None else 0.0
        if final.variables is not None and (searched is None or final.best_metric >= measured):
            chosen = Final(winner, final.variables, before + final.seconds, refit,
                           None if refit else final.best_metric, config, start, final)
        elif searched is not None:
            chosen = Final.of_trial(winner, searched)
        else:
            continue
        kept = search.best_trained()  # a trial whose extrapolation ranked lower may still validate better
        if not chosen.refit and kept is not None and kept is not winner and kept.result is not None \
                and kept.result.variables is not None \
                and validates_better((kept, kept.result.variables), (winner, chosen.variables), info, data):
            monitor.event("final_fallback", {"candidate": kept.candidate.id, "val_accuracy": kept.result.best_metric,
                                             "instead_of": winner.candidate.id,
                                             "their_val_accuracy": final.best_metric})
            return Final.of_trial(kept, kept.result.variables)
        if chosen.variables is final.variables:
            if not refit:  # a refit's validation accuracy is of rows it trained on
                winner.predicted = max(winner.predicted, final.best_metric)
            if snapshots is not None:
                snapshots.extend(snaps.kept)
        return chosen
    floor = search.floor[0] if search.floor is not None else None
    if floor is not None and floor.result is not None and floor.result.variables is not None:
        return Final.of_trial(floor, floor.result.variables, 0.0)  # no network trained: the linear floor alone
    raise RuntimeError("no candidate could be trained to completion")


def refit_network(final: Final, search: Search, info: space.SpaceInfo, data: Dataset, budget: Budget,
                  monitor: Monitor) -> dict[str, Any] | None:
    """`final`'s network trained again as its validated final training was (the same recipe, schedule, seed and start)
    on the training and validation rows together, up to the epoch whose weights validation kept; sets `final.refit`.
    None (the validated weights ship) when no validated final training kept its weights, or those epochs do not fit
    the final training's time left, or the refit did not reach them."""
    run, schedule = final.validated, final.schedule
    if final.refit or run is None or schedule is None or run.best_epoch < 1:  # only a validated final run is repeated
        return None
    rows, epochs, end = refit_rows(data), run.best_epoch, budget.final_end()
    event: dict[str, Any] = {"model": "network", "candidate": final.winner.candidate.id, "epochs": epochs,
                             "rows": len(rows.x_train)}
    time_limit = None if budget.reproducible else budget.left(end)
    needs = epochs * run.seconds / max(run.epochs, 1) * len(rows.x_train) / max(len(data.x_train), 1)
    if (short := budget.shortfall(epochs, needs, end)) is not None:
        monitor.event("refit", {**event, "status": "skipped", "reason": f"the epochs validation kept: {short}"})
        return None
    config = replace(schedule, time_limit_s=time_limit, keep_last=True, until_deadline=False)
    out, weights = run_until(space.to_spec(final.winner.candidate, info), config, rows, epochs, search.tick,
                             on_epoch=lambda _curve: search.tick(), variables=final.start)
    budget.spend_epochs(out.epochs)
    monitor.event("refit", {**event, "status": out.status if weights is None else "completed",
                            "seconds": round(out.seconds, 1)})
    if weights is None:
        return None
    final.refit, final.val_accuracy = True, None
    final.trained_s = (final.winner.seconds if final.start is not None else 0.0) + out.seconds  # what the weights hold
    return weights


def validates_better(a: tuple[Trial, dict[str, Any]], b: tuple[Trial, dict[str, Any]], info: space.SpaceInfo,
                     data: Dataset) -> bool:
    """Whether network ``a`` (a trial and its weights) beats ``b`` on the validation rows: a higher accuracy
    beyond its noise, or within it a lower loss (:func:`synthesis.select.beats`)."""
    def score(trial: Trial, variables: dict[str, Any]) -> tuple[float, float]:
        m = validation(space.to_spec(trial.candidate, info), variables, data)
        return m["accuracy"], select.excess_loss(m, trial.candidate.hparams.label_smoothing, info.num_classes)

    return select.beats(score(*a), score(*b), len(data.y_val))


def validation(spec: Spec, variables: dict[str, Any], data: Dataset) -> dict[str, float]:
    """The network's accuracy and loss on the validation rows."""
    return evaluate(build(spec), variables, data.x_val, data.y_val)
