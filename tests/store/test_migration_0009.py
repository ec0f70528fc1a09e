"""Migration 0009 moves explanation requests and a job's search result out of `reports` and renames
`trial_tasks.report` to `outcome`, keeping every row; undoing it puts them back as they were."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.db import make_engine, make_session_factory
from store.migrate import downgrade, upgrade
from store.models import ExplanationRequest, ExplanationState, SearchResult, TrialTask
from store.reports import find_report, report_files
from tests.store.factories import explanation_content

AT = datetime(2026, 12, 6, 9, 30, 15, 123456, tzinfo=UTC)
REPORT = {"version": 1, "variant": "dense", "images": ["confusion.png"]}
IMAGE_ASKED = {"state": "done", "method": "gradcam", "input": "cat.png",
               "attribution": {"label": "cat", "map": [[1.0]]}, "overlay": "overlay.png"}
TEXT_ASKED = {"state": "failed", "method": "occlusion", "input": "0", "text": "a good film", "reason": "invalid-input",
              "error": "no words"}
PARETO = {"points": [{"candidate": "c0", "accuracy": 0.5, "params": 2, "delivered": True}]}
SEARCH = {"stop_reason": "budget", "split": {"train": 8, "val": 2, "test": 1}, "seconds": 1.5, "trials": 3,
          "compile_seconds": 0.25}
OUTCOME = {"index": 0, "worker": "w1", "status": "completed", "curve": [0.5], "rung_predictions": {}}

reports = sa.table("reports", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                   sa.column("job_id", sa.Uuid()), sa.column("model_id", sa.Uuid()), sa.column("kind", sa.String()),
                   sa.column("content", sa.JSON()))
images = sa.table("report_images", sa.column("report_id", sa.Uuid()), sa.column("name", sa.String()),
                  sa.column("media_type", sa.String()), sa.column("data", sa.LargeBinary()))
trials = sa.table("trial_tasks", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                  sa.column("job_id", sa.Uuid()), sa.column("attempt", sa.Integer()),
                  sa.column("trial_index", sa.Integer()), sa.column("request", sa.JSON()),
                  sa.column("state", sa.String()), sa.column("report", sa.JSON()))
IDS = {kind: uuid.uuid4() for kind in ("explainability", "image", "text", "pareto", "search", "trial")}
FILES = [("explainability", "confusion.png", "image/png", b"\x89PNG-confusion"),
         ("explainability", "report.html", "text/html", b"<p>report</p>"),
         ("image", "input", "application/octet-stream", b"\x89PNG-input"),
         ("image", "overlay.png", "image/png", b"\x89PNG-overlay")]


users = sa.table("users", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                 sa.column("email", sa.String()), sa.column("display_name", sa.String()))
datasets = sa.table("datasets", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("owner_id", sa.Uuid()), sa.column("name", sa.String()),
                    sa.column("modality", sa.String()),
                    sa.column("classes", sa.JSON()), sa.column("class_counts", sa.JSON()),
                    sa.column("sample_count", sa.Integer()), sa.column("size_bytes", sa.BigInteger()),
                    sa.column("profile", sa.JSON()), sa.column("checksum", sa.String()),
                    sa.column("blob_key", sa.String()), sa.column("status", sa.String()))
jobs = sa.table("jobs", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                sa.column("owner_id", sa.Uuid()), sa.column("dataset_id", sa.Uuid()),
                sa.column("budget_tier", sa.String()),
                sa.column("budget_seconds", sa.Integer()), sa.column("constraints", sa.JSON()),
                sa.column("state", sa.String()), sa.column("progress", sa.Float()),
                sa.column("device_seconds", sa.Float()))
models = sa.table("models", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
                  sa.column("job_id", sa.Uuid()), sa.column("spec", sa.JSON()), sa.column("weights", sa.LargeBinary()),
                  sa.column("metrics", sa.JSON()), sa.column("param_count", sa.BigInteger()),
                  sa.column("weights_bytes", sa.BigInteger()), sa.column("preprocessing", sa.JSON()))


def _old_model(engine: sa.Engine) -> tuple[uuid.UUID, uuid.UUID]:
    """A user, a dataset, a job and its model as revision 0008 stored them (through tables of that revision's
    columns: the models' tables have columns added since); the model's and the job's ids."""
    user_id, dataset_id, job_id, model_id = (uuid.uuid4() for _ in range(4))
    with engine.begin() as conn:
        conn.execute(users.insert().values(id=user_id, created_at=AT, email="ada@example.org", display_name="Ada"))
        conn.execute(datasets.insert().values(
            id=dataset_id, created_at=AT, owner_id=user_id, name="digits", modality="image", classes=["0", "1"],
            class_counts={"0": 10, "1": 12}, sample_count=22, size_bytes=1234, profile={}, checksum="ab" * 32,
            blob_key="ds/digits", status="ready"))
        conn.execute(jobs.insert().values(
            id=job_id, created_at=AT, owner_id=user_id, dataset_id=dataset_id, budget_tier="low", budget_seconds=600,
            constraints={}, state="succeeded", progress=1.0, device_seconds=12.5))
        conn.execute(models.insert().values(
            id=model_id, created_at=AT, job_id=job_id, spec={}, weights=b"w", metrics={}, param_count=1,
            weights_bytes=1, preprocessing={"kind": "image"}))
    return model_id, job_id


def _old_rows(engine: sa.Engine) -> tuple[uuid.UUID, uuid.UUID]:
    """A model with an explainability report, an answered image request, a failed text request, the job's Pareto
    front and search summary, and a trial's report, as revision 0008 stored them; the model's and the job's ids."""
    model_id, job_id = _old_model(engine)
    rows = [("explainability", REPORT), ("image", IMAGE_ASKED), ("text", TEXT_ASKED), ("pareto", PARETO),
            ("search", SEARCH)]
    with engine.begin() as conn:
        conn.execute(reports.insert(), [
            {"id": IDS[name], "created_at": AT, "job_id": job_id, "model_id": model_id, "content": content,
             "kind": name if name in ("explainability", "pareto", "search") else "explanation"}
            for name, content in rows])
        conn.execute(images.insert(), [{"report_id": IDS[owner], "name": name, "media_type": media_type, "data": data}
                                       for owner, name, media_type, data in FILES])
        conn.execute(trials.insert().values(id=IDS["trial"], created_at=AT, job_id=job_id, attempt=1, trial_index=0,
                                            request={"index": 0}, state="done", report=OUTCOME))
    return model_id, job_id


def _check_moved(session: Session, model_id: uuid.UUID, job_id: uuid.UUID) -> None:
    report = find_report(session, model_id)
    assert report is not None and report.id == IDS["explainability"] and report.content == REPORT
    files = report_files(session, model_id)
    assert json.loads(files.pop("report.json")) == REPORT
    assert files == {name: data for owner, name, _, data in FILES if owner == "explainability"}
    image_asked = session.get_one(ExplanationRequest, IDS["image"])
    text_asked = session.get_one(ExplanationRequest, IDS["text"])
    assert (explanation_content(image_asked), explanation_content(text_asked)) == (IMAGE_ASKED, TEXT_ASKED)
    assert (image_asked.image, image_asked.overlay) == (b"\x89PNG-input", b"\x89PNG-overlay")
    assert (text_asked.image, text_asked.overlay) == (None, None)
    assert image_asked.state is ExplanationState.DONE and text_asked.state is ExplanationState.FAILED
    for asked in (image_asked, text_asked):
        assert (asked.created_at, asked.job_id, asked.model_id) == (AT, job_id, model_id)
    result = session.scalars(sa.select(SearchResult)).one()
    assert (result.job_id, result.summary, result.pareto, result.created_at) == (job_id, SEARCH, PARETO["points"], AT)
    assert session.get_one(TrialTask, IDS["trial"]).outcome == OUTCOME


def _old_state(engine: sa.Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], Any]:
    """The `reports` rows as (kind, content, model id, id of an explanation request), every report image with its
    report's id, and the trial's report, as revision 0008 reads them."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(reports.c.kind, reports.c.content, reports.c.model_id, reports.c.id)).all()
        files = conn.execute(sa.select(images.c.report_id, images.c.name, images.c.media_type, images.c.data)
                             .order_by(images.c.name)).all()
        outcome = conn.execute(sa.select(trials.c.report)).scalar_one()
    kept = sorted((kind, json.dumps(content, sort_keys=True), model_id, found if kind == "explanation" else None)
                  for kind, content, model_id, found in rows)
    return kept, [tuple(f) for f in files], outcome


def test_explanation_requests_and_search_results_move_out_of_reports_and_back(empty_db_url: str) -> None:
    upgrade(empty_db_url, "0008")
    engine = make_engine(empty_db_url)
    try:
        model_id, job_id = _old_rows(engine)
        before = _old_state(engine)
        upgrade(empty_db_url)
        with make_session_factory(engine)() as session:
            _check_moved(session, model_id, job_id)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(reports)).scalar_one() == 1
            assert conn.execute(sa.select(sa.func.count()).select_from(images)).scalar_one() == 2
        downgrade(empty_db_url, "0008")
        assert not {"explanation_requests", "search_results"} & set(sa.inspect(engine).get_table_names())
        assert _old_state(engine) == before
    finally:
        engine.dispose()


def test_a_report_of_a_kind_netsynth_never_wrote_stops_the_migration_before_it_changes_anything(
    empty_db_url: str,
) -> None:
    upgrade(empty_db_url, "0008")
    engine = make_engine(empty_db_url)
    try:
        model_id, job_id = _old_rows(engine)
        with engine.begin() as conn:
            conn.execute(reports.insert().values(id=uuid.uuid4(), created_at=AT, job_id=job_id, model_id=model_id,
                                                 kind="evaluation", content={}))
        with pytest.raises(RuntimeError, match="evaluation"):
            upgrade(empty_db_url)
        assert not {"explanation_requests", "search_results"} & set(sa.inspect(engine).get_table_names())
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(reports)).scalar_one() == 6
    finally:
        engine.dispose()
