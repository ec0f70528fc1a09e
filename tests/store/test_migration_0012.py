"""Migration 0012 meters explanation requests: existing rows get the bytes they hold (their owner's storage quota
counts them from then on), no device-seconds and no attempt; undoing it keeps every row."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from store.db import make_engine, make_session_factory
from store.explanations import answer_bytes, input_bytes
from store.migrate import downgrade, upgrade
from store.models import ExplanationRequest, ExplanationState
from tests.store.test_migration_0009 import AT, _old_model

ATTRIBUTION = {"label": "café", "map": [[0.25, -1.0]]}
explanations = sa.table(
    "explanation_requests", sa.column("id", sa.Uuid()), sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("job_id", sa.Uuid()), sa.column("model_id", sa.Uuid()), sa.column("state", sa.String()),
    sa.column("method", sa.String()), sa.column("input", sa.String()), sa.column("text", sa.Text()),
    sa.column("image", sa.LargeBinary()), sa.column("attribution", sa.JSON()), sa.column("overlay", sa.LargeBinary()))


def test_existing_requests_are_counted_by_the_bytes_they_hold(empty_db_url: str) -> None:
    upgrade(empty_db_url, "0011")
    engine = make_engine(empty_db_url)
    try:
        model_id, job_id = _old_model(engine)
        image, text, running = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        with engine.begin() as conn:
            conn.execute(explanations.insert(), [
                {"id": image, "created_at": AT, "job_id": job_id, "model_id": model_id, "state": "done",
                 "method": "gradcam", "input": "cat.png", "text": None, "image": b"\x89PNG-input",
                 "attribution": ATTRIBUTION, "overlay": b"\x89PNG-overlay"},
                {"id": text, "created_at": AT, "job_id": job_id, "model_id": model_id, "state": "queued",
                 "method": "occlusion", "input": "0", "text": "un très bon film", "image": None,
                 "attribution": None, "overlay": None},
                {"id": running, "created_at": AT, "job_id": job_id, "model_id": model_id, "state": "running",
                 "method": "occlusion", "input": "0", "text": "x", "image": None, "attribution": None,
                 "overlay": None}])
        upgrade(empty_db_url)
        with make_session_factory(engine)() as s:
            rows = {row.id: row for row in s.query(ExplanationRequest)}
        assert rows[image].size_bytes == len(b"\x89PNG-input") + answer_bytes(ATTRIBUTION, b"\x89PNG-overlay")
        assert rows[text].size_bytes == input_bytes(text="un très bon film") == 17  # UTF-8: è is two bytes
        assert (rows[running].state, rows[running].attempts, rows[running].device_seconds) == (
            ExplanationState.RUNNING, 0, 0.0)
        assert rows[running].beat_at is None and rows[running].erased_at is None
        downgrade(empty_db_url, "0011")
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM explanation_requests")).scalar_one() == 3
        assert "size_bytes" not in {c["name"] for c in sa.inspect(engine).get_columns("explanation_requests")}
        upgrade(empty_db_url)
    finally:
        engine.dispose()
