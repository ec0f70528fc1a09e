"""The shapes of what the client returns: the API's JSON objects as typed dictionaries (dates as ISO 8601 text)."""

from __future__ import annotations

from typing import Any, TypedDict


class Dataset(TypedDict):
    """An uploaded, validated dataset and its profile."""

    id: str
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
    created_at: str


class JobModel(TypedDict):
    """One model of a job: its id and variant ("dense" or "compressed")."""

    id: str
    variant: str


class Job(TypedDict):
    """A synthesis job: its settings, state, stage, progress and models."""

    id: str
    dataset_id: str | None
    budget_tier: str
    budget_seconds: int
    budget_epochs: int | None
    seed: int
    constraints: dict[str, Any]
    tolerance: float
    queue: str
    state: str
    stage: str | None
    progress: float
    device_seconds: float
    error: str | None
    attempts: int
    cancel_requested: bool
    created_at: str
    started_at: str | None
    finished_at: str | None
    model_ids: list[str]
    models: list[JobModel]


class Event(TypedDict):
    """One event of a job's log; the last one a watch yields has `kind` "end", `seq` None and the job's final
    `state` in `payload`."""

    seq: int | None
    at: str
    kind: str
    payload: dict[str, Any]


class Model(TypedDict):
    """A trained model: classes, metrics, size, input, architecture, and a compressed model's before / after figures."""

    id: str
    job_id: str
    dataset_id: str | None
    variant: str
    created_at: str
    classes: list[str]
    metrics: dict[str, Any]
    param_count: int
    weights_bytes: int
    onnx_bytes: int
    input: dict[str, Any]
    preprocessing: str
    architecture: dict[str, Any] | None
    compression: dict[str, Any] | None


class Prediction(TypedDict):
    """One input's most probable class and every class's probability (in the order of `classes`)."""

    label: str
    probabilities: list[float]


class Predictions(TypedDict):
    """The predictions for the inputs, in the order they were given."""

    classes: list[str]
    predictions: list[Prediction]


class Report(TypedDict):
    """A model's explainability report: its report.json, and the URLs of its images and its page."""

    model_id: str
    created_at: str
    report: dict[str, Any]
    images: dict[str, str]
    html: str


class Explanation(TypedDict):
    """An explanation request: queued, running, done (with its attribution) or failed (with why)."""

    id: str
    model_id: str
    created_at: str
    state: str
    method: str
    url: str
    attribution: dict[str, Any] | None
    overlay: str | None
    reason: str | None
    error: str | None
