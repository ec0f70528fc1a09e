"""A model's explainability report and a user's explanation requests round-trip through a real database."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.explain_runs import Taken, claim
from store.explanations import (
    ExplanationState,
    create_explanation,
    fail_explanation,
    find_explanation,
    finish_explanation,
)
from store.models import ExplanationRequest, ReportImage, SearchResult, TrainedModel
from store.reports import (
    HTML,
    NAME_LENGTH,
    PNG,
    REPORT_HTML,
    find_report,
    image_names,
    report_file,
    report_files,
    save_report,
)
from tests.store.factories import explanation_content, make_model

CONTENT = {"version": 1, "variant": "dense", "classes": ["a", "b"], "suspect_labels": [{"row": 3, "score": 0.5}],
           "images": ["confusion.png", "row3_gradcam.png"]}
IMAGES = {"confusion.png": b"\x89PNG-confusion", "row3_gradcam.png": b"\x89PNG-row3"}
PAGE = "<!doctype html><p>r\u00e9sum\u00e9</p>"


def _model(session: Session) -> TrainedModel:
    return make_model(session, preprocessing={"kind": "text"})


def test_a_saved_report_reads_back_whole(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        save_report(s, model.job_id, model.id, CONTENT, IMAGES, PAGE)
    with factory() as s:
        report = find_report(s, model.id)
        assert report is not None and report.content == CONTENT
        assert image_names(s, report) == sorted(IMAGES)
        confusion = report_file(s, report, "confusion.png")
        assert confusion is not None and (confusion.media_type, confusion.data) == (PNG, IMAGES["confusion.png"])
        page = report_file(s, report, REPORT_HTML)
        assert page is not None and (page.media_type, page.data.decode()) == (HTML, PAGE)
        assert report_file(s, report, "missing.png") is None
        files = report_files(s, model.id)
    assert json.loads(files.pop("report.json")) == CONTENT
    assert files == {**IMAGES, REPORT_HTML: PAGE.encode()}


def test_a_model_without_a_report_has_none(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        s.add(SearchResult(job_id=model.job_id, summary={}, pareto=[]))
    with factory() as s:
        assert find_report(s, model.id) is None
        assert report_files(s, model.id) == {}


@pytest.mark.parametrize(("content", "images", "why"), [
    (CONTENT, {REPORT_HTML: b"x"}, r"report\.html"),
    (CONTENT, {"x" * (NAME_LENGTH + 1) + ".png": b"x"}, "at most 200"),
    ({**CONTENT, "ece": float("nan")}, IMAGES, "strict JSON"),
    ({**CONTENT, "rows": {1, 2}}, IMAGES, "strict JSON"),
])
def test_what_the_database_would_refuse_is_refused_before_anything_is_added(
    factory: sessionmaker[Session], content: dict[str, object], images: dict[str, bytes], why: str,
) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        with pytest.raises(ValueError, match=why):
            save_report(s, model.job_id, model.id, content, images, PAGE)
        assert find_report(s, model.id) is None
    assert ReportImage.__table__.c.name.type.length == NAME_LENGTH  # type: ignore[attr-defined]


def test_an_explained_image_goes_queued_running_done_once(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        asked = create_explanation(s, model, "gradcam", image=b"\x89PNG-input", name="cat.png")
    with session_scope(factory) as s:
        row = find_explanation(s, asked.id, model.id)
        assert row is not None and row.state is ExplanationState.QUEUED
        assert explanation_content(row) == {"state": "queued", "method": "gradcam", "input": "cat.png"}
        assert row.image == b"\x89PNG-input"
        assert find_explanation(s, asked.id, uuid.uuid4()) is None  # another model's id
        assert claim(s, asked.id, "a:1:x", 60, 3) is Taken.CLAIMED
    with session_scope(factory) as s:  # a worker that died left it running: a redelivered task runs it again
        assert claim(s, asked.id, "a:2:y", 60, 3, holder_dead=lambda _worker: True) is Taken.CLAIMED
        assert finish_explanation(s, asked.id, {"label": "cat", "map": [[0.5]]}, b"\x89PNG-overlay")
    with session_scope(factory) as s:
        assert claim(s, asked.id, "a:3:z", 60, 3) is Taken.ANSWERED  # answered: nothing to do
        assert not finish_explanation(s, asked.id, {"label": "dog"}, b"other")
        assert not fail_explanation(s, asked.id, "invalid-input", "late")
    with factory() as s:
        row = s.get_one(ExplanationRequest, asked.id)
        content = explanation_content(row)
        assert content["state"] == "done" and content["attribution"] == {"label": "cat", "map": [[0.5]]}
        assert content["overlay"] == "overlay.png"
        assert row.overlay == b"\x89PNG-overlay"
        assert (row.image, row.overlay) == (b"\x89PNG-input", b"\x89PNG-overlay")  # the upload, and one overlay


def test_a_failed_text_explanation_keeps_its_reason(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        asked = create_explanation(s, model, "occlusion", text="a good film")
    with session_scope(factory) as s:
        assert fail_explanation(s, asked.id, "invalid-input", "no words")
    with factory() as s:
        row = s.get_one(ExplanationRequest, asked.id)
        assert explanation_content(row) == {"state": "failed", "method": "occlusion", "input": "0",
                                            "text": "a good film", "reason": "invalid-input", "error": "no words"}
        assert row.image is None and row.overlay is None
        assert find_report(s, model.id) is None  # an explanation is not the model's report


def test_an_explanation_explains_one_input(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        model = _model(s)
        with pytest.raises(ValueError):
            create_explanation(s, model, "occlusion")
        with pytest.raises(ValueError):
            create_explanation(s, model, "occlusion", text="t", image=b"i")
