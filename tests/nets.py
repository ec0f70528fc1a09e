"""Tiny real networks (built and randomly weighted with core, exported to ONNX) and their model rows, for tests
of the routes and tasks that use a model's weights or graph."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from core import checkpoint, tree
from core.analysis import architecture
from core.evaluation import predict_proba
from core.model import Model, build
from core.onnx_export import to_onnx_bytes
from core.spec import Spec
from domain.ingest import TextEncoder
from store.db import session_scope
from store.models import Job, TrainedModel, User
from tests.store.factories import make_job, make_user

IMAGE_CLASSES = ["ant", "bee", "cow"]
TEXT_CLASSES = ["neg", "pos"]
TRAIN_TEXTS = ["a good film", "a bad film", "good acting and a good plot", "bad plot, bad acting", "fine"]


@dataclass(frozen=True)
class Net:
    """A real network: its compiled model, variables, spec document, checkpoint and ONNX bytes, preprocessing."""

    model: Model
    variables: dict[str, Any]
    spec: dict[str, Any]
    weights: bytes
    onnx: bytes
    preprocessing: dict[str, Any]
    classes: list[str]

    def proba(self, x: np.ndarray) -> np.ndarray:
        """core's class probabilities on `x`."""
        return predict_proba(self.model, self.variables, x)


Params = dict[str, np.ndarray]


def make_net(doc: dict[str, Any], preprocessing: dict[str, Any], classes: list[str],
             edit: Callable[[Params], None] | None = None) -> Net:
    """The network of the spec document `doc` with seeded weights (changed in place by `edit`, given them by path),
    checkpoint and ONNX export."""
    spec = Spec.from_dict(doc)
    model = build(spec)
    # unit-normal weights and biases (the initialiser's biases are zero); with this seed the test images get
    # different classes, so that comparing labels can catch a mix-up
    rng = np.random.default_rng(1)
    shapes = tree.flatten(model.init(jax.random.key(7))["params"])
    params = {p: rng.normal(0, 1, a.shape).astype(np.float32) for p, a in shapes.items()}
    if edit is not None:
        edit(params)
    variables = {"params": tree.unflatten(params)}
    return Net(model, variables, spec.to_dict(), checkpoint.to_bytes(spec, variables),
               to_onnx_bytes(spec, variables), preprocessing, classes)


def image_net() -> Net:
    """A conv net on 8x8 grey images, three classes."""
    doc = {
        "name": "tiny-image",
        "input": {"shape": [8, 8, 1], "dtype": "float32", "modality": "image", "scale": 1 / 255},
        "nodes": [
            {"id": "conv", "op": "conv2d", "inputs": ["input"], "params": {"filters": 4}},
            {"id": "relu", "op": "activation", "inputs": ["conv"], "params": {"fn": "relu"}},
            {"id": "pool", "op": "global_avg_pool", "inputs": ["relu"]},
            {"id": "logits", "op": "dense", "inputs": ["pool"], "params": {"units": 3}},
        ],
        "output": {"node": "logits", "num_classes": 3},
    }
    return make_net(doc, {"kind": "image", "shape": [8, 8, 1], "resize": "centre-crop"}, IMAGE_CLASSES)


def text_net() -> Net:
    """An embedding net on texts of up to 8 tokens (no n-gram bag), two classes."""
    # no n-gram bag (the engine's networks that read it are tested end to end in tests/workers)
    encoder = TextEncoder.fit(TRAIN_TEXTS, max_length=8, subword_buckets=32, ngram_buckets=0)

    def sentiment(params: Params) -> None:
        # "good" pushes towards pos and "bad" towards neg, so that texts get different classes whatever ids the
        # encoder gives the words, and comparing labels can catch a mix-up
        kernel = params["logits/kernel"]
        towards_pos = 16 * (kernel[:, 1] - kernel[:, 0]) / float(np.sum((kernel[:, 1] - kernel[:, 0]) ** 2))
        for word, sign in (("good", 1), ("bad", -1)):
            (word_id,) = encoder.ids(word)
            params["embed/embedding"][word_id] = sign * towards_pos

    doc = {
        "name": "tiny-text",
        "input": {"shape": [8], "dtype": "int32", "modality": "text"},
        "nodes": [
            {"id": "embed", "op": "embedding", "inputs": ["input"],
             "params": {"vocab_size": encoder.vocab_size, "dim": 4}},
            {"id": "pool", "op": "global_avg_pool", "inputs": ["embed"]},
            {"id": "logits", "op": "dense", "inputs": ["pool"], "params": {"units": 2}},
        ],
        "output": {"node": "logits", "num_classes": 2},
    }
    return make_net(doc, {"kind": "text", "encoder": encoder.to_json()}, TEXT_CLASSES, sentiment)


def model_row(job: Job, net: Net) -> TrainedModel:
    """An unsaved model row of `net` for `job`, with the architecture the worker saves a model with."""
    return TrainedModel(job_id=job.id, spec=net.spec, weights=net.weights, onnx=net.onnx, classes=net.classes,
                        preprocessing=net.preprocessing, metrics={"accuracy": 0.875, "loss": 0.4},
                        param_count=123, weights_bytes=len(net.weights),
                        architecture=architecture(Spec.from_dict(net.spec)))


def insert_model(factory: sessionmaker[Session], owner: User | None, net: Net) -> TrainedModel:
    """A model row of `net` from a job of `owner` (a new user when None)."""
    with session_scope(factory) as s:
        model = model_row(make_job(s, owner or make_user(s)), net)
        s.add(model)
        s.flush()
    return model
