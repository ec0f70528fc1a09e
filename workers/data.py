"""A job's dataset, from its blob to what synthesis trains on, plus the preprocessing a model package keeps."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from domain.ingest import ImageData, Limits, TextEncoder, load_file
from domain.ingest.archive import SafeZip
from domain.ingest.imagezip import class_members
from domain.ingest.resize import CENTRE_CROP
from store.blobs import BlobStore
from store.models import Dataset
from synthesis.interface import Task
from synthesis.split import stratified_split


@dataclass(frozen=True)
class Prepared:
    """What to train on, the preprocessing that turns raw inputs into the network's input, and the class names."""

    task: Task
    preprocessing: dict[str, Any]
    classes: list[str]


def duplicate_groups(samples: list[bytes]) -> np.ndarray:
    """One group id per sample; exact duplicates share theirs (so they never straddle the split)."""
    ids: dict[bytes, int] = {}
    return np.asarray([ids.setdefault(hashlib.sha256(s).digest(), len(ids)) for s in samples], np.int64)


def prepare(dataset: Dataset, blobs: BlobStore, limits: Limits, seed: int = 0) -> Prepared:
    """Load `dataset`'s file from the blob store and prepare it (see `prepare_file`); images are brought to the
    size its profile recorded at upload (a declared resize included)."""
    image = (dataset.profile or {}).get("image")
    if isinstance(image, dict) and limits.resize is None:
        limits = replace(limits, resize=(int(image["height"]), int(image["width"])))
    with tempfile.TemporaryDirectory(prefix="netsynth-") as tmp:
        path = Path(tmp) / (dataset.filename or "dataset")
        with blobs.open(dataset.blob_key) as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1024 * 1024)
        return prepare_file(path, dataset.format, limits, seed)


def prepare_file(path: Path, fmt: str, limits: Limits, seed: int = 0) -> Prepared:
    """Load a validated dataset file; images are brought to one size by the resize policy (domain.ingest.resize),
    which the preprocessing records for prediction; exact duplicates are grouped, texts get a vocabulary learned
    from the training split only (the split synthesis makes from the same labels, groups and seed). The task
    carries what reports are worded in: the class names, the raw texts and their encoder, each row's position in
    the upload."""
    data = load_file(path, fmt, limits)
    if isinstance(data, ImageData):
        h, w, c = (int(d) for d in data.x.shape[1:])
        groups = duplicate_groups([row.tobytes() for row in data.x])
        rows = archive_rows(path, limits) if fmt == "image_zip" else None
        task = Task("image", data.x, data.y, len(data.classes), groups=groups, rows=rows, classes=list(data.classes))
        return Prepared(task, {"kind": "image", "shape": [h, w, c], "resize": CENTRE_CROP}, list(data.classes))
    task, encoder = text_task(data.texts, data.y, len(data.classes), seed)
    task = replace(task, classes=list(data.classes))
    return Prepared(task, {"kind": "text", "encoder": encoder.to_json()}, list(data.classes))


def text_task(texts: list[str], y: np.ndarray, num_classes: int, seed: int,
              test_fraction: float = 0.1) -> tuple[Task, TextEncoder]:
    """The text task synthesis trains on and its encoder, learned from the rows synthesis will train on: the
    split `synthesis.engine.synthesize` makes with the same seed and `test_fraction` (`Options`), so no
    validation or test text shapes the vocabulary the candidates are chosen by."""
    groups = duplicate_groups([t.encode("utf-8") for t in texts])
    train_rows = stratified_split(y, seed, test_fraction=test_fraction, groups=groups).train
    encoder = TextEncoder.fit([texts[i] for i in train_rows])
    ids = np.asarray(encoder.encode(texts), np.int32)
    task = Task("text", ids, y, num_classes, groups=groups, texts=list(texts), codec=encoder, **encoder.layout())
    return task, encoder


def archive_rows(path: Path, limits: Limits) -> np.ndarray | None:
    """Each loaded image's row in the upload, which numbers an archive's images by their paths sorted (the
    images load in the archive's own order); None when the two orders agree."""
    with SafeZip(path, limits) as archive:
        names = [info.filename for info, _ in class_members(archive, limits)]
    ranked = sorted(range(len(names)), key=names.__getitem__)
    rows = np.empty(len(names), np.int64)
    rows[ranked] = np.arange(len(names))
    return None if np.array_equal(rows, np.arange(len(names))) else rows
