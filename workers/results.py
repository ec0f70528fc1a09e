"""What a finished synthesis leaves in the database: the models (dense and, when compression delivered one,
compressed) with their explainability reports, every candidate of the search, and the search's result (its summary
and the Pareto front)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from store.jobs import append_event
from store.models import Candidate, CandidateStatus, Job, Report, SearchResult, TrainedModel
from store.reports import save_report
from synthesis.deliver import Delivered
from synthesis.explain import Report as ExplainReport
from synthesis.interface import Synthesis
from workers.data import Prepared

STATUS = {"completed": CandidateStatus.TRAINED, "deadline": CandidateStatus.TRAINED,
          "stopped": CandidateStatus.DISCARDED, "failed": CandidateStatus.FAILED, "rejected": CandidateStatus.FAILED}
"""Search-log status → candidate row status."""


def candidate_row(job_id: uuid.UUID, entry: dict[str, Any]) -> Candidate:
    """A search-log entry as a candidate row: genome as spec, learning curve, accuracies and loss as metrics."""
    genome = {k: entry[k] for k in ("id", "origin", "arch", "hparams")}
    metrics = {k: entry[k] for k in ("curve", "predicted", "accuracy", "epochs")}
    metrics["loss"] = entry.get("loss")  # the excess validation loss of a fully trained one (synthesis.select)
    cost = {k: entry[k] for k in ("seconds", "params", "macs", "memory_bytes", "latency_ms", "reason", "index")}
    cost["worker"] = entry.get("worker", "")  # which worker process trained it
    cost["started_at"] = entry.get("started_at")  # the fraction of the budget spent when it started
    cost["compile_seconds"] = entry.get("compile_seconds")  # seconds compiling its programs (None: an older log)
    return Candidate(job_id=job_id, genome=genome, metrics=metrics, cost=cost,
                     status=STATUS.get(entry["status"], CandidateStatus.FAILED))


def _model(job_id: uuid.UUID, candidate_id: uuid.UUID | None, variant: str, delivered: Delivered,
           prepared: Prepared) -> TrainedModel:
    return TrainedModel(job_id=job_id, candidate_id=candidate_id, variant=variant, spec=delivered.spec,
                        weights=delivered.weights, onnx=delivered.onnx, classes=prepared.classes,
                        preprocessing=prepared.preprocessing, metrics=delivered.metrics,
                        param_count=delivered.param_count, weights_bytes=len(delivered.weights),
                        architecture=delivered.architecture)


def _save_report(session: Session, job_id: uuid.UUID, model: TrainedModel, report: ExplainReport) -> None:
    """Add `model`'s report; one the database would refuse is left out (the model ships without it) with a
    warning in the job's log."""
    try:
        save_report(session, job_id, model.id, report.content, report.images, report.html)
    except ValueError as exc:
        append_event(session, session.get_one(Job, job_id), "warning", {
            "message": f"the {model.variant} model's explainability report cannot be stored ({exc}); the model ships "
                       "without it"})


def save(session: Session, job_id: uuid.UUID, result: Synthesis, prepared: Prepared) -> uuid.UUID:
    """Store the synthesis of `job_id` (replacing any partial one of an earlier attempt): the dense model, the
    compressed one when there is one (weights: the compressed artifact), each with its explainability report when
    it was delivered one, candidates and the search's result; return the dense model's id."""
    existing = session.scalars(select(TrainedModel.id).where(TrainedModel.job_id == job_id,
                                                             TrainedModel.variant == "dense")).first()
    if existing is not None:  # a model is saved with the job's success: this attempt is a duplicate
        return existing
    session.execute(delete(Report).where(Report.job_id == job_id))
    session.execute(delete(SearchResult).where(SearchResult.job_id == job_id))
    session.execute(delete(Candidate).where(Candidate.job_id == job_id))
    rows = [candidate_row(job_id, entry) for entry in result.log]
    session.add_all(rows)
    session.flush()
    delivered = result.model
    winner = next((r.id for r in rows if r.genome["id"] == delivered.metrics.get("candidate")), None)
    saved = [(_model(job_id, winner, "dense", delivered, prepared), delivered)]
    if result.compressed is not None:
        small = result.compressed.model
        saved.append((_model(job_id, winner, "compressed", small, prepared), small))
    session.add_all([row for row, _ in saved])
    session.flush()
    for row, variant in saved:  # in the models' transaction: a job's reports are there whole or not at all
        if variant.report is not None:
            _save_report(session, job_id, row, variant.report)
    model = saved[0][0]
    session.add(SearchResult(job_id=job_id, pareto=result.pareto, summary={
        "stop_reason": result.stop_reason, "split": result.split, "seconds": round(result.seconds, 3),
        "trials": len(result.log), "compile_seconds": round(result.compile_seconds, 3)}))
    return model.id
