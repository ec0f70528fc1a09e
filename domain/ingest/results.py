"""What inspecting and loading a dataset return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Inspection:
    """A validated dataset's format, classes and JSON-serialisable profile."""

    format: str  # "image_zip" | "npz" | "csv" | "tsv"
    modality: str  # "image" | "text"
    classes: list[str]  # label names, sorted (numeric labels numerically)
    class_counts: dict[str, int]
    sample_count: int
    profile: dict[str, Any]


@dataclass(frozen=True)
class ImageData:
    """Images as one array: uint8 [N, H, W, C] (C = 1 or 3), or float32 when an npz held floats."""

    x: np.ndarray
    y: np.ndarray  # int64 [N], indices into classes
    classes: list[str]


@dataclass(frozen=True)
class TextData:
    """Texts with their labels."""

    texts: list[str]
    y: np.ndarray  # int64 [N], indices into classes
    classes: list[str]
