"""The datasets ``bench/estimator.py`` records learning curves on: each as a core Dataset and its SpaceInfo.

* digits: scikit-learn's 1,797 8x8 images split 80/20 stratified by the given seed (the estimator was tuned on
  seed 0; other seeds give curves it has not seen);
* mnist: a fixed random subset of MNIST's training set;
* sms, mr: the text sets of ``bench/peers/datasets.py`` (``DIR/sms_spam/data.csv``, ``DIR/mr/data.csv``), a stratified
  subset of their training part split 80/20 into training and validation rows, encoded as a job encodes them (the
  vocabulary learned from the training rows only, ``domain.ingest.TextEncoder``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

TEXT = ("sms", "mr")
"""The text sets this benchmark records, by their name in ``bench/peers/datasets.py``."""


def load_digits(seed: int) -> tuple[Any, Any]:
    """Digits as a core Dataset (80/20 stratified split by ``seed``, raw 0-255 float pixels) and its SpaceInfo."""
    from sklearn.datasets import load_digits as sklearn_digits

    from core.data import Dataset
    from synthesis.space import SpaceInfo
    from synthesis.split import stratified_split

    digits = sklearn_digits()
    x = np.round(digits.images * 255 / 16).astype(np.float32)[..., np.newaxis]
    y = digits.target.astype(np.int32)
    split = stratified_split(y, seed, val_fraction=0.2, test_fraction=0.0)
    data = Dataset(x[split.train], y[split.train], x[split.val], y[split.val])
    return data, SpaceInfo("image", (8, 8, 1), 10, scale=1 / 255)


def load_mnist(path: Path, n_train: int, n_val: int, seed: int) -> tuple[Any, Any]:
    """A fixed random subset of MNIST's training set (n_train to train, n_val to validate) and its SpaceInfo."""
    from core.data import Dataset
    from synthesis.space import SpaceInfo

    with np.load(path) as f:
        x_all, y_all = f["x_train"], f["y_train"]
    rows = np.random.default_rng(seed).permutation(len(x_all))[: n_train + n_val]
    x, y = x_all[rows].astype(np.float32).reshape(-1, 28, 28, 1), y_all[rows].astype(np.int32)
    data = Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
    return data, SpaceInfo("image", (28, 28, 1), 10, scale=1 / 255)


def load_text(name: str, data_dir: Path, rows: int, seed: int) -> tuple[Any, Any]:
    """A stratified subset of ``rows`` rows of the text set ``name``'s training part (``bench/peers/datasets.py``),
    split 80/20 into training and validation rows, as token ids; and its SpaceInfo."""
    from peers import datasets

    from core.data import Dataset
    from domain.ingest import TextEncoder
    from synthesis.engine import space_info
    from synthesis.interface import Task
    from synthesis.split import stratified_sample, stratified_split

    split = datasets.load(name, seed, data_dir=data_dir)
    keep = stratified_sample(split.y_train, rows, seed)
    texts, y = [str(t) for t in split.x_train[keep]], split.y_train[keep].astype(np.int32)
    parts = stratified_split(y, seed, val_fraction=0.2, test_fraction=0.0)
    encoder = TextEncoder.fit([texts[i] for i in parts.train])
    x = np.asarray(encoder.encode(texts), np.int32)
    task = Task("text", x, y, len(split.classes), **encoder.layout())
    data = Dataset(x[parts.train], y[parts.train], x[parts.val], y[parts.val])
    return data, space_info(task, parts.train)
