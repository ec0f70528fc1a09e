"""Trials that run elsewhere: the interface a search uses to train candidates on other devices at the same time.

The search's coordinator proposes candidates and hands some to a `TrialExecutor` (the workers implement it with
Celery sub-tasks) while it trains one itself. A remote trial gets a snapshot of the successive-halving rung
scores and applies ASHA's rule with it plus its own predictions; the coordinator merges the predictions it
made when the trial ends. Stale rung scores are what makes ASHA asynchronous and are acceptable: a rung's
top 1/eta only needs to be approximately right to promote good trials (Li et al., "A System for Massively
Parallel Hyperparameter Tuning", MLSys 2020, section 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from core.data import Dataset
from core.spec import Spec
from core.train_config import TrainConfig
from synthesis.curves import rung_score
from synthesis.trial import TrialResult, run_trial

_RESULT_FIELDS = ("curve", "status", "reason", "seconds", "epochs", "best_metric", "best_loss", "first_epoch_s",
                  "step_s", "compile_s", "compile_seconds", "eval_s")


def promotes(scores: list[float], prediction: float, eta: int) -> bool:
    """ASHA's rule at a rung whose predictions so far are `scores` (this one included): go on while the
    prediction is in the top 1/eta, or while the rung has seen fewer than eta trials."""
    if len(scores) < eta:
        return True
    return prediction >= float(np.quantile(scores, 1 - 1 / eta))


@dataclass(frozen=True)
class TrialRequest:
    """One candidate to train elsewhere: everything the remote side needs, as JSON-ready values."""

    index: int  # the trial's row in the search log
    candidate: dict[str, Any]  # `space.Candidate.to_dict()`
    spec: dict[str, Any]  # `core.spec.Spec.to_dict()`
    config: dict[str, Any]  # `core.train_config.TrainConfig` fields; time_limit_s is the planned limit
    rung_scores: dict[int, list[float]]  # the coordinator's ASHA rung scores when it sent the trial
    horizon: int
    eta: int
    not_after: float  # wall-clock time (`time.time()`) by which the trial must have ended
    train_rows: int  # rows of the training split, so the remote side can check it trains on the same data

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON (rung keys become strings)."""
        doc = asdict(self)
        doc["rung_scores"] = {str(r): list(s) for r, s in self.rung_scores.items()}
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TrialRequest:
        """The request `to_dict` wrote."""
        rungs = {int(r): [float(v) for v in s] for r, s in doc["rung_scores"].items()}
        return cls(**{**doc, "rung_scores": rungs})


@dataclass
class TrialOutcome:
    """A remote trial that ended: what it measured, the predictions it added to the rungs, where it ran, and a
    way to load its trained weights (None when it kept none)."""

    index: int
    result: TrialResult
    worker: str = ""
    rung_predictions: dict[int, float] = field(default_factory=dict)
    weights: Callable[[], dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON, without weights."""
        return {"index": self.index, "worker": self.worker, **{k: getattr(self.result, k) for k in _RESULT_FIELDS},
                "rung_predictions": {str(r): p for r, p in self.rung_predictions.items()}}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], weights: Callable[[], dict[str, Any]] | None = None) -> TrialOutcome:
        """The outcome `to_dict` wrote, with an optional weights loader."""
        result = TrialResult(**{k: doc[k] for k in _RESULT_FIELDS if k in doc})  # optional: best_loss, compile_seconds
        rungs = {int(r): float(p) for r, p in doc.get("rung_predictions", {}).items()}
        return cls(int(doc["index"]), result, str(doc.get("worker", "")), rungs, weights)


class TrialExecutor(Protocol):
    """Runs search trials on other devices. The search calls it from one thread only."""

    @property
    def local_worker(self) -> str:
        """The name of the coordinator's own worker (recorded on the trials it trains itself)."""
        ...

    def free_slots(self) -> int:
        """How many more trials could start elsewhere now (0: train in-process only)."""
        ...

    def submit(self, request: TrialRequest) -> None:
        """Start `request` elsewhere; its outcome comes back through `poll`."""
        ...

    def poll(self) -> list[TrialOutcome]:
        """Trials that ended since the last poll, each returned once; a trial that could not run (no worker
        took it in time, its worker died) comes back as failed with the reason."""
        ...

    def cancel(self) -> None:
        """Give up every trial not back yet (the search is over); none of them comes back afterwards."""
        ...


def run_request(request: TrialRequest, data: Dataset, worker: str,
                still_wanted: Callable[[], bool] = lambda: True, now: Callable[[], float] = time.time) -> TrialOutcome:
    """Train `request` on `data` (the remote side of a trial), applying ASHA with its rung snapshot; the trial
    stops at `not_after` or when `still_wanted()` turns False. The result keeps its weights when it completed."""
    scores = {r: list(s) for r, s in request.rung_scores.items()}
    added: dict[int, float] = {}
    outcome = TrialOutcome(request.index, TrialResult(), worker, added)
    if len(data.x_train) != request.train_rows:
        outcome.result.status = "failed"
        outcome.result.reason = f"the worker's training split has {len(data.x_train)} rows, not {request.train_rows}"
        return outcome
    left = request.not_after - now()
    if left < 1.0:
        outcome.result.status, outcome.result.reason = "failed", "the trial started after the search's end"
        return outcome

    def keep_going(curve: list[float]) -> bool:
        if not still_wanted():
            return False
        rung = scores.get(len(curve))
        if rung is None:
            return True
        prediction = rung_score(curve, request.horizon)  # the default rule, as the coordinator's own trials
        rung.append(prediction)
        added[len(curve)] = prediction
        return promotes(rung, prediction, request.eta)

    planned = request.config.get("time_limit_s")
    config = TrainConfig(**{**request.config, "time_limit_s": min(planned, left) if planned else left})
    outcome.result = run_trial(Spec.from_dict(request.spec), config, data, keep_going)
    return outcome
