"""Occlusion: how much the target class's probability drops when part of the input is taken away.

Zeiler and Fergus, "Visualizing and Understanding Convolutional Networks", ECCV 2014. Images: a square window
(an eighth of the smaller side, at least 2 pixels) slides with a stride of half its side; it is set to the black
image, and each pixel scores the mean drop over the windows that cover it. Texts: each word is left out in turn
(the text re-encoded without it) and scores the drop. Model-agnostic: no gradients, only predictions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synthesis.explain.base import register
from synthesis.explain.subject import Subject


def window(height: int, width: int) -> tuple[int, int]:
    """The occluding window's side and stride for an image of this size."""
    side = max(2, min(height, width) // 8)
    return side, max(1, side // 2)


def _starts(length: int, side: int, stride: int) -> list[int]:
    starts = list(range(0, max(length - side, 0) + 1, stride))
    if starts[-1] + side < length:
        starts.append(length - side)
    return starts


def image_scores(subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` mean probability drops of raw images under the sliding black window."""
    x = np.asarray(x, np.float32)
    n, height, width = x.shape[:3]
    rows = np.arange(n)
    base = subject.probabilities(x)[rows, targets]
    side, stride = window(height, width)
    drop, cover = np.zeros((n, height, width)), np.zeros((height, width))
    for top in _starts(height, side, stride):
        for left in _starts(width, side, stride):
            occluded = x.copy()
            occluded[:, top:top + side, left:left + side] = 0.0
            drop[:, top:top + side, left:left + side] += (base - subject.probabilities(occluded)[rows, targets]
                                                          )[:, None, None]
            cover[top:top + side, left:left + side] += 1
    return (drop / np.maximum(cover, 1)).astype(np.float32)


def without_each_word(text: str) -> list[str]:
    """The text with each of its words left out in turn."""
    words = text.split()
    return [" ".join(words[:i] + words[i + 1:]) for i in range(len(words))]


def text_scores(subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
    """Per text, the drop in the target class's probability when each word is left out."""
    variants = [without_each_word(text) for text in texts]
    flat = list(texts) + [v for vs in variants for v in vs]
    proba = subject.probabilities(subject.rows(flat))
    out, at = [], len(texts)
    for i, vs in enumerate(variants):
        target = int(targets[i])
        out.append((proba[i, target] - proba[at:at + len(vs), target]).astype(np.float32))
        at += len(vs)
    return out


class Occlusion:
    """Occlusion, for image and text models."""

    name = "occlusion"
    modalities = frozenset({"image", "text"})

    def images(self, subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Per-pixel mean drop under a sliding black window."""
        return image_scores(subject, x, targets)

    def texts(self, subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
        """Per-word drop when the word is left out."""
        return text_scores(subject, texts, targets)


register(Occlusion())
