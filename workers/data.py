"""A job's dataset, from its blob to what synthesis trains on, plus the preprocessing a model package keeps."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from store.blobs import BlobStore
from store.ingest import ImageData, Limits, TextEncoder, load_file
from store.models import Dataset
from synthesis.default import Task
from synthesis.split import stratified_split


@dataclass(frozen=True)
class Prepared:
    """What to train on, the preprocessing that turns raw inputs into the network's input, and the class names."""

    task: Task
    preprocessing: dict[str, Any]
    classes: list[str]


def prepare(dataset: Dataset, blobs: BlobStore, limits: Limits, seed: int = 0) -> Prepared:
    """Load `dataset`'s file from the blob store; texts get a vocabulary learned from the training split only."""
    with tempfile.TemporaryDirectory(prefix="netsynth-") as tmp:
        path = Path(tmp) / (dataset.filename or "dataset")
        with blobs.open(dataset.blob_key) as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1024 * 1024)
        data = load_file(path, dataset.format, limits)
    if isinstance(data, ImageData):
        h, w, c = (int(d) for d in data.x.shape[1:])
        task = Task("image", data.x, data.y, len(data.classes), seed=seed)
        return Prepared(task, {"kind": "image", "shape": [h, w, c]}, list(data.classes))
    train_rows = stratified_split(data.y, seed).train  # the same split synthesis makes from (y, seed)
    encoder = TextEncoder.fit([data.texts[i] for i in train_rows])
    ids = encoder.encode(data.texts)
    task = Task("text", np.asarray(ids, np.int32), data.y, len(data.classes), vocab_size=encoder.vocab_size, seed=seed)
    return Prepared(task, {"kind": "text", "encoder": encoder.to_json()}, list(data.classes))
