"""The report's pictures and page: attribution overlays, the confusion matrix, the reliability diagram, and one
self-contained HTML page (images inlined) that opens offline. Matplotlib draws; nothing here computes a figure."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colormaps
from PIL import Image

OVERLAY_SIDE = 128
"""The overlays' smaller side in pixels (small inputs are scaled up, nearest neighbour)."""
SHOWN = 50
"""Suspect labels the page shows (report.json lists every one)."""


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def overlay(pixels: np.ndarray, attribution: np.ndarray) -> bytes:
    """A PNG of the image ``[H, W, C]`` (raw 0-255) under its map ``[H, W]``: the map's positive part,
    scaled to its maximum, in matplotlib's 'inferno' colours, as opaque as it is strong (up to 75 %), so the image
    shows where the map is weak."""
    image = np.clip(pixels, 0, 255).astype(np.float32)
    base = np.repeat(image, 3, axis=-1) if image.shape[-1] == 1 else image
    positive = np.maximum(attribution, 0.0)
    scaled = positive / positive.max() if positive.max() > 0 else positive
    heat = colormaps["inferno"](scaled)[..., :3] * 255
    alpha = 0.75 * scaled[..., None]
    blended = Image.fromarray((base * (1 - alpha) + heat * alpha).astype(np.uint8))
    factor = max(1, OVERLAY_SIDE // min(blended.size))
    return _png(blended.resize((blended.width * factor, blended.height * factor), Image.Resampling.NEAREST))


def _figure_png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def confusion_png(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> bytes:
    """The confusion matrix as a heat map with counts (rows: true class, columns: predicted)."""
    m = np.asarray(matrix)
    side = min(2 + 0.45 * len(classes), 14)
    fig, ax = plt.subplots(figsize=(side, side))
    ax.imshow(m, cmap="Blues")
    ticks = range(len(classes))
    ax.set_xticks(ticks, [c[:12] for c in classes], rotation=90)
    ax.set_yticks(ticks, [c[:12] for c in classes])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(classes) <= 20:
        for (i, j), count in np.ndenumerate(m):
            ax.text(j, i, str(count), ha="center", va="center", color="white" if count > m.max() / 2 else "black")
    return _figure_png(fig)


def reliability_png(bins: Sequence[Mapping[str, Any]], ece: float) -> bytes:
    """The reliability diagram: accuracy against confidence per bin, with the diagonal of perfect calibration."""
    fig, ax = plt.subplots(figsize=(4, 4))
    full = [b for b in bins if b["count"]]
    ax.bar([(b["low"] + b["high"]) / 2 for b in full], [b["accuracy"] for b in full], width=0.09, label="accuracy")
    ax.plot([0, 1], [0, 1], "k--", linewidth=1, label="perfect calibration")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(f"expected calibration error {ece:.3f}")
    ax.legend(loc="upper left")
    return _figure_png(fig)


def highlighted(tokens: Sequence[str], scores: Sequence[float]) -> str:
    """HTML of the words, each on a background of its score: green for evidence for the label, red against."""
    top = max((abs(s) for s in scores), default=0.0) or 1.0
    spans = []
    for token, score in zip(tokens, scores, strict=True):
        alpha = min(abs(score) / top, 1.0) * 0.8
        colour = f"rgba(0,160,0,{alpha:.2f})" if score >= 0 else f"rgba(210,0,0,{alpha:.2f})"
        spans.append(f'<span style="background:{colour}" title="{score:.4g}">{html.escape(token)}</span>')
    return " ".join(spans)


def _settings(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.4g}" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
                     for k, v in settings.items())


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def page(report: Mapping[str, Any], images: Mapping[str, bytes]) -> str:
    """The report as one HTML page with every image inlined."""
    g = report["global"]
    parts = [f"<h1>netsynth report: {html.escape(report['variant'])} model</h1>",
             f"<p>Test accuracy {g['accuracy'] if g['accuracy'] is None else format(g['accuracy'], '.2%')} on "
             f"{g['test_rows']} test rows; expected calibration error {g['calibration']['ece']:.3f}.</p>"]
    for name in ("confusion.png", "reliability.png"):
        if name in images:
            parts.append(_img(images[name], name))
    parts.append("<h2>Per class</h2><table><tr><th>class</th><th>precision</th><th>recall</th><th>F1</th>"
                 "<th>support</th></tr>" + "".join(
                     f"<tr><td>{html.escape(c['class'])}</td><td>{c['precision']:.3f}</td><td>{c['recall']:.3f}</td>"
                     f"<td>{c['f1']:.3f}</td><td>{c['support']}</td></tr>" for c in g["per_class"]) + "</table>")
    parts.append("<h2>Most confident mistakes</h2><ul>" + "".join(
        f"<li>row {m['row']}: {html.escape(m['given'])} taken for {html.escape(m['predicted'])} "
        f"({m['probability']:.1%})</li>" for m in g["confident_mistakes"]) + "</ul>")
    if report.get("omitted"):
        parts.append(f"<p>Left out for lack of time: {html.escape(', '.join(report['omitted']))}.</p>")
    parts.append(_suspects(report))
    parts.append("<h2>Why it decides</h2>")
    if report["methods"]:
        parts.append("<table><tr><th>method</th><th>settings</th><th>deletion AUC (lower: more faithful)</th>"
                     "<th>random order</th><th>insertion AUC (higher: more faithful)</th><th>random order</th>"
                     "<th>check</th></tr>" + "".join(_faithfulness_row(m, s, report["faithfulness"][m])
                                                     for m, s in report["methods"].items()) + "</table>")
    def failed(m: str) -> str:
        return "" if report["faithfulness"].get(m, {}).get("better_than_random", True) else " (failed its check)"

    for example in report["examples"]:
        head = (f"<h3>row {example['row']}: given {html.escape(example['given'])}, predicted "
                f"{html.escape(example['predicted'])} ({example['probability']:.1%})</h3>")
        if "images" in example:
            body = "".join(f"<figure>{_img(images[n], m)}<figcaption>{html.escape(m)}{failed(m)}</figcaption></figure>"
                           for m, n in example["images"].items() if n in images)
        else:
            body = "".join(f"<p><b>{html.escape(m)}{failed(m)}</b>: {highlighted(example['tokens'], s)}</p>"
                           for m, s in example.get("scores", {}).items())
        parts.append(f"<section>{head}{body}</section>")
    influence = report["influence"]
    if influence["examples"]:
        parts.append(f"<h2>Training rows behind sampled predictions</h2><p>{html.escape(influence['method'])}, "
                     f"{influence['checkpoints']} checkpoint(s).</p><ul>" + "".join(
                         f"<li>row {e['row']} ({html.escape(e['predicted'])}): helped by "
                         + ", ".join(f"{h['row']} ({html.escape(h['label'])})" for h in e["helped"])
                         + "; hurt by " + ", ".join(f"{h['row']} ({html.escape(h['label'])})" for h in e["hurt"])
                         + "</li>" for e in influence["examples"]) + "</ul>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}figure{display:inline-block;margin:4px}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}")
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>netsynth report</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def _suspects(report: Mapping[str, Any]) -> str:
    """The suspect labels' section: how they were found and the first `SHOWN`."""
    about = report.get("suspects")
    if about is None:
        return "<h2>Suspect labels</h2><p>Left out for lack of time.</p>"
    head = (f"<h2>Suspect labels</h2><p>{about['found']} of {about['rows_checked']} training rows: their label has "
            f"under {about['threshold']:.0%} of the {html.escape(about['method'])}, and another label leads.</p>")
    if not report["suspect_labels"]:
        return head
    return head + ("<table><tr><th>row</th><th>given</th><th>suggested</th><th>P(given)</th><th>P(suggested)</th>"
                   "</tr>" + "".join(f"<tr><td>{s['row']}</td><td>{html.escape(s['given'])}</td>"
                                     f"<td>{html.escape(s['suggested'])}</td><td>{s['given_share']:.2f}</td>"
                                     f"<td>{s['suggested_share']:.2f}</td></tr>"
                                     for s in report["suspect_labels"][:SHOWN]) + "</table>"
                   + (f"<p>The {SHOWN} most contradicted are shown; report.json lists all "
                      f"{len(report['suspect_labels'])}.</p>" if len(report["suspect_labels"]) > SHOWN else ""))


def _faithfulness_row(method: str, settings: Mapping[str, Any], f: Mapping[str, Any]) -> str:
    """A method's row of the checks table; one that is not better than random order says so."""
    verdict = ("passed" if f["better_than_random"] else
               "<b>failed: not better than random order on this model; do not read its maps as evidence</b>")
    return (f"<tr><td>{html.escape(method)}</td><td>{html.escape(_settings(settings))}</td>"
            f"<td>{f['deletion_auc']:.3f}</td><td>{f['random_deletion_auc']:.3f}</td>"
            f"<td>{f['insertion_auc']:.3f}</td><td>{f['random_insertion_auc']:.3f}</td><td>{verdict}</td></tr>")
