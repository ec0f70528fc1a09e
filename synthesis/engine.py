"""Synthesis end to end: split the data, search architectures, train the winner, deliver it with its Pareto front.

`synthesize` is the one engine behind the workers and the command line.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from core.compilation import metered
from core.data import Dataset
from synthesis import ensemble, select, space
from synthesis.budget import Budget, Schedule, StageClock
from synthesis.calibrate import calibrate
from synthesis.deliver import deliver, measured_latency_ms
from synthesis.final import Final, best_so_far, flips, ranked, refit_network, train_final, validation
from synthesis.fine import fine_synthesis
from synthesis.floor import out_of_fold
from synthesis.folds import train_folds
from synthesis.interface import Options, Synthesis, Task
from synthesis.normalise import channel_normalisation
from synthesis.pareto import delivered_front
from synthesis.progress import INTERRUPTED, Cancelled, Monitor, NullMonitor, Shielded
from synthesis.reports import explain_variants, report_data
from synthesis.reserve import after_training
from synthesis.search import Search
from synthesis.search_config import SearchConfig
from synthesis.split import Split, stratified_split, training_sample


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


def reserve_after_training(search: Search, budget: Budget, split: Split, options: Options, monitor: Monitor) -> None:
    """Keep what the stages after final training need, estimated from the leading network's measured pace, out of
    a time budget's final training (`synthesis.reserve`); an event says how much and where final training ends."""
    if budget.reproducible:
        return
    leader = next((t for t in ranked(search) if not space.is_fitted(t.candidate) and t.result is not None), None)
    if leader is None or leader.result is None:  # (the second test narrows the type)
        return
    budget.reserve = after_training(leader.result, leader.candidate.hparams.batch_size,
                                    (len(split.train), len(split.val), len(split.test)), budget, options.compress,
                                    options.explain)
    seconds = budget.seconds or 0.0
    monitor.event("reserve", {**asdict(budget.reserve), "final_end_s": round(budget.final_end() * seconds, 1),
                              "fine_end_s": round(budget.fine_end() * seconds, 1)})


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
               monitor: Monitor | None = None) -> Synthesis:
    """Search, train and deliver the best network for `task` within `budget`, honouring the constraints; the
    seconds this process spent compiling are in the model's metrics (`compile_seconds`, with the programs compiled
    and the persistent cache's hits and misses) and the result's."""
    with metered() as meter:
        result = _synthesize(task, budget, options, monitor)
    result.model.metrics.update(meter.to_dict())
    return replace(result, compile_seconds=meter.seconds)


def _synthesize(task: Task, budget: Budget, options: Options | None, monitor: Monitor | None) -> Synthesis:
    options, monitor = options or Options(), monitor or NullMonitor()
    split, x, data = split_task(task, options.seed, options.test_fraction)
    searched = search_data(data, options.seed)
    if budget.schedule is None:
        budget.schedule = Schedule.for_task(task.modality, len(data.x_train), len(searched.x_train),
                                             timed=not budget.reproducible)
    info = space_info(task, split.train)
    sizes = {"train": len(split.train), "val": len(split.val), "test": len(split.test), "seed": split.seed}
    monitor.event("split", {**sizes, "search_train": len(searched.x_train)})
    monitor.stage("search")
    clock = StageClock(budget)
    config = SearchConfig(horizon=horizon_for(len(searched.x_train)), memory_limit=options.memory_limit,
                          seed=options.seed)
    latency = options.latency or calibrate_latency(info, x[split.train[:1]])
    search = Search(info, searched, budget, config, options.constraints, latency, monitor, options.executor)
    trials = search.run()
    clock.lap("search")
    compressed, flip, snapshots, trained, compared = None, False, list[dict[str, Any]](), "", False
    if search.stop_reason in INTERRUPTED:  # anytime: deliver the best model trained so far, quietly
        final = best_so_far(search)
        delivered, monitor = final.variables, NullMonitor()
    else:
        try:
            monitor.event("search_done", {"trials": len(trials), "reason": search.stop_reason})
            reserve_after_training(search, budget, split, options, monitor)
            monitor.stage("final_training")
            flip = flips(search, info, data, monitor)
            final = train_final(search, info, data, budget, monitor, flip, snapshots)
            trained, validated = final.winner.candidate.id, final
            folded = train_folds(final, search, info, data, budget, monitor, options.seed)
            winner, variables, delivered = ensemble.finish(
                trials, search.floor, final.winner, final.variables, info, data, monitor, options.seed,
                functools.partial(refit_network, validated, search, info, data, budget, monitor), folded)
            compared = search.floor is not None and ensemble.compares(search.floor, data)  # calibrated out of fold
            if winner is not final.winner:  # the floor alone (fitted, not trained), or an ensemble with the network
                alone = winner is (search.floor[0] if search.floor is not None else None)
                bagged = folded is not None and folded.shipped  # the folds' networks: every labelled row trained them
                trained_s = 0.0 if alone else folded.seconds if folded is not None and bagged else validated.trained_s
                final = Final.of_trial(winner, variables, trained_s)
                final.refit = alone or bagged or validated.refit  # the floor ships refitted; the network retrained
                final.val_accuracy = None if final.refit else final.val_accuracy  # the search log keeps its scores
        except Cancelled as stop:
            search.stop_reason = stop.reason
            final = best_so_far(search)
            delivered, monitor = final.variables, NullMonitor()
    clock.lap("final_training")
    winner, variables = final.winner, final.variables
    spec = space.to_spec(winner.candidate, info)
    if not compared:
        delivered = calibrate(spec, delivered, *final.held_out(data), monitor)
    if search.stop_reason not in INTERRUPTED and options.compress:
        base = replace(winner.candidate.hparams.to_train_config(epochs=1, seed=options.seed + 20_000,
                                                                time_limit_s=None, patience=None), flip=flip)
        fine = fine_synthesis(spec, delivered, data, (x[split.test], task.y[split.test]), budget, base,
                              options.tolerance, options.seed, monitor)
        compressed = fine.variant
        if fine.interrupted:  # the compressed network accepted before the interruption still ships
            search.stop_reason, monitor = fine.interrupted, NullMonitor()
    clock.lap("compression")
    monitor = shielded = Shielded(monitor)  # an interruption from here on: what was trained is delivered
    monitor.stage("delivering")
    probe = x[split.test[:64]] if len(split.test) else x[split.val[:64]]
    model = deliver(spec, delivered, x[split.test], task.y[split.test], probe)
    searched_accuracy = winner.result.best_metric if winner.result is not None else winner.accuracy
    model.metrics.update({"val_accuracy": final.val_accuracy, "search_val_accuracy": searched_accuracy,
                          "refit": final.refit, "candidate": winner.candidate.id, "trials": len(trials),
                          "search_stop": search.stop_reason})
    warning = select.chance_level_warning(validation(spec, variables, data)["accuracy"], data.y_val)
    if warning is not None:
        model.metrics["warning"] = warning
        monitor.event("warning", {"message": warning})
    if compressed is not None:
        compressed.model.metrics["candidate"] = winner.candidate.id
    clock.lap("delivery")
    if (options.explain and len(split.test) and search.stop_reason not in INTERRUPTED  # a report is of test rows
            and shielded.interrupted is None):
        monitor.stage("explaining")
        rows = report_data(task.classes or [str(c) for c in range(task.num_classes)], x, task.y, split, task.rows,
                           task.texts, out_of_fold(search.floor[1] if search.floor is not None else None, split))
        model, compressed = explain_variants(model, delivered, compressed, rows, task.codec, budget, shielded,
                                             snapshots if trained == winner.candidate.id else [])
    clock.lap("explanation")
    model.metrics["time_spent"] = clock.spent(final.trained_s)
    monitor.event("time_spent", model.metrics["time_spent"])
    monitor.progress(1.0, {"val_accuracy": searched_accuracy if final.val_accuracy is None else final.val_accuracy})
    if shielded.interrupted is not None and search.stop_reason not in INTERRUPTED:
        search.stop_reason = model.metrics["search_stop"] = shielded.interrupted
    front = delivered_front(trials, winner, model, compressed)
    return Synthesis(model=model, log=[t.to_dict() for t in trials], pareto=front, stop_reason=search.stop_reason,
                     split=sizes, seconds=budget.elapsed(), compressed=compressed)
