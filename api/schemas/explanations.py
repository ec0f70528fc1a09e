"""Bodies of a model's explainability report and of the explanations a user asks for, and which method explains
which kind of model (the API answers a method that cannot explain a model at once, without loading the engine)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import StorableText

MAX_TEXT_CHARS = 10_000
"""Most characters of a text to explain."""


MethodName = Literal["gradcam", "integrated-gradients", "smoothgrad", "occlusion"]
"""The attribution methods a worker can run (`synthesis.explain.METHODS`, checked by a test)."""

MODALITIES: dict[str, frozenset[str]] = {
    "gradcam": frozenset({"image"}),
    "integrated-gradients": frozenset({"image", "text"}),
    "smoothgrad": frozenset({"image", "text"}),
    "occlusion": frozenset({"image", "text"}),
}
"""The kinds of model (a model's preprocessing kind) each method explains."""


def methods_for(kind: str) -> list[str]:
    """The names of the methods that explain a `kind` model, sorted."""
    return sorted(name for name, kinds in MODALITIES.items() if kind in kinds)


class ReportOut(BaseModel):
    """A model's explainability report: its report.json, and where its images and its page are."""

    model_id: uuid.UUID
    created_at: datetime
    report: dict[str, Any] = Field(description="The report.json of the model package's report/ folder: version, "
                                   "variant, modality, classes, global figures, methods, faithfulness, examples, "
                                   "influence, suspect_labels, images, seconds.")
    images: dict[str, str] = Field(description="The URL of each image of the report, by its file name.")
    html: str = Field(description="The URL of the report's self-contained HTML page.")


class ExplainTextIn(BaseModel):
    """A text to explain, and the method."""

    model_config = ConfigDict(extra="forbid")

    text: StorableText = Field(min_length=1, max_length=MAX_TEXT_CHARS,
                               description="The text; its whitespace-separated words are scored.")
    method: MethodName


class ExplanationOut(BaseModel):
    """An explanation request: queued or running (poll `url`), done with its attribution, or failed and why."""

    id: uuid.UUID
    model_id: uuid.UUID
    created_at: datetime
    state: Literal["queued", "running", "done", "failed"]
    method: str
    url: str = Field(description="Where to poll: 202 while queued or running, 200 once done or failed.")
    attribution: dict[str, Any] | None = Field(
        default=None, description="Once done, as a line of `netsynth explain`'s attributions.jsonl: input, label, "
        "probability, method, and `map` (an image: one float per pixel, height x width as the model sees it) or "
        "`tokens` and `scores` (a text: one score per whitespace-separated word); positive is evidence for the label.")
    overlay: str | None = Field(default=None, description="Once an image is explained, the URL of its PNG overlay.")
    reason: str | None = Field(default=None, description="Once failed, why as a slug (e.g. 'invalid-input').")
    error: str | None = Field(default=None, description="Once failed, why in words.")
