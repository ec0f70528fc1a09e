"""The explainability report (issue 26): what it holds, that its parts are whole or listed as omitted, and that a
job's report is absent when the job is interrupted while it is built."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_digits

from core import checkpoint
from core.spec import Spec
from domain.ingest.text import TextEncoder
from synthesis.budget import Budget
from synthesis.deliver import Delivered
from synthesis.explain import ReportData, Subject, build_report
from synthesis.explain.render import page
from synthesis.explain.report import OutOfReportTime
from synthesis.progress import Cancelled, Shielded
from synthesis.reports import explained
from tests.synthesis.explain_sets import bag_model, keyword_texts, object_cnn, trained


@pytest.fixture(scope="module")
def digits() -> tuple[Subject, ReportData]:
    d = load_digits()
    x, y = (d.images[..., None] * 16).astype(np.float32), d.target.astype(np.int32)
    spec = object_cnn(classes=10, size=8)
    subject = Subject.of(spec, trained(spec, x[:1500], y[:1500], epochs=6))
    rows = np.arange(len(y))[::-1].copy()  # as if the upload had listed the rows the other way round
    return subject, ReportData([f"digit {c}" for c in range(10)], x, y, np.arange(1500, 1797), np.arange(1500), rows)


def test_an_image_report_holds_every_part(digits: tuple[Subject, ReportData]) -> None:
    subject, data = digits
    report = build_report(subject, data)
    c = report.content
    assert c["omitted"] == [] and c["modality"] == "image" and c["variant"] == "dense"
    g = c["global"]
    assert np.asarray(g["confusion_matrix"]).sum() == g["test_rows"] == 297
    assert 0 <= g["calibration"]["ece"] <= 1 and len(g["per_class"]) == 10
    assert set(c["methods"]) == {"gradcam", "integrated-gradients", "smoothgrad"} == set(c["faithfulness"])
    assert c["methods"]["integrated-gradients"]["completeness_error_max"] < 0.05
    for example in c["examples"]:
        assert example["row"] == data.row(int(np.where(data.rows == example["row"])[0][0]))
        assert set(example["images"]) == set(c["methods"])
        assert all(f in report.images for f in example["images"].values())
    suspects = c["suspect_labels"]
    assert c["suspects"]["rows_checked"] == 1500 and c["suspects"]["found"] == len(suspects)
    for s in suspects:  # `row` is the uploaded row: its given label is that row's, and another is suggested
        assert s["given"] == f"digit {data.y[int(np.where(data.rows == s['row'])[0][0])]}" != s["suggested"]
    assert c["faithfulness"]["integrated-gradients"]["better_than_random"]
    assert {"insertion_auc", "random_insertion_auc"} <= set(c["faithfulness"]["gradcam"])
    assert {len(e["helped"]) for e in c["influence"]["examples"]} == {5}
    files = report.files()
    assert json.loads(files["report.json"]) == c and "confusion.png" in files and "reliability.png" in files
    assert "data:image/png;base64," in report.html and "http" not in report.html  # opens offline


def test_suspect_labels_come_from_out_of_fold_probabilities_where_there_are_some(
        digits: tuple[Subject, ReportData]) -> None:
    """Given out-of-fold probabilities of the training rows, a row whose label has under the threshold of them while
    another leads is listed with its uploaded position, and the rows outside them are not checked."""
    subject, data = digits
    train = np.arange(100)
    proba = np.eye(10)[data.y[train]] * 0.9 + 0.01
    proba[7] = 0.01
    proba[7, (data.y[7] + 3) % 10] = 0.91
    proba[8, data.y[8]], proba[8, (data.y[8] + 1) % 10] = 0.09, 0.82  # under the threshold: listed
    proba[9, data.y[9]], proba[9, (data.y[9] + 1) % 10] = 0.11, 0.80  # over it: not listed
    c = build_report(subject, replace(data, held_out=(train, proba))).content
    assert c["suspects"]["rows_checked"] == 100 and "linear floor" in c["suspects"]["method"]
    assert [(s["row"], s["given"], s["suggested"]) for s in c["suspect_labels"]] == [
        (data.row(7), f"digit {data.y[7]}", f"digit {(data.y[7] + 3) % 10}"),
        (data.row(8), f"digit {data.y[8]}", f"digit {(data.y[8] + 1) % 10}")]


def test_every_suspect_found_is_listed_not_only_the_first_thousand(digits: tuple[Subject, ReportData]) -> None:
    """A set with many wrong labels (here every training row's contradicted) lists each one: the report's list is
    what a user corrects the data from, so the count found and the count listed agree."""
    subject, data = digits
    train = np.arange(1500)
    proba = np.full((1500, 10), 0.01)
    proba[train, (data.y[train] + 1) % 10] = 0.91
    c = build_report(subject, replace(data, held_out=(train, proba))).content
    assert c["suspects"]["found"] == len(c["suspect_labels"]) == 1500
    assert len({s["row"] for s in c["suspect_labels"]}) == 1500


def test_the_report_page_says_when_a_method_failed_its_check(digits: tuple[Subject, ReportData]) -> None:
    subject, data = digits
    report = build_report(subject, data)
    content = json.loads(json.dumps(report.content))
    assert "not better than random" not in page(content, report.images)
    content["faithfulness"]["gradcam"]["better_than_random"] = False
    html = page(content, report.images)
    assert html.count("not better than random order on this model") == 1
    assert html.count("gradcam (failed its check)") == len(content["examples"])


def _calls_until_out_of_time(n: int) -> Any:
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] > n:
            raise OutOfReportTime("test")
    return check


def test_a_report_whose_time_runs_out_keeps_whole_parts_and_lists_the_rest(digits: tuple[Subject, ReportData]
                                                                          ) -> None:
    subject, data = digits
    report = build_report(subject, data, check=_calls_until_out_of_time(3))  # before the global part, inside it
    c = report.content
    assert c["omitted"][0].startswith("suspect_labels") or c["omitted"][0].startswith("attributions")
    assert "global" not in c["omitted"] and c["global"]["test_rows"] == 297
    assert "influence" in c["omitted"] and c["influence"]["examples"] == []
    omitted_methods = {o.split(":")[1] for o in c["omitted"] if o.startswith("attributions:")}
    assert not omitted_methods & set(c["methods"])  # a method is in whole or not at all
    assert all(set(e.get("images", {})) == set(c["methods"]) for e in c["examples"])
    for calls in (0, 1, 2):  # out of time before or while the global figures are made: no report
        with pytest.raises(OutOfReportTime):
            build_report(subject, data, check=_calls_until_out_of_time(calls))


def test_a_text_report_scores_each_word() -> None:
    texts, y, _ = keyword_texts(400, seed=1)
    encoder = TextEncoder.fit(texts[:300])
    rows = encoder.encode(texts)
    spec = bag_model(encoder.layout(), rows.shape[1], 2)
    subject = Subject.of(spec, trained(spec, rows[:300], y[:300], epochs=8, learning_rate=1e-2), encoder)
    data = ReportData(["good", "bad"], rows, y, np.arange(300, 400), np.arange(300), texts=texts)
    c = build_report(subject, data).content
    assert c["omitted"] == [] and set(c["methods"]) == {"integrated-gradients", "occlusion"}
    assert c["methods"]["integrated-gradients"]["completeness_error_max"] < 0.05
    for example in c["examples"]:
        assert example["tokens"] == texts[example["row"]].split()
        assert {len(s) for s in example["scores"].values()} == {len(example["tokens"])}


class _CancelOnProgress:
    def __init__(self) -> None:
        self.events: list[tuple[str, Mapping[str, Any]]] = []

    def stage(self, name: str) -> None:
        pass

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        raise Cancelled()

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        self.events.append((kind, payload))


def _delivered(subject: Subject) -> Delivered:
    spec: Spec = object_cnn(classes=10, size=8)
    return Delivered(spec.to_dict(), checkpoint.to_bytes(spec, subject.variables), b"", 0)


def test_a_job_interrupted_while_its_report_is_built_ships_without_one(digits: tuple[Subject, ReportData]) -> None:
    subject, data = digits
    inner = _CancelOnProgress()
    model = explained(_delivered(subject), "dense", subject.variables, data, None, Budget(epochs=1), Shielded(inner))
    assert model.report is None
    assert inner.events == [("report", {"variant": "dense", "built": False, "reason": "the job was cancelled"})]


def test_a_report_with_no_time_left_is_absent_and_says_why(digits: tuple[Subject, ReportData]) -> None:
    subject, data = digits
    now = [0.0]
    budget = Budget(seconds=10, clock=lambda: now[0])
    now[0] = 10.0
    inner = _CancelOnProgress()
    inner.progress = lambda fraction, metrics: None  # type: ignore[method-assign]
    model = explained(_delivered(subject), "dense", subject.variables, data, None, budget, Shielded(inner))
    assert model.report is None and inner.events[0][1]["built"] is False and "ran out" in inner.events[0][1]["reason"]


def test_a_report_given_another_reports_suspects_lists_them_as_they_are(digits: tuple[Subject, ReportData]) -> None:
    subject, data = digits
    found = {"suspect_labels": [{"row": 3, "given": "digit 1", "suggested": "digit 7", "given_share": 0.0,
                                 "suggested_share": 1.0}],
             "suspects": {"method": "m", "threshold": 0.1, "found": 1, "rows_checked": 1500}}
    c = build_report(subject, data, "compressed", found=found).content
    assert c["suspect_labels"] == found["suspect_labels"] and c["suspects"] == found["suspects"]
