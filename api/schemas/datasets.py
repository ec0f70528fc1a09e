"""Bodies of the `/datasets` routes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DatasetOut(BaseModel):
    """A validated dataset and its profile: counts per class, image shape or text lengths, duplicates."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    modality: str
    format: str
    filename: str
    status: str
    classes: list[str]
    class_counts: dict[str, int]
    sample_count: int
    size_bytes: int
    checksum: str
    profile: dict[str, Any]
    created_at: datetime


class SampleOut(BaseModel):
    """One sample of a dataset: its row, its label, and its text or the URL of its image."""

    index: int = Field(description="The sample's row in the upload, numbered as the explainability reports number "
                                   "rows (an image archive's images by their paths sorted).")
    label: str
    text: str | None = Field(description="A text sample's text (its first 1,000 characters); null for an image.")
    image_url: str | None = Field(description="Where an image sample's PNG is (as the model sees it, at most 128 "
                                              "pixels a side); null for a text.")


class DatasetSamplesOut(BaseModel):
    """A few samples of a dataset, the first rows of each class in turn."""

    modality: Literal["image", "text"]
    samples: list[SampleOut]
