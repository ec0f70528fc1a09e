"""The benchmark's datasets with their fixed train / test splits, the same for every system.

* digits: scikit-learn's 1,797 8x8 images (pixel values 0-16, as uint8), stratified 75/25 split (1,347 / 450);
* sms: the SMS Spam Collection (``shared/data/sms_spam/data.csv``, read with ``domain.ingest``), exact duplicate
  texts dropped (the first of each kept: 5,171 texts), stratified 80/20 split (4,136 / 1,035);
* mr, cr, mpqa: the sentence polarity sets of Kim (2014) (``shared/data/<name>/data.csv``), which have no official
  split: exact duplicate texts dropped as for sms, stratified 80/20 split (empty texts kept: they are real input);
* mnist: the official 60,000 / 10,000 split (``shared/data/mnist/mnist.npz``);
* cifar10_small: 10,000 / 2,000 CIFAR-10 photos as JPEG zips of class folders (``train.zip``, ``test.zip``), read by
  ``domain.ingest`` as an upload is.

``quick`` shrinks MNIST to its first 6,000 training and 1,000 test images, for smoke runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

TEXT_SETS = {"sms": "sms_spam", "mr": "mr", "cr": "cr", "mpqa": "mpqa"}
"""The text sets and their folders under the data directory (CSV ``text,label``)."""
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
QUICK_MNIST = (6_000, 1_000)
MIRRORABLE = frozenset({"cifar10_small"})
"""The image sets whose labels survive a left-right flip (photos of objects, not digits): the hand-written peer
flips these, as an engineer who looked at the data would; netsynth decides for itself (`synthesis.augment`)."""


@dataclass(frozen=True)
class Split:
    """A dataset's training and test parts: images uint8 [N, H, W, C] or texts (a unicode array [N])."""

    name: str
    modality: str  # "image" | "text"
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: list[str]


def load(name: str, seed: int, quick: bool = False, data_dir: Path = SHARED_DATA) -> Split:
    """The named dataset ('digits', a text set of TEXT_SETS, 'mnist' or 'cifar10_small') split with `seed` (digits
    and the text sets; the others have official splits)."""
    if name == "digits":
        digits = load_digits()
        x, y = digits.images.astype(np.uint8)[..., None], digits.target.astype(np.int64)
        return _stratified(name, "image", x, y, [str(c) for c in range(10)], 0.25, seed)
    if name in TEXT_SETS:
        from domain.ingest import Limits, TextData, load_file

        data = load_file(data_dir / TEXT_SETS[name] / "data.csv", "csv", Limits())
        assert isinstance(data, TextData)
        first_row: dict[str, int] = {}
        for row, text in enumerate(data.texts):
            first_row.setdefault(text, row)
        keep = sorted(first_row.values())
        texts = np.asarray([data.texts[i] for i in keep], dtype=str)
        return _stratified(name, "text", texts, data.y[keep], list(data.classes), 0.2, seed)
    if name == "cifar10_small":
        from domain.ingest import ImageData, Limits, load_file

        zips = [load_file(data_dir / "cifar10_small" / f"{part}.zip", "image_zip", Limits())
                for part in ("train", "test")]
        train, test = (z for z in zips if isinstance(z, ImageData))
        if list(train.classes) != list(test.classes):
            raise ValueError("cifar10_small: the training and test zips name different classes")
        return Split(name, "image", train.x, train.y.astype(np.int64), test.x, test.y.astype(np.int64),
                     list(train.classes))
    if name == "mnist":
        with np.load(data_dir / "mnist" / "mnist.npz") as npz:
            parts = [npz[k] for k in ("x_train", "y_train", "x_test", "y_test")]
        if quick:
            parts = [p[:QUICK_MNIST[i // 2]] for i, p in enumerate(parts)]
        x_train, y_train, x_test, y_test = parts
        return Split(name, "image", x_train.astype(np.uint8), y_train.astype(np.int64), x_test.astype(np.uint8),
                     y_test.astype(np.int64), [str(c) for c in range(10)])
    raise ValueError(f"unknown dataset {name!r}")


def _stratified(name: str, modality: str, x: np.ndarray, y: np.ndarray, classes: list[str], test: float,
                seed: int) -> Split:
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test, stratify=y, random_state=seed)
    return Split(name, modality, x_train, y_train, x_test, y_test, classes)
