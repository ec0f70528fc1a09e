"""Architecture search: regularized evolution whose trials are cut short by asynchronous successive halving.

Each trial trains a candidate for up to `horizon` epochs. At the rungs (1, 3, 9, ... epochs) the trial is scored by
`SearchConfig.rung_rule` (a rule of `synthesis.curves.RULES`, `DEFAULT_RULE` unless set: see
bench/results/estimator.json); a trial whose score is not in the top 1/eta of the scores at that rung stops (Li et
al., ASHA, MLSys 2020), so most candidates never train fully. New candidates are the seeds first, then mutations of
the winner of a tournament among the recent trials (Real et al., "Regularized Evolution for Image Classifier
Architecture Search", AAAI 2019), or random draws. Everything that decides what runs next depends on the seed and
on measured accuracies only.

With a `TrialExecutor` (time budgets only), the search also hands candidates to other devices while it trains
one itself, and merges their results as they arrive (see `synthesis.executor`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict

import numpy as np

from core.analysis import analyse
from core.compilation import metered
from core.data import Dataset
from core.train_config import TrainConfig
from synthesis import select, space
from synthesis.budget import Budget
from synthesis.curves import DEFAULT_RULE, predict_final, rung_score
from synthesis.executor import TrialExecutor, TrialOutcome, TrialRequest, promotes
from synthesis.floor import fit_trial
from synthesis.linear import LinearFit
from synthesis.pace import Pace
from synthesis.progress import Cancelled, Monitor
from synthesis.search_config import SearchConfig, rungs
from synthesis.stopping import AHEAD_AFTER, Run, leader_ahead
from synthesis.trial import Trial, TrialResult, memory_estimate, run_trial

POLL_S = 0.25
"""How often the coordinator looks for finished remote trials while it waits for them."""


class Search:
    """One search over `info`'s space on `data`, spending `budget` up to its search share; with an `executor`
    (used for time budgets only: an epoch budget stays in-process and deterministic) trials also run elsewhere."""

    def __init__(self, info: space.SpaceInfo, data: Dataset, budget: Budget, config: SearchConfig,
                 constraints: space.Constraints, latency: space.LatencyModel, monitor: Monitor,
                 executor: TrialExecutor | None = None) -> None:
        self.info, self.data, self.budget, self.config = info, data, budget, config
        self.constraints, self.latency, self.monitor = constraints, latency, monitor
        # remote trials rank by the default rule: another rule keeps trials in-process, so no rung mixes rules
        self.executor = None if budget.reproducible or config.rung_rule != DEFAULT_RULE else executor
        self.worker = executor.local_worker if executor is not None else "local"
        self.rng = np.random.default_rng(config.seed)
        self.trials: list[Trial] = []
        self.rung_scores: dict[int, list[float]] = {r: [] for r in rungs(config.eta, config.horizon)}
        self.stop_reason = "budget"
        self.pace = Pace()
        self.remote: dict[int, Trial] = {}  # trials running elsewhere, by index
        self.floor: tuple[Trial, LinearFit] | None = None  # the linear floor (text), its weights always kept
        self._proposals = self.proposals()
        self._best, self._since_best, self._rejected = -1.0, 0, 0
        self._done = False  # converged, or no admissible candidate left
        self._last_exchange = -math.inf

    def keep_going(self, curve: list[float]) -> bool:
        """ASHA's rule at a rung: continue while the trial's score (`SearchConfig.rung_rule`) is in the rung's top
        1/eta."""
        if self.budget.epochs_left(self.budget.search_end()) <= 0:
            return False
        scores = self.rung_scores.get(len(curve))
        if scores is None:
            return True
        prediction = rung_score(curve, self.config.horizon, self.config.rung_rule)
        scores.append(prediction)
        return promotes(scores, prediction, self.config.eta)

    def proposals(self) -> Iterator[space.Candidate]:
        """Seeds, then mutations of tournament winners among recent trials, or random draws."""
        yield from space.seeds(self.info)
        while True:
            recent = [t for t in self.trials[-self.config.population:]
                      if t.curve and not space.is_fitted(t.candidate)]  # the floor is not mutated
            if len(recent) < 2 or self.rng.random() < self.config.random_fraction:
                yield space.sample(self.rng, self.info)
                continue
            picks = self.rng.choice(len(recent), size=min(self.config.tournament, len(recent)), replace=False)
            parent = max((recent[int(i)] for i in picks), key=lambda t: t.accuracy)
            yield space.mutate(self.rng, parent.candidate, self.info)

    def _admit(self, trial: Trial) -> bool:
        spec = space.to_spec(trial.candidate, self.info)
        info = analyse(spec)
        trial.params, trial.macs = info.params, info.macs
        trial.latency_ms = self.latency.estimate_ms(spec)
        trial.memory_bytes = memory_estimate(spec, trial.candidate.hparams.batch_size)
        reason = space.check(spec, self.constraints, self.latency)
        if reason is None and self.config.memory_limit is not None and trial.memory_bytes > self.config.memory_limit:
            need, limit = trial.memory_bytes / 2**20, self.config.memory_limit / 2**20
            reason = f"out of memory: needs ~{need:.0f} MiB > {limit:.0f} MiB"
        if reason is not None:
            trial.status = "failed" if reason.startswith("out of memory") else "rejected"
            trial.reason = reason
        return reason is None

    def _next_admitted(self) -> Trial | None:
        """The next admissible proposal, appended to the log (rejected ones are logged on the way); None when
        there is no time for a trial or no admissible candidate."""
        while self._time_for_a_trial() and not self._done:
            trial = Trial(len(self.trials), next(self._proposals), started_at=self.budget.used())
            self.trials.append(trial)
            if self._admit(trial):
                return trial
            self._rejected += 1
            self.monitor.event("candidate", trial.to_dict())
            if self._rejected > 200:
                self.stop_reason, self._done = "no admissible candidate", True
        return None

    def _plan(self, trial: Trial, margin: float = 0.0) -> tuple[int, float | None]:
        """Epochs and time limit of a trial starting now that must end `margin` seconds before the search."""
        end, budget, share = self.budget.search_end(), self.budget, self.config.max_trial_share
        if budget.reproducible:
            cap = max(int((budget.epochs or 0) * end * share), 1)
            return min(self.config.horizon, cap, max(budget.epochs_left(end), 1)), None
        # a quarter of the search (half for the first trial, the likeliest winner, which also measures the
        # pace), but enough for a few epochs once compilation is paid; while no trial has trained, all that is
        # left: cut short on a slow or busy machine (compilation alone can take most of a quarter), the first
        # trial would leave the job nothing better than chance to deliver
        per_epoch = self.pace.epoch_seconds(trial.macs, len(self.data.x_train)) or 0.0
        floor = self.pace.compile_seconds() + 3 * per_epoch
        share = share if self.pace.rates else max(share, 0.5)
        limit = (budget.seconds or 0) * end * share if any(t.curve for t in self.trials) else math.inf
        time_limit = max(min(budget.left(end) - margin, max(limit, floor)), 1.0)
        # before the pace is known, plan at most half the horizon: a schedule cut short by the deadline
        # ends with a high learning rate
        most = self.config.horizon if self.pace.rates else max(self.config.horizon // 2, 1)
        return self.pace.epochs_within(time_limit, trial.macs, len(self.data.x_train), most), time_limit

    def _config(self, trial: Trial, epochs: int, time_limit: float | None) -> TrainConfig:
        return trial.candidate.hparams.to_train_config(epochs=epochs, seed=self.config.seed + trial.index,
                                                       time_limit_s=time_limit, patience=None)

    def _train(self, trial: Trial) -> None:
        trial.worker = self.worker
        if space.is_fitted(trial.candidate):  # the linear floor: fitted to convergence in seconds
            share = (self.budget.seconds or 0.0) * self.budget.search_end() * self.config.max_trial_share
            limit = None if self.budget.reproducible else max(min(share, self.budget.left(self.budget.search_end())), 1)
            with metered() as meter:
                result, floor = fit_trial(self.info, self.data, trial.candidate.hparams.label_smoothing, limit,
                                          self.config.seed)
            result.compile_seconds = meter.seconds
            self.floor = None if floor is None else (trial, floor)
            self._measured(trial, result)
            return
        result = run_trial(space.to_spec(trial.candidate, self.info), self._config(trial, *self._plan(trial)),
                           self.data, self.keep_going, on_epoch=lambda _curve: self._between_epochs(),
                           check=self.tick)
        self._measured(trial, result)

    def _measured(self, trial: Trial, result: TrialResult) -> None:
        """Take in a finished trial's result (in-process or remote)."""
        self.budget.spend_epochs(result.epochs)
        self.pace.record(trial.macs, len(self.data.x_train), trial.candidate.hparams.batch_size, result)
        trial.result, trial.curve, trial.seconds = result, result.curve, result.seconds
        trial.status, trial.reason = result.status, result.reason
        fitted = space.is_fitted(trial.candidate)  # converged: nothing to extrapolate
        trial.predicted = (result.best_metric if fitted else predict_final(result.curve, self.config.horizon)) \
            if result.curve else 0.0

    def _record(self, trial: Trial) -> None:
        """Log a trained trial, keep only the best weights, and note whether the search has converged."""
        self._forget_weights_of_all_but_the_best()
        self.monitor.event("candidate", trial.to_dict())
        if trial.accuracy > self._best + 1e-4:
            self._best, self._since_best = trial.accuracy, 0
        else:
            self._since_best += 1
        spent = self.budget.used() / self.budget.search_end()
        if self._since_best >= self.config.converged_after and spent >= self.config.converged_not_before:
            self.stop_reason, self._done = "converged", True
        networks = [t for t in self.trials if t.curve and t.status != "failed" and not space.is_fitted(t.candidate)]
        lead = None if self._done else leader_ahead([self._run(t) for t in networks], len(self.data.y_val))
        if lead is not None:  # the rest of the search's time goes to the leader's final training
            self.stop_reason, self._done = "leader_ahead", True
            self.monitor.event("leader_ahead", {"candidate": networks[lead].candidate.id, "beaten": [
                t.candidate.id for t in networks[lead + 1:]][-AHEAD_AFTER:]})

    def _run(self, trial: Trial) -> Run:
        """A trained trial as the leader rule compares it: by training seconds under a time budget, else by epochs."""
        result = trial.result
        if self.budget.reproducible or result is None or not trial.curve:
            return Run(trial.curve)
        return Run(trial.curve, max(result.seconds - result.compile_s, 0.0) / len(trial.curve))

    def run(self) -> list[Trial]:
        """Run trials until the search share of the budget is spent, the search converges or the user cancels."""
        try:
            self._loop()
        except Cancelled as stop:
            self.stop_reason = stop.reason
            for t in self.trials:
                if t.status in ("proposed", "remote"):
                    t.status, t.reason = "cancelled", f"the search was interrupted ({stop.reason})"
        finally:
            if self.remote and self.executor is not None:
                self.executor.cancel()
        return self.trials

    def _loop(self) -> None:
        while (trial := self._next_admitted()) is not None:
            self._exchange(force=True)  # other devices get candidates before this one trains here
            self._train(trial)
            self._record(trial)
            self._exchange(force=True)
        self._drain()

    def tick(self) -> None:
        """Tell the monitor the job's progress (its budget spent); it may raise `Cancelled` or `Stopped` here."""
        self.monitor.progress(min(self.budget.used(), 1.0), {})

    def _between_epochs(self) -> None:
        self.tick()
        self._exchange()

    def _exchange(self, force: bool = False) -> None:
        """Merge the remote trials that ended, then give free remote slots new candidates (at most every
        `POLL_S` seconds unless forced)."""
        if self.executor is None or (not force and time.monotonic() - self._last_exchange < POLL_S):
            return
        self._last_exchange = time.monotonic()
        for outcome in self.executor.poll():
            self._merge(outcome)
        while (not self._done and self._time_for_a_remote_trial() and self.executor.free_slots() > 0
               and (trial := self._next_admitted()) is not None):
            self._submit(trial)

    def _submit(self, trial: Trial) -> None:
        assert self.executor is not None
        epochs, time_limit = self._plan(trial, self._margin())
        left = self.budget.left(self.budget.search_end()) - self._margin()
        trial.status = "remote"
        self.remote[trial.index] = trial
        spec = space.to_spec(trial.candidate, self.info)
        self.executor.submit(TrialRequest(
            index=trial.index, candidate=trial.candidate.to_dict(), spec=spec.to_dict(),
            config=asdict(self._config(trial, epochs, time_limit)),
            rung_scores={r: list(s) for r, s in self.rung_scores.items()}, horizon=self.config.horizon,
            eta=self.config.eta, not_after=time.time() + left, train_rows=len(self.data.x_train)))

    def _time_for_a_remote_trial(self) -> bool:
        """Whether a trial sent now could reach its first rung elsewhere before the search ends."""
        return self.budget.left(self.budget.search_end()) - self._margin() > max(self._first_epoch_s(), 1.0) + 1.0

    def _margin(self) -> float:
        """Seconds a remote trial ends before the search does, so its outcome arrives in time."""
        return max(2.0, 0.03 * (self.budget.seconds or 0.0) * self.budget.search_end())

    def _merge(self, outcome: TrialOutcome) -> None:
        trial = self.remote.pop(outcome.index, None)
        if trial is None:  # unknown or already merged: outcomes are idempotent
            return
        for rung, prediction in outcome.rung_predictions.items():
            if rung in self.rung_scores:
                self.rung_scores[rung].append(prediction)
        trial.worker = outcome.worker
        self._measured(trial, outcome.result)
        best = self.best_trained()
        if (outcome.weights is not None and outcome.result.status in ("completed", "deadline")
                and (best is None or best.result is None
                     or select.beats(outcome.result.score, best.result.score, len(self.data.y_val)))):
            outcome.result.variables = outcome.weights()
        self._record(trial)

    def _drain(self) -> None:
        """Wait for the remote trials still running, up to the search's end; the rest are cancelled."""
        while self.remote and self.executor is not None and self.budget.left(self.budget.search_end()) > 0:
            self.tick()
            time.sleep(POLL_S)
            for outcome in self.executor.poll():
                self._merge(outcome)
        if self.remote and self.executor is not None:
            self.executor.cancel()
            for trial in self.remote.values():
                trial.status, trial.reason = "cancelled", "the search ended before the trial reported"
                self.monitor.event("candidate", trial.to_dict())
            self.remote.clear()

    def _time_for_a_trial(self) -> bool:
        """Whether the search share has room for another trial to reach its first rung."""
        end = self.budget.search_end()
        if self.budget.reproducible:
            return self.budget.epochs_left(end) > 0
        return self.budget.left(end) > self._first_epoch_s()

    def _first_epoch_s(self) -> float:
        """The median seconds of the trials' first epochs so far (0 before any)."""
        firsts = [t.result.first_epoch_s for t in self.trials if t.result is not None and t.result.first_epoch_s]
        return float(np.median(firsts)) if firsts else 0.0

    def best_trained(self) -> Trial | None:
        """The trial that validates best (`synthesis.select`: accuracy, within its noise the loss) among those
        whose weights are kept (None: no such trial)."""
        kept = [t for t in self.trials if t.result is not None and t.result.variables is not None]
        ranked = select.rank(kept, lambda t: t.result.score if t.result else (0.0, None), len(self.data.y_val))
        return ranked[0] if ranked else None

    def ranked(self, trials: list[Trial]) -> list[Trial]:
        """`trials` best first by `Trial.score` (`synthesis.select`; an accuracy may be extrapolated from a
        partial curve): the order final training takes candidates in."""
        return select.rank(trials, lambda t: t.score, len(self.data.y_val))

    def _forget_weights_of_all_but_the_best(self) -> None:
        """Drop the weights of all trials but the best-validated (:meth:`best_trained`, the fallback) and the
        first by :meth:`ranked` (final training's start and comparison), which may differ: MNIST's hand CNN,
        98.55 % measured and 99.13 % extrapolated, tied a two-epoch ResNet (98.57 %) with a higher loss."""
        kept = [t for t in self.trials if t.result is not None and t.result.variables is not None]
        keep = [self.best_trained(), *self.ranked(kept)[:1], *(self.floor[:1] if self.floor else ())]
        for t in self.trials:
            if t.result is not None and not any(t is k for k in keep):
                t.result.variables = None
