"""Explaining a delivered model's predictions on a user's inputs: one implementation behind `netsynth explain` and
the worker's explain task.

A model package's weights (safetensors, or the compressed `model.nsz`) become a `synthesis.explain.Subject`; its
preprocessing gives the text encoder, whose words the attributions are mapped back to.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core import artifact, checkpoint
from domain.errors import InvalidInput
from domain.ingest.text import TextEncoder
from domain.package import Package, image_shape, network_input
from synthesis.explain import Subject, method
from synthesis.explain.render import highlighted, overlay


def subject_of(spec: Mapping[str, Any], weights: bytes, variant: str, preprocessing: Mapping[str, Any]) -> Subject:
    """The network of a model's weights (`variant` 'dense': safetensors; 'compressed': model.nsz), with the text
    encoder of its preprocessing; InvalidInput when the weights are missing or unreadable."""
    if not weights:
        raise InvalidInput("the model package has no weights (weights.safetensors or model.nsz) to explain with")
    try:
        ckpt = artifact.decode(weights) if variant == "compressed" else checkpoint.from_bytes(weights)
    except Exception as exc:  # each reader raises its own types for malformed bytes
        raise InvalidInput(f"the model's weights cannot be read ({exc})") from exc
    codec = None
    if image_shape(preprocessing) is None:
        try:
            codec = TextEncoder.from_json(dict(preprocessing["encoder"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"the text encoder is malformed ({exc})") from exc
    return Subject.of(ckpt.spec, ckpt.variables, codec)


def package_subject(package: Package) -> Subject:
    """The network of a read model package."""
    return subject_of(package.spec, package.weights, package.variant, package.preprocessing)


@dataclass(frozen=True)
class Attribution:
    """One input's explanation: its name, predicted class and probability, the method, and a map ``[H, W]`` (image)
    or the words with one score each (text)."""

    input: str
    label: str
    probability: float
    method: str
    map: np.ndarray | None = None
    tokens: list[str] | None = None
    scores: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of `attributions.jsonl` (and of the explain route)."""
        out: dict[str, Any] = {"input": self.input, "label": self.label, "probability": self.probability,
                               "method": self.method}
        if self.map is not None:
            out["map"] = np.round(self.map.astype(np.float64), 7).tolist()
        else:
            out["tokens"], out["scores"] = self.tokens, self.scores
        return out


def explain(subject: Subject, classes: Sequence[str], preprocessing: Mapping[str, Any], method_name: str,
            names: Sequence[str], images: np.ndarray | None = None, texts: Sequence[str] | None = None,
            batch_size: int = 32) -> list[Attribution]:
    """Attributions of the inputs (decoded images at the model's shape, or raw texts) to their predicted classes;
    InvalidInput for an unknown method or one that does not explain this kind of model, or the wrong inputs."""
    try:
        explainer = method(method_name, subject.modality)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    out: list[Attribution] = []
    for start in range(0, len(names), batch_size):
        end = min(start + batch_size, len(names))
        if images is not None:
            x = network_input(preprocessing, images=images[start:end])
        else:
            x = network_input(preprocessing, texts=list((texts or [])[start:end]))
        proba = subject.probabilities(x)
        targets = proba.argmax(axis=1)
        if images is not None:
            maps = explainer.images(subject, x, targets)
            words: list[np.ndarray] = []
        else:
            maps, words = np.zeros((0,)), explainer.texts(subject, list((texts or [])[start:end]), targets)
        for k in range(end - start):
            name, label, p = names[start + k], classes[int(targets[k])], float(proba[k, targets[k]])
            if images is not None:
                out.append(Attribution(name, label, p, method_name, map=maps[k]))
            else:
                text = (texts or [])[start + k]
                out.append(Attribution(name, label, p, method_name, tokens=text.split(),
                                       scores=[float(s) for s in words[k]]))
    return out


def overlay_png(pixels: np.ndarray, attribution: Attribution) -> bytes:
    """The PNG overlay of an image's attribution."""
    assert attribution.map is not None
    return overlay(np.asarray(pixels, np.float32), attribution.map)


def text_html(attributions: Sequence[Attribution]) -> str:
    """One HTML page of highlighted texts (green: evidence for the label, red: against)."""
    rows = "".join(f"<p><b>{html.escape(a.input)}</b> &rarr; {html.escape(a.label)} ({a.probability:.1%}): "
                   f"{highlighted(a.tokens or [], a.scores or [])}</p>" for a in attributions)
    return f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>attributions</title></head>" \
           f"<body>{rows}</body></html>"
