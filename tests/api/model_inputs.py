"""Inputs for the `/models` tests: PNG bytes, noisy images, multipart files and model URLs."""

from __future__ import annotations

import io
import uuid

import numpy as np
from PIL import Image


def png(pixels: np.ndarray) -> bytes:
    """The image (uint8, HWC) as PNG bytes."""
    out = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(out, format="PNG")
    return out.getvalue()


def pixels(n: int, shape: tuple[int, ...] = (8, 8, 1), seed: int = 0) -> np.ndarray:
    """`n` noisy uint8 images, each with its own brightness."""
    rng = np.random.default_rng(seed)
    brightness = rng.uniform(0, 1, (n, *(1 for _ in shape)))
    return (rng.uniform(0, 255, (n, *shape)) * brightness).astype(np.uint8)


def files(blobs: list[bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    """The blobs as the multipart `files` of a predict request."""
    return [("files", (f"img{i}.png", blob, "image/png")) for i, blob in enumerate(blobs)]


def url(model_id: uuid.UUID, suffix: str = "") -> str:
    """The model's URL under the API's prefix."""
    return f"/api/v1/models/{model_id}{suffix}"
