"""A finished synthesis's models are saved with their explainability reports in one transaction: a job's reports are
there whole or not at all."""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.models import CandidateStatus, Job, JobEvent, Report, ReportImage, TrainedModel
from store.reports import find_report, report_files, save_report
from synthesis.deliver import Delivered
from synthesis.explain import Report as ExplainReport
from synthesis.fine import CompressedVariant
from synthesis.interface import Synthesis, Task
from tests.store.conftest import empty_db_url, engine, factory
from tests.store.factories import committed_job
from workers import results
from workers.data import Prepared

__all__ = ["empty_db_url", "engine", "factory"]  # the store's database fixtures: SQLite and PostgreSQL

PREPARED = Prepared(Task("image", np.zeros((4, 2, 2, 1), np.uint8), np.array([0, 1, 0, 1]), 2),
                    {"kind": "image", "shape": [2, 2, 1]}, ["a", "b"])


def _report(variant: str) -> ExplainReport:
    return ExplainReport({"version": 1, "variant": variant, "images": ["confusion.png"], "suspect_labels": []},
                         {"confusion.png": f"\x89PNG {variant}".encode()}, f"<p>{variant}</p>")


def _synthesis(dense: ExplainReport | None, small: ExplainReport | None) -> Synthesis:
    model = Delivered(spec={"name": "net"}, weights=b"weights", onnx=b"onnx", param_count=3, metrics={}, report=dense)
    compressed = CompressedVariant(replace(model, weights=b"nsz", report=small), {}, "completed")
    return Synthesis(model=model, log=[], pareto=[], stop_reason="completed", split={}, seconds=1.0,
                     compressed=compressed)


def _reports(factory: sessionmaker[Session], job: Job) -> dict[str, dict[str, bytes]]:
    """Each saved model's report files, by the model's variant."""
    with factory() as s:
        models = s.scalars(select(TrainedModel).where(TrainedModel.job_id == job.id)).all()
        return {m.variant: report_files(s, m.id) for m in models}


def test_each_variant_is_saved_with_its_report(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    with session_scope(factory) as s:
        results.save(s, job.id, _synthesis(_report("dense"), _report("compressed")), PREPARED)
    saved = _reports(factory, job)
    assert set(saved) == {"dense", "compressed"}
    for variant, files in saved.items():
        assert files["confusion.png"] == f"\x89PNG {variant}".encode()
        assert files["report.html"] == f"<p>{variant}</p>".encode()
        assert b'"variant": "' + variant.encode() in files["report.json"]


def test_a_variant_delivered_without_a_report_is_saved_without_one(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    with session_scope(factory) as s:
        results.save(s, job.id, _synthesis(_report("dense"), None), PREPARED)
    assert {variant: bool(files) for variant, files in _reports(factory, job).items()} == {
        "dense": True, "compressed": False}


def test_a_failure_while_saving_leaves_neither_models_nor_reports(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = committed_job(factory)
    calls = []

    def second_fails(*args: object) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        save_report(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("workers.results.save_report", second_fails)
    with pytest.raises(RuntimeError), session_scope(factory) as s:
        results.save(s, job.id, _synthesis(_report("dense"), _report("compressed")), PREPARED)
    assert len(calls) == 2
    with factory() as s:
        assert s.scalars(select(TrainedModel)).all() == []
        assert s.scalars(select(Report)).all() == [] and s.scalars(select(ReportImage)).all() == []


def test_a_report_the_database_would_refuse_is_left_out_with_a_warning(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    broken = replace(_report("compressed"), content={"ece": float("nan")})
    with session_scope(factory) as s:
        results.save(s, job.id, _synthesis(_report("dense"), broken), PREPARED)
    with factory() as s:
        models = {m.variant: m.id for m in s.scalars(select(TrainedModel))}
        assert find_report(s, models["dense"]) is not None and find_report(s, models["compressed"]) is None
        [warning] = s.scalars(select(JobEvent.payload).where(JobEvent.kind == "warning")).all()
    assert "compressed model's explainability report cannot be stored" in warning["message"]


def test_each_variant_is_saved_with_its_architecture(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    layers = [{"name": "logits", "op": "dense", "output_shape": [2], "params": 10, "inputs": ["input"]}]
    synthesis = _synthesis(None, None)
    assert synthesis.compressed is not None
    small = replace(synthesis.compressed.model, architecture={"input_shape": [2, 2, 1], "layers": layers[:0]})
    synthesis = replace(synthesis, model=replace(synthesis.model, architecture={"input_shape": [2, 2, 1],
                                                                                "layers": layers}),
                        compressed=replace(synthesis.compressed, model=small))
    with session_scope(factory) as s:
        results.save(s, job.id, synthesis, PREPARED)
    with factory() as s:
        saved = {m.variant: m.architecture for m in s.scalars(select(TrainedModel))}
    assert saved == {"dense": {"input_shape": [2, 2, 1], "layers": layers},
                     "compressed": {"input_shape": [2, 2, 1], "layers": []}}


def test_a_candidate_row_keeps_when_the_trial_started() -> None:
    entry = {"id": "ab12", "origin": "seed:hand-cnn", "arch": {}, "hparams": {}, "curve": [0.5, 0.7],
             "predicted": 0.8, "accuracy": 0.7, "epochs": 2, "loss": None, "seconds": 3.5, "params": 100, "macs": 900,
             "memory_bytes": 4096, "latency_ms": 0.1, "reason": "", "index": 4, "status": "completed",
             "started_at": 0.3125}
    row = results.candidate_row(uuid.uuid4(), entry)
    assert row.cost["started_at"] == 0.3125 and row.cost["index"] == 4  # the dashboard's best-so-far-over-time
    assert row.metrics["curve"] == [0.5, 0.7] and row.status is CandidateStatus.TRAINED
    assert row.cost["compile_seconds"] is None  # a log from before compile seconds were measured
    assert results.candidate_row(uuid.uuid4(), {**entry, "compile_seconds": 1.25}).cost["compile_seconds"] == 1.25
