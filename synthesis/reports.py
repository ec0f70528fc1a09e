"""The explainability reports of a synthesis's delivered variants, built in the budget's last share.

A report holds whole parts only (`synthesis.explain.build_report`): when its time is up while a part is being built,
that part and the later ones are listed as omitted; without its global figures a variant ships with no report. An
event says which. With a compressed variant, each report gets half of the time left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from core import artifact
from core.spec import Spec
from synthesis.budget import Budget
from synthesis.deliver import Delivered
from synthesis.explain import ReportData, Subject, TextCodec, build_report
from synthesis.explain.report import OutOfReportTime
from synthesis.fine import CompressedVariant
from synthesis.progress import Shielded
from synthesis.split import Split


def report_data(classes: Sequence[str], x: np.ndarray, y: np.ndarray, split: Split, rows: np.ndarray | None,
                texts: Sequence[str] | None, held_out: tuple[np.ndarray, np.ndarray] | None = None) -> ReportData:
    """What a report covers: every row (network inputs), its labels and upload position, the splits, the texts, and
    the out-of-fold probabilities of the rows a model was cross-validated on."""
    return ReportData(classes=list(classes), x=x, y=y, test=split.test, train=split.train, rows=rows, texts=texts,
                      held_out=held_out)


SUSPECTS_TIME = 0.5
"""Of a report's time, what the suspect labels may take before they judge no more training rows than the neighbours'
reference (`synthesis.explain.build_report`): on a large set one forward pass over every training row can take the
whole report's time, and the attributions come after."""


class _Interrupted(Exception):
    """The caller interrupted the job while a report was being built: the report is dropped."""


def _deadline(budget: Budget, share: float, monitor: Shielded) -> Callable[[], None]:
    """A check that reports progress and raises OutOfReportTime once `share` of the budget's time left now has
    passed, or _Interrupted once the caller has interrupted the job."""
    end = budget.elapsed() + share * budget.left(1.0)

    def check() -> None:
        monitor.progress(min(budget.used(), 1.0), {})
        if monitor.interrupted is not None:
            raise _Interrupted(monitor.interrupted)
        if budget.left(1.0) <= 0 or budget.elapsed() >= end:
            raise OutOfReportTime(f"its time ran out {budget.elapsed():.0f} s into the budget")
    return check


def explained(model: Delivered, variant: str, weights: dict[str, Any], data: ReportData, codec: TextCodec | None,
              budget: Budget, monitor: Shielded, checkpoints: Sequence[dict[str, Any]] = (), share: float = 1.0,
              judge: Subject | None = None, found: dict[str, Any] | None = None) -> Delivered:
    """`model` with its report, built in `share` of the budget's time left (an event says what it holds, or why
    there is none: its time ran out before its global figures, or the caller interrupted the job); `judge` decides
    the suspect labels, or `found` gives them (`build_report`)."""
    started = time.perf_counter()
    check = _deadline(budget, share, monitor)
    until = started + SUSPECTS_TIME * share * budget.left(1.0)  # inf for an epoch budget
    try:
        check()
        subject = Subject.of(Spec.from_dict(model.spec), weights, codec)
        report = build_report(subject, data, variant, checkpoints, check, judge, found, until)
    except OutOfReportTime as exc:
        monitor.event("report", {"variant": variant, "built": False, "reason": str(exc)})
        return model
    except _Interrupted as exc:
        monitor.event("report", {"variant": variant, "built": False, "reason": f"the job was {exc}"})
        return model
    seconds = time.perf_counter() - started
    monitor.event("report", {"variant": variant, "built": True, "seconds": round(seconds, 2),
                             "images": len(report.images), "suspect_labels": report.content.get("suspect_count", 0),
                             "omitted": report.content["omitted"]})
    return replace(model, report=report)


def explain_variants(model: Delivered, variables: dict[str, Any], compressed: CompressedVariant | None,
                     data: ReportData, codec: TextCodec | None, budget: Budget, monitor: Shielded,
                     snapshots: Sequence[dict[str, Any]] = ()) -> tuple[Delivered, CompressedVariant | None]:
    """The delivered variants with their reports, the dense one (traced over `snapshots` too) first. Both list the
    suspect labels the dense network's features at its first snapshot find, found once, for the dense report: the
    labels are the data's, not a variant's, and fine-tuned weights have memorised more of them."""
    judge = Subject.of(Spec.from_dict(model.spec), snapshots[0] if snapshots else variables, codec)
    model = explained(model, "dense", variables, data, codec, budget, monitor, snapshots,
                      share=1.0 if compressed is None else 0.5, judge=judge)
    if compressed is not None:
        found = ({k: model.report.content[k] for k in ("suspect_labels", "suspects")}
                 if model.report is not None and "suspects" in model.report.content else None)
        small = explained(compressed.model, "compressed", artifact.decode(compressed.model.weights).variables, data,
                          codec, budget, monitor, judge=judge, found=found)
        compressed = replace(compressed, model=small)
    return model, compressed


class Snapshots:
    """An `on_weights` hook of a training of `epochs` epochs that keeps (on the host) the weights of
    :func:`snapshot_epochs`."""

    def __init__(self, epochs: int) -> None:
        self.keep, self.kept = snapshot_epochs(epochs), list[dict[str, Any]]()

    def __call__(self, epoch: int, weights: dict[str, Any]) -> None:
        """Keep `weights` when `epoch` is one to keep."""
        if epoch in self.keep:
            self.kept.append(jax.device_get(weights))


def snapshot_epochs(epochs: int) -> set[int]:
    """The epochs of a final training of `epochs` whose weights TracIn traces besides the delivered ones: a third and
    two thirds of the way (none for a run of under 3 epochs)."""
    return {round(epochs * k / 3) for k in (1, 2)} - {0, epochs} if epochs >= 3 else set()
