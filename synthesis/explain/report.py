"""The explainability report every delivered model ships with: global figures, attributions of sampled test
predictions, faithfulness, training-data influence and the rows whose label the model resists.

`build_report` is pure given its inputs; `check` is called between its parts and may raise to stop it (a report
is then absent, never half-built). The JSON is `report.json`; images are PNG files named in it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from synthesis.explain import checks, integrated, render, tracin
from synthesis.explain.base import METHODS
from synthesis.explain.subject import Subject, output_layers, spatial_layers
from synthesis.explain.summary import global_figures

VERSION = 1
PER_CLASS = 2
"""Correct and wrong test predictions explained per class (each at most), up to EXAMPLES in all."""
EXAMPLES = 24
INFLUENCE_EXAMPLES, INFLUENCE_ROWS = 6, 5
"""Test predictions traced to their training rows, and the rows listed per direction (helped, hurt)."""
SUSPECTS_FLOOR, SUSPECTS_FRACTION = 100, 0.1
"""`suspect_labels` lists the most suspicious tenth of the rows (at least 100, at most all)."""
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


def build_report(subject: Subject, data: ReportData, variant: str = "dense",
                 checkpoints: Sequence[dict[str, Any]] = (), check: Callable[[], None] | None = None) -> Report:
    """The report of `subject` on `data`; `checkpoints` are earlier weights of the final training (TracIn; the
    subject's own weights always count)."""
    tick = check or (lambda: None)
    started = time.perf_counter()
    classes, images = list(data.classes), {}
    x_test, y_test = data.x[data.test], data.y[data.test]
    proba = subject.probabilities(x_test) if len(x_test) else np.zeros((0, len(classes)), np.float32)
    figures = global_figures(proba, y_test, classes, np.array([data.row(i) for i in data.test], np.int64))
    if len(y_test):
        images["confusion.png"] = render.confusion_png(figures["confusion_matrix"], classes)
        calibration = figures["calibration"]
        images["reliability.png"] = render.reliability_png(calibration["bins"], calibration["ece"])
    tick()
    predicted = proba.argmax(axis=1)
    picked = _sample(y_test, predicted, len(classes))
    examples, methods, faithfulness = _attributions(subject, data, picked, predicted, images, tick)
    tick()
    trace = [subject.with_variables(v) for v in checkpoints] + [subject]
    influence = _influence(trace, data, picked[:INFLUENCE_EXAMPLES], predicted, tick)
    scores = tracin.self_influence(trace, data.x, data.y, tick)
    final = subject.probabilities(data.x).argmax(axis=1)
    limit = min(len(data.y), max(SUSPECTS_FLOOR, round(SUSPECTS_FRACTION * len(data.y))))
    rows = np.array([data.row(i) for i in range(len(data.y))], np.int64)
    suspects = [{"row": s.row, "given": classes[s.given], "suggested": classes[s.suggested], "score": s.score}
                for s in tracin.suspect_labels(scores, data.y, final, rows, limit)]
    content = {"version": VERSION, "variant": variant, "modality": subject.modality, "classes": classes,
               "global": figures, "methods": methods, "faithfulness": faithfulness, "examples": examples,
               "influence": {"method": "TracInCP, output layers", "layers": output_layers(subject.graph),
                             "checkpoints": len(trace), "examples": influence},
               "suspect_labels": suspects, "images": sorted(images),
               "seconds": round(time.perf_counter() - started, 3)}
    return Report(content, images, render.page(content, images))


def _attributions(subject: Subject, data: ReportData, picked: np.ndarray, predicted: np.ndarray,
                  images: dict[str, bytes], tick: Callable[[], None]
                  ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The explained examples, each method's settings and figures, and deletion faithfulness per method."""
    classes = list(data.classes)
    test = data.test[picked]
    targets = predicted[picked]
    examples: list[dict[str, Any]] = [
        {"row": data.row(int(i)), "given": classes[int(data.y[i])], "predicted": classes[int(t)],
         "probability": 0.0} for i, t in zip(test, targets, strict=True)]
    if not len(test):
        return examples, {}, {}
    proba = subject.probabilities(data.x[test])
    for example, p, t in zip(examples, proba, targets, strict=True):
        example["probability"] = float(p[t])
    methods: dict[str, Any] = {}
    faithfulness: dict[str, Any] = {}
    if subject.modality == "image":
        x = data.x[test]
        names = [m for m in IMAGE_METHODS if m != "gradcam" or spatial_layers(subject.graph)]
        for example in examples:
            example["images"] = {}
        for name in names:
            started = time.perf_counter()
            if name == "integrated-gradients":
                maps, error, steps = integrated.image_attributions(subject, x, targets)
                methods[name] = {"baseline": integrated.BASELINE, "steps": steps,
                                 "completeness_error_max": float(error.max()),
                                 "completeness_error_mean": float(error.mean())}
            else:
                maps = METHODS[name].images(subject, x, targets)
                methods[name] = {"layers": spatial_layers(subject.graph)} if name == "gradcam" else {}
            methods[name]["seconds_per_input"] = round((time.perf_counter() - started) / len(x), 4)
            faithfulness[name] = _deletion(checks.image_deletion(subject, x, targets, maps),
                                           checks.image_deletion(subject, x, targets, maps, "random"))
            for k, example in enumerate(examples):
                file = f"row{example['row']}_{name}.png"
                images[file] = render.overlay(x[k], maps[k])
                example["images"][name] = file
            tick()
        return examples, methods, faithfulness
    if data.texts is None or subject.codec is None:  # rows without their words: nothing to attribute to
        return examples, methods, faithfulness
    texts = [data.texts[int(i)] for i in test]
    for example, text in zip(examples, texts, strict=True):
        example["tokens"], example["scores"] = text.split(), {}
    for name in TEXT_METHODS:
        started = time.perf_counter()
        scores = METHODS[name].texts(subject, texts, targets)
        methods[name] = {"seconds_per_input": round((time.perf_counter() - started) / len(texts), 4)}
        if name == "integrated-gradients":
            methods[name]["baseline"] = integrated.BASELINE
        faithfulness[name] = _deletion(checks.text_deletion(subject, texts, targets, scores),
                                       checks.text_deletion(subject, texts, targets, scores, "random"))
        for example, s in zip(examples, scores, strict=True):
            example["scores"][name] = [round(float(v), 6) for v in s]
        tick()
    return examples, methods, faithfulness


def _deletion(ordered: np.ndarray, random: np.ndarray) -> dict[str, float]:
    return {"deletion_auc": float(ordered.mean()), "random_deletion_auc": float(random.mean())}


def _influence(trace: Sequence[Subject], data: ReportData, picked: np.ndarray, predicted: np.ndarray,
               tick: Callable[[], None]) -> list[dict[str, Any]]:
    """For sampled test predictions, the training rows that most helped and most hurt them (at the predicted
    label)."""
    if not len(picked) or not len(data.train):
        return []
    classes = list(data.classes)
    test = data.test[picked]
    scores = tracin.influence(trace, data.x[test], predicted[picked], data.x[data.train], data.y[data.train], tick)
    out = []
    for k, i in enumerate(test):
        order = np.argsort(-scores[k], kind="stable")

        def listed(indices: np.ndarray, k: int = k) -> list[dict[str, Any]]:
            return [{"row": data.row(int(data.train[j])), "label": classes[int(data.y[data.train[j]])],
                     "score": float(scores[k, j])} for j in indices]

        out.append({"row": data.row(int(i)), "predicted": classes[int(predicted[picked[k]])],
                    "helped": listed(order[:INFLUENCE_ROWS]), "hurt": listed(order[::-1][:INFLUENCE_ROWS])})
    return out
