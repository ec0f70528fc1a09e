"""Synthesis end to end: split the data, search architectures, train the winner, deliver it with its Pareto front.

`synthesize` is the one engine behind the workers and the command line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from core.compilation import metered
from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from core.spec import Spec
from synthesis import ensemble, select, space
from synthesis.augment import flip_test
from synthesis.budget import Budget, Schedule
from synthesis.deliver import deliver, measured_latency_ms
from synthesis.fine import fine_synthesis
from synthesis.interface import Options, Synthesis, Task
from synthesis.normalise import channel_normalisation
from synthesis.pace import FINAL_MARGIN
from synthesis.pareto import delivered_front
from synthesis.progress import INTERRUPTED, Cancelled, NullReporter, OutOfTime, Reporter, Shielded
from synthesis.reports import Snapshots, explain_variants, report_data
from synthesis.search import Search
from synthesis.search_config import SearchConfig
from synthesis.split import Split, stratified_split, training_sample
from synthesis.trial import Trial, run_trial


def horizon_for(train_rows: int) -> int:
    """Epochs a search trial may train: more for small datasets, whose epochs are cheap."""
    return 24 if train_rows <= 5_000 else 12 if train_rows <= 30_000 else 8


def space_info(task: Task, train: np.ndarray) -> space.SpaceInfo:
    """The space's view of `task`; images are normalised in the network per channel by the training split's
    mean and std."""
    if task.modality == "text":
        return space.SpaceInfo("text", (int(task.x.shape[1]),), task.num_classes, vocab_size=task.vocab_size,
                               bag_start=task.bag_start, bag_vocab=task.bag_vocab, bag_words=task.bag_words)
    scale, offset = channel_normalisation(task.x, train)
    return space.SpaceInfo("image", tuple(int(d) for d in task.x.shape[1:]), task.num_classes,
                           scale=scale, offset=offset)


def calibrate_latency(info: space.SpaceInfo, example: np.ndarray) -> space.LatencyModel:
    """A latency model fitted to this machine: the seeds' measured ONNX latencies against their multiply-adds."""
    specs = [space.to_spec(c, info) for c in space.seeds(info)]
    return space.LatencyModel.calibrate([(spec, measured_latency_ms(spec, example)) for spec in specs])


def split_task(task: Task, seed: int, test_fraction: float) -> tuple[Split, np.ndarray, Dataset]:
    """The split a synthesis of `task` uses, the inputs as the networks take them (images as float32) and the
    training / validation arrays — the same for the engine and for trials run on other workers."""
    split = stratified_split(task.y, seed, test_fraction=test_fraction, groups=task.groups)
    x = task.x if task.modality == "text" else task.x.astype(np.float32)
    return split, x, Dataset(x[split.train], task.y[split.train], x[split.val], task.y[split.val])


SEARCH_ROWS = 10_000
"""The most training rows a search trial trains on. Larger datasets are searched on a stratified sample of
them, which ranks configurations much as the full data does at a fraction of the cost (Klein et al., "Fast
Bayesian Optimization of Machine Learning Hyperparameters on Large Datasets", AISTATS 2017, use subsets as
their cheap fidelity); the final training takes all of them."""


def search_data(data: Dataset, seed: int) -> Dataset:
    """The rows search trials train on: `data`, or a stratified sample of `SEARCH_ROWS` of its training rows
    (the validation rows stay whole) — the same for the engine and for trials run on other workers."""
    return training_sample(data, SEARCH_ROWS, seed)


def synthesize(task: Task, budget: Budget, options: Options | None = None,
               reporter: Reporter | None = None) -> Synthesis:
    """Search, train and deliver the best network for `task` within `budget`, honouring the constraints; the
    seconds this process spent compiling are in the model's metrics (`compile_seconds`, with the programs compiled
    and the persistent cache's hits and misses) and the result's."""
    with metered() as meter:
        result = _synthesize(task, budget, options, reporter)
    result.model.metrics.update(meter.to_dict())
    return replace(result, compile_seconds=meter.seconds)


def _synthesize(task: Task, budget: Budget, options: Options | None, reporter: Reporter | None) -> Synthesis:
    options, reporter = options or Options(), reporter or NullReporter()
    split, x, data = split_task(task, options.seed, options.test_fraction)
    searched = search_data(data, options.seed)
    if budget.schedule is None:
        budget.schedule = Schedule.for_rows(len(data.x_train), len(searched.x_train))
    info = space_info(task, split.train)
    sizes = {"train": len(split.train), "val": len(split.val), "test": len(split.test), "seed": split.seed}
    reporter.event("split", {**sizes, "search_train": len(searched.x_train)})
    reporter.stage("search")
    config = SearchConfig(horizon=horizon_for(len(searched.x_train)), memory_limit=options.memory_limit,
                          seed=options.seed)
    latency = options.latency or calibrate_latency(info, x[split.train[:1]])
    search = Search(info, searched, budget, config, options.constraints, latency, reporter, options.executor)
    trials = search.run()
    compressed, flip, snapshots, trained = None, False, list[dict[str, Any]](), ""
    if search.stop_reason in INTERRUPTED:  # anytime: deliver the best model trained so far, quietly
        winner, variables = _best_so_far(search)
        delivered, reporter = variables, NullReporter()
    else:
        try:
            reporter.event("search_done", {"trials": len(trials), "reason": search.stop_reason})
            reporter.stage("final_training")
            flip = _flips(search, info, data, reporter)
            winner, variables = _final(search, info, data, budget, reporter, flip, snapshots)
            trained = winner.candidate.id
            winner, variables, delivered = ensemble.finish(trials, search.floor, winner, variables, info, data,
                                                           reporter)
        except Cancelled as stop:
            search.stop_reason = stop.reason
            winner, variables = _best_so_far(search)
            delivered, reporter = variables, NullReporter()
    spec = space.to_spec(winner.candidate, info)
    if search.stop_reason not in INTERRUPTED and options.compress:
        base = replace(winner.candidate.hparams.to_train_config(epochs=1, seed=options.seed + 20_000,
                                                                time_limit_s=None, patience=None), flip=flip)
        fine = fine_synthesis(spec, variables, data, (x[split.test], task.y[split.test]), budget, base,
                              options.tolerance, options.seed, reporter)
        compressed = fine.variant
        if fine.interrupted:  # the compressed network accepted before the interruption still ships
            search.stop_reason, reporter = fine.interrupted, NullReporter()
    reporter = shielded = Shielded(reporter)  # an interruption from here on: what was trained is delivered
    reporter.stage("delivering")
    probe = x[split.test[:64]] if len(split.test) else x[split.val[:64]]
    model = deliver(spec, delivered, x[split.test], task.y[split.test], probe)
    model.metrics.update({"val_accuracy": winner.accuracy, "candidate": winner.candidate.id,
                          "trials": len(trials), "search_stop": search.stop_reason})
    warning = select.chance_level_warning(_validation(spec, variables, data)["accuracy"], data.y_val)
    if warning is not None:
        model.metrics["warning"] = warning
        reporter.event("warning", {"message": warning})
    if compressed is not None:
        compressed.model.metrics["candidate"] = winner.candidate.id
    if (options.explain and len(split.test) and search.stop_reason not in INTERRUPTED  # a report is of test rows
            and shielded.interrupted is None):
        reporter.stage("explaining")
        rows = report_data(task.classes or [str(c) for c in range(task.num_classes)], x, task.y, split, task.rows,
                           task.texts)
        model, compressed = explain_variants(model, delivered, compressed, rows, task.codec, budget, shielded,
                                             snapshots if trained == winner.candidate.id else [])
    reporter.progress(1.0, {"val_accuracy": winner.accuracy})
    if shielded.interrupted is not None and search.stop_reason not in INTERRUPTED:
        search.stop_reason = model.metrics["search_stop"] = shielded.interrupted
    front = delivered_front(trials, winner, model, compressed)
    return Synthesis(model=model, log=[t.to_dict() for t in trials], pareto=front, stop_reason=search.stop_reason,
                     split=sizes, seconds=budget.elapsed(), compressed=compressed)


def _ranked(search: Search) -> list[Trial]:
    trained = [t for t in search.trials if t.curve and t.status != "failed"]
    if not trained:
        raise RuntimeError(f"no candidate could be trained ({search.stop_reason}): "
                           + "; ".join(sorted({t.reason for t in search.trials if t.reason})[:3]))
    return search.ranked(trained)


def _best_so_far(search: Search) -> tuple[Trial, dict[str, Any]]:
    """The trained trial with the best validation accuracy; the interruption (`Cancelled` or `OutOfTime`) again
    when none finished training."""
    best = search.best_trained()
    if best is None or best.result is None or best.result.variables is None:
        stop = OutOfTime if search.stop_reason == OutOfTime.reason else Cancelled
        raise stop(f"{search.stop_reason} before any candidate finished training")
    return best, best.result.variables


def _flips(search: Search, info: space.SpaceInfo, data: Dataset, reporter: Reporter) -> bool:
    """Whether the final training (and compression's retraining) flips images, by the flip test of the best
    network the search trained (`synthesis.augment`; search trials never flip); False for text."""
    best = search.best_trained()
    if info.modality != "image" or best is None or best.result is None or best.result.variables is None:
        return False
    test = flip_test(space.to_spec(best.candidate, info), best.result.variables, best.result.best_metric, data)
    if test is not None:
        reporter.event("augmentation", {"candidate": best.candidate.id, **test.to_dict()})
    return test is not None and test.flip


def _final(search: Search, info: space.SpaceInfo, data: Dataset, budget: Budget,
           reporter: Reporter, flip: bool = False, snapshots: list[dict[str, Any]] | None = None
           ) -> tuple[Trial, dict[str, Any]]:
    """Train the best-ranked network further — from its search weights when it has them and the search saw every
    training row, else from scratch — with a schedule sized to the time left, run to its end (the best weights
    come as the learning rate decays, which early stopping would cut off); keep whichever weights validate better.
    When the final weights are kept, `snapshots` receives those a `synthesis.reports.Snapshots` kept (TracIn).
    The text floor is fitted, not trained: it competes afterwards (`synthesis.ensemble`), or ships alone when no
    network trained. Images are mirrored at random when `flip` (`_flips`).

    Weights trained on a sample and then on all rows generalise worse than fresh ones trained on all rows (Ash
    and Adams, "On Warm-Starting Neural Network Training", NeurIPS 2020). MNIST at split seed 0, one run each:
    from the search's 10,000-row weights 0.45 % test error (99.50 % validation), from scratch 0.40 % (99.57 %).
    """
    ranked = _ranked(search)
    for winner in (t for t in ranked if not space.is_fitted(t.candidate)):  # the floor needs no training
        end, most = budget.final_end(), 10 * search.config.horizon  # small data: hundreds of epochs fit
        if budget.reproducible:
            epochs, time_limit = min(most, max(budget.epochs_left(end), 1)), None
        else:  # as many epochs as fit, so the learning-rate schedule completes before the deadline
            time_limit = max(budget.left(end), 1.0)
            epochs = search.pace.epochs_within(time_limit, winner.macs, len(data.x_train), most,
                                               measured=winner.result, batch_size=winner.candidate.hparams.batch_size,
                                               margin=FINAL_MARGIN)
        config = replace(winner.candidate.hparams.to_train_config(
            epochs=epochs, seed=search.config.seed + 10_000, patience=None, time_limit_s=time_limit), flip=flip)
        searched = winner.result.variables if winner.result is not None else None
        if winner.result is not None and searched is not None and budget.too_short_for(winner.result.first_epoch_s):
            reporter.event("final", {"candidate": winner.candidate.id, "status": "skipped", "from_search": True,
                                     "reason": f"{budget.left(1.0):.1f} s left; its first epoch took "
                                               f"{winner.result.first_epoch_s:.1f} s"})
            return winner, searched  # a final training could only overrun the budget (a restart's small remainder)
        start = searched if len(search.data.x_train) == len(data.x_train) else None  # a sample: start afresh
        snaps = Snapshots(epochs)
        final = run_trial(space.to_spec(winner.candidate, info), config, data, lambda _curve: True,
                          on_epoch=lambda _curve: search.tick(), variables=start, check=search.tick, on_weights=snaps)
        budget.spend_epochs(final.epochs)
        reporter.event("final", {"candidate": winner.candidate.id, "status": final.status, "from_search": start
                                 is not None, "val_accuracy": final.best_metric, "epochs": final.epochs,
                                 "planned_epochs": epochs, "seconds": round(final.seconds, 1),
                                 "time_limit_s": time_limit and round(time_limit, 1), "train_rows": len(data.x_train)})
        # the same network before and after its final schedule: accuracy decides (ties: the final weights), as
        # the schedule's end lowers the loss by itself; synthesis.select ranks different networks
        measured = winner.result.best_metric if winner.result is not None else 0.0  # not the extrapolation
        if final.variables is not None and (searched is None or final.best_metric >= measured):
            chosen, metric = final.variables, final.best_metric
        elif searched is not None:
            chosen, metric = searched, measured
        else:
            continue
        kept = search.best_trained()  # a trial whose extrapolation ranked lower may still validate better
        if kept is not None and kept is not winner and kept.result is not None and kept.result.variables is not None \
                and _validates_better((kept, kept.result.variables), (winner, chosen), info, data):
            reporter.event("final_fallback", {"candidate": kept.candidate.id, "val_accuracy": kept.result.best_metric,
                                              "instead_of": winner.candidate.id, "their_val_accuracy": metric})
            return kept, kept.result.variables
        if chosen is final.variables:
            winner.predicted = max(winner.predicted, final.best_metric)
            if snapshots is not None:
                snapshots.extend(snaps.kept)
        return winner, chosen
    floor = search.floor[0] if search.floor is not None else None
    if floor is not None and floor.result is not None and floor.result.variables is not None:
        return floor, floor.result.variables  # no network trained: the linear floor alone
    raise RuntimeError("no candidate could be trained to completion")


def _validates_better(a: tuple[Trial, dict[str, Any]], b: tuple[Trial, dict[str, Any]], info: space.SpaceInfo,
                      data: Dataset) -> bool:
    """Whether network ``a`` (a trial and its weights) beats ``b`` on the validation rows: a higher accuracy
    beyond its noise, or within it a lower loss (:func:`synthesis.select.beats`)."""
    def score(trial: Trial, variables: dict[str, Any]) -> tuple[float, float]:
        m = _validation(space.to_spec(trial.candidate, info), variables, data)
        return m["accuracy"], select.excess_loss(m, trial.candidate.hparams.label_smoothing, info.num_classes)

    return select.beats(score(*a), score(*b), len(data.y_val))


def _validation(spec: Spec, variables: dict[str, Any], data: Dataset) -> dict[str, float]:
    """The network's accuracy and loss on the validation rows."""
    return evaluate(build(spec), variables, data.x_val, data.y_val)
