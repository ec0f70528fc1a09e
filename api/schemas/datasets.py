"""Bodies of the `/datasets` routes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


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
