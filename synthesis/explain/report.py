"""The explainability report every delivered model ships with: global figures, the training rows whose label looks
wrong, attributions of sampled test predictions with the checks they pass or fail, and training-data influence.

`build_report` is pure given its inputs; `check` is called between its parts and may raise to stop it (a report
is then absent, never half-built). The JSON is `report.json`; images are PNG files named in it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from synthesis.explain import checks, integrated, render, suspects, tracin
from synthesis.explain.base import METHODS
from synthesis.explain.subject import Subject, output_layers, spatial_layers
from synthesis.explain.summary import global_figures

VERSION = 1
PER_CLASS = 2
"""Correct and wrong test predictions explained per class (each at most), up to EXAMPLES in all."""
EXAMPLES = 24
INFLUENCE_EXAMPLES, INFLUENCE_ROWS = 6, 5
"""Test predictions traced to their training rows, and the rows listed per direction (helped, hurt)."""
SUSPECTS_LISTED = 20_000
"""Suspect labels listed at most (`suspects.found` says how many were found): every one a set with a twentieth of
its labels wrong has, up to 400,000 training rows, while report.json stays a few MB."""
IMAGE_METHODS, TEXT_METHODS = ("gradcam", "integrated-gradients", "smoothgrad"), ("integrated-gradients",
                                                                                  "occlusion")


@dataclass(frozen=True)
class ReportData:
    """The rows a report is about: every uploaded row as the network takes it, their labels and positions in the
    upload, the test and training splits (indices into `x`), and for a text model the raw texts."""

    classes: Sequence[str]
    x: np.ndarray
    y: np.ndarray
    test: np.ndarray
    train: np.ndarray
    rows: np.ndarray | None = None  # position of each x row in the upload (None: the same)
    texts: Sequence[str] | None = None
    held_out: tuple[np.ndarray, np.ndarray] | None = None  # rows of x and their out-of-fold probabilities

    def row(self, i: int) -> int:
        """The uploaded row of x's row `i`."""
        return int(self.rows[i]) if self.rows is not None else int(i)


@dataclass(frozen=True)
class Report:
    """A built report: its JSON document, its images by file name and its self-contained HTML page."""

    content: dict[str, Any]
    images: dict[str, bytes] = field(default_factory=dict)
    html: str = ""

    def files(self) -> dict[str, bytes]:
        """The report's files by name: report.json, report.html and the images."""
        return {"report.json": json.dumps(self.content, indent=2, ensure_ascii=False).encode("utf-8"),
                "report.html": self.html.encode("utf-8"), **self.images}


def _sample(y: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """Up to PER_CLASS correct and PER_CLASS wrong predictions per true class (first in split order)."""
    chosen: list[int] = []
    for c in range(classes):
        for right in (True, False):
            hits = np.where((y == c) & ((predicted == y) == right))[0][:PER_CLASS]
            chosen.extend(hits.tolist())
    return np.array(sorted(chosen)[:EXAMPLES], np.int64)


class OutOfReportTime(Exception):
    """Raised by a report's `check` when its time is up: the part being built is left out, and the parts after it."""


def build_report(subject: Subject, data: ReportData, variant: str = "dense",
                 checkpoints: Sequence[dict[str, Any]] = (), check: Callable[[], None] | None = None,
                 judge: Subject | None = None, found: dict[str, Any] | None = None,
                 suspects_until: float = math.inf) -> Report:
    """The report of `subject` on `data`; `checkpoints` are earlier weights of the final training (TracIn; the
    subject's own weights always count); `judge` is the network whose features decide the suspect labels (by default
    the subject at its first checkpoint, else the subject itself: `synthesis.explain.suspects`); `found` is another
    report's suspect part of the same data and judge, taken as it is (the labels are the data's, not a variant's);
    past `REFERENCE_ROWS` training rows, the suspect part judges no more rows after ``time.perf_counter()``
    `suspects_until` (a uniform sample of them is judged).

    Its parts are built in order of worth for their cost — global figures, suspect labels (a forward pass over the
    training rows), each method's attributions of a few examples with their checks, then influence over every
    checkpoint (a gradient pass per checkpoint) — and a part is kept only when it is whole: when `check` raises
    OutOfReportTime, that part and the ones after it are listed in `omitted`. Without the global figures there is no
    report (OutOfReportTime propagates); any other exception from `check` propagates.
    """
    tick = check or (lambda: None)
    started = time.perf_counter()
    report = _Builder(subject, data, variant)
    judge = judge or (subject.with_variables(checkpoints[0]) if checkpoints else subject)
    parts: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("global", lambda: report.global_part(tick)),
        ("suspect_labels", lambda: dict(found) if found is not None else report.suspects(judge, tick,
                                                                                          suspects_until))]
    parts += [(f"attributions:{name}", lambda name=name: report.attributions(name, tick))  # type: ignore[misc]
              for name in report.method_names()]
    steps = [subject.with_variables(v) for v in checkpoints] + [subject]
    parts.append(("influence", lambda: report.influence(steps, tick)))
    omitted: list[str] = []
    for name, part in parts:
        if omitted:
            omitted.append(name)
            continue
        try:
            tick()
            report.merge(part())
        except OutOfReportTime:
            if name == "global":
                raise
            omitted.append(name)
    content = report.content(omitted, time.perf_counter() - started)
    return Report(content, report.images, render.page(content, report.images))


class _Builder:
    """The parts of one report; each part returns what it adds and touches nothing until merged."""

    def __init__(self, subject: Subject, data: ReportData, variant: str) -> None:
        self.subject, self.data, self.variant = subject, data, variant
        self.classes = list(data.classes)
        self.images: dict[str, bytes] = {}
        self.parts: dict[str, Any] = {"methods": {}, "faithfulness": {}, "examples": [], "suspect_labels": [],
                                      "influence": {"method": "TracInCP, output layers",
                                                    "layers": output_layers(subject.graph), "checkpoints": 0,
                                                    "examples": []}}
        x_test = data.x[data.test]
        self.proba = subject.probabilities(x_test) if len(x_test) else np.zeros((0, len(self.classes)), np.float32)
        self.predicted = self.proba.argmax(axis=1)
        self.picked = _sample(data.y[data.test], self.predicted, len(self.classes))

    def merge(self, part: dict[str, Any]) -> None:
        """Add a finished part."""
        self.images.update(part.pop("images", {}))
        for key, value in part.items():
            if key in ("methods", "faithfulness"):
                self.parts[key].update(value)
            elif key == "example_fields":
                for example, fields in zip(self.parts["examples"], value, strict=True):
                    for field_name, item in fields.items():  # per method: {"images": {m: file}} or {"scores": ...}
                        example.setdefault(field_name, {}).update(item)
            else:
                self.parts[key] = value

    def content(self, omitted: list[str], seconds: float) -> dict[str, Any]:
        """The report.json document."""
        return {"version": VERSION, "variant": self.variant, "modality": self.subject.modality,
                "classes": self.classes, **self.parts, "omitted": omitted, "images": sorted(self.images),
                "seconds": round(seconds, 3)}

    def global_part(self, tick: Callable[[], None]) -> dict[str, Any]:
        """Global figures, their two charts, and the sampled examples' headers (`tick` between the charts, so
        that a report with no time for them stops within one step)."""
        data, classes = self.data, self.classes
        y_test = data.y[data.test]
        figures = global_figures(self.proba, y_test, classes, np.array([data.row(i) for i in data.test], np.int64))
        images = {}
        if len(y_test):
            calibration = figures["calibration"]
            tick()
            images = {"confusion.png": render.confusion_png(figures["confusion_matrix"], classes)}
            tick()
            images["reliability.png"] = render.reliability_png(calibration["bins"], calibration["ece"])
        examples = [{"row": data.row(int(data.test[k])), "given": classes[int(data.y[data.test[k]])],
                     "predicted": classes[int(self.predicted[k])],
                     "probability": float(self.proba[k, self.predicted[k]])} for k in self.picked]
        if self.subject.modality == "text" and data.texts is not None:
            for example, k in zip(examples, self.picked, strict=True):
                example["tokens"] = data.texts[int(data.test[k])].split()
        return {"global": figures, "images": images, "examples": examples}

    def method_names(self) -> list[str]:
        """The methods the report's examples are explained by (Grad-CAM where the network has a feature map; none
        for a text model whose texts are not at hand)."""
        if self.subject.modality == "image":
            return [m for m in IMAGE_METHODS if m != "gradcam" or spatial_layers(self.subject.graph)]
        return list(TEXT_METHODS) if self.data.texts is not None and self.subject.codec is not None else []

    def attributions(self, name: str, tick: Callable[[], None]) -> dict[str, Any]:
        """One method's attributions of the sampled examples, its settings and its deletion faithfulness."""
        subject, data = self.subject, self.data
        test, targets = data.test[self.picked], self.predicted[self.picked]
        if not len(test):
            return {}
        started = time.perf_counter()
        settings: dict[str, Any] = {}
        if subject.modality == "image":
            x = data.x[test]
            if name == "integrated-gradients":
                maps, error, steps = integrated.image_attributions(subject, x, targets)
                settings = _completeness(integrated.BASELINE, steps, error)
            else:
                maps = METHODS[name].images(subject, x, targets)
                settings = {"layers": spatial_layers(subject.graph)} if name == "gradcam" else {}
            seconds = time.perf_counter() - started
            tick()
            faithful = checks.faithfulness(lambda mode, order: checks.image_curve(subject, x, targets, maps, mode,
                                                                                  order))
            images = {f"row{data.row(int(i))}_{name}.png": render.overlay(x[k], maps[k]) for k, i in enumerate(test)}
            fields: list[dict[str, dict[str, Any]]] = [{"images": {name: f"row{data.row(int(i))}_{name}.png"}}
                                                       for i in test]
        else:
            texts = [(data.texts or [])[int(i)] for i in test]
            if name == "integrated-gradients":
                scores, error, steps = integrated.text_attributions(subject, texts, targets)
                settings = _completeness(integrated.TEXT_BASELINE, steps, error)
            else:
                scores = METHODS[name].texts(subject, texts, targets)
            seconds = time.perf_counter() - started
            tick()
            faithful = checks.faithfulness(lambda mode, order: checks.text_curve(subject, texts, targets, scores, mode,
                                                                                 order))
            images = {}
            fields = [{"scores": {name: [round(float(v), 6) for v in s]}} for s in scores]
        settings["seconds_per_input"] = round(seconds / len(test), 4)
        return {"methods": {name: settings}, "faithfulness": {name: faithful}, "images": images,
                "example_fields": fields}

    def suspects(self, judge: Subject, tick: Callable[[], None], until: float = math.inf) -> dict[str, Any]:
        """The training rows whose label out-of-sample evidence contradicts (`synthesis.explain.suspects`): the
        out-of-fold probabilities where there are some, else the rows' neighbours in the judge's features, for as
        many rows (a uniform sample, at least `REFERENCE_ROWS`) as are judged by ``time.perf_counter()`` `until`."""
        data, classes = self.data, self.classes
        if data.held_out is not None:
            train, proba = data.held_out
            method = "out-of-fold probabilities of the cross-validated linear floor"
        else:
            train = np.asarray(data.train) if len(data.train) > 1 else np.zeros(0, np.int64)
            train = train[suspects.checking_order(len(train))]
            feats = suspects.features(judge, data.x, tick, until, rows=train)  # no copy of rows it may not judge
            train = train[:len(feats)]  # the rows judged before `until`
            proba = suspects.neighbour_shares(feats, data.y[train], len(classes)) if len(train) else \
                np.zeros((0, len(classes)))
            method = f"labels of the {suspects.NEIGHBOURS} nearest training rows in the network's early features"
        rows = np.array([data.row(int(i)) for i in train], np.int64)
        found = suspects.suspect_labels(proba, data.y[train], rows)
        return {"suspect_labels": [{"row": s.row, "given": classes[s.given], "suggested": classes[s.suggested],
                                    "given_share": s.given_share, "suggested_share": s.suggested_share}
                                   for s in found[:SUSPECTS_LISTED]],
                "suspects": {"method": method, "threshold": suspects.SHARE, "found": len(found),
                             "rows_checked": len(train), "training_rows": len(data.train)}}

    def influence(self, steps: Sequence[Subject], tick: Callable[[], None]) -> dict[str, Any]:
        """For sampled test predictions, the training rows that most helped and most hurt them (at the predicted
        label), traced over `steps`."""
        data, classes = self.data, self.classes
        picked = self.picked[:INFLUENCE_EXAMPLES]
        test = data.test[picked]
        influence = tracin.trace(steps, data.x[data.train], data.y[data.train], data.x[test], self.predicted[picked],
                                 tick)
        out: list[dict[str, Any]] = []
        for k, i in enumerate(test if len(data.train) else []):
            order = np.argsort(-influence[k], kind="stable")

            def listed(indices: np.ndarray, k: int = k) -> list[dict[str, Any]]:
                return [{"row": data.row(int(data.train[j])), "label": classes[int(data.y[data.train[j]])],
                         "score": float(influence[k, j])} for j in indices]

            out.append({"row": data.row(int(i)), "predicted": classes[int(self.predicted[picked[k]])],
                        "helped": listed(order[:INFLUENCE_ROWS]), "hurt": listed(order[::-1][:INFLUENCE_ROWS])})
        return {"influence": {**self.parts["influence"], "checkpoints": len(steps), "examples": out}}


def _completeness(baseline: str, steps: int, error: np.ndarray) -> dict[str, Any]:
    """Integrated gradients' settings: its baseline, steps and completeness errors."""
    return {"baseline": baseline, "steps": steps, "completeness_error_max": float(error.max()),
            "completeness_error_mean": float(error.mean())}

