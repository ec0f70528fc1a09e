"""Request and response bodies of `/jobs`: submitting a synthesis job, reading it and its event log."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from domain.rules import DEFAULT_TOLERANCE, MAX_BUDGET_SECONDS, MAX_TOLERANCE, MIN_BUDGET_SECONDS
from store.models import BudgetTier, JobState

NamedBudget = Literal["low", "medium", "high"]
BudgetSeconds = Annotated[StrictInt, Field(ge=MIN_BUDGET_SECONDS, le=MAX_BUDGET_SECONDS)]


class JobConstraints(BaseModel):
    """Limits the delivered model must meet; each one is optional."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_params: StrictInt | None = Field(default=None, gt=0, description="Most trainable parameters.")
    max_model_bytes: StrictInt | None = Field(default=None, gt=0, description="Largest size of the weights.")
    max_latency_ms: float | None = Field(default=None, gt=0, description="Slowest inference of one sample.")


class JobCreate(BaseModel):
    """A synthesis job to run on one of the caller's ready datasets."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: uuid.UUID
    budget: NamedBudget | BudgetSeconds | None = Field(
        default=None,
        description=(
            "Device time: 'low', 'medium' or 'high' (2, 5 or 16 device-hours), or a number of seconds "
            f"({MIN_BUDGET_SECONDS}..{MAX_BUDGET_SECONDS}). Omitted: chosen from the dataset's size."
        ),
    )
    constraints: JobConstraints | None = None
    epochs: StrictInt | None = Field(
        default=None, ge=1, le=100_000,
        description="Reproducible mode: a budget of training epochs instead of time, so the same seed gives the "
                    "same search (a time budget cannot: how far a run gets depends on the machine's speed).")
    seed: StrictInt = Field(default=0, ge=0, le=2**31 - 1, description="Seed of the split and the search.")
    queue: Literal["cpu", "gpu"] | None = Field(default=None, description="Omitted: the service's default queue.")
    tolerance: float | None = Field(
        default=None, ge=0, le=MAX_TOLERANCE, strict=True, allow_inf_nan=False,
        description="Validation accuracy the compressed model may lose against the dense one, as a fraction "
                    f"(0.005 = 0.5 percentage points; 0..{MAX_TOLERANCE}). Omitted: {DEFAULT_TOLERANCE}.")


class JobModel(BaseModel):
    """One model of a job: its id and variant ("dense" or "compressed")."""

    id: uuid.UUID
    variant: str


class JobOut(BaseModel):
    """A job as the API shows it."""

    id: uuid.UUID
    dataset_id: uuid.UUID | None = Field(description="None once the dataset was deleted.")
    budget_tier: BudgetTier
    budget_seconds: int
    budget_epochs: int | None
    seed: int
    constraints: dict[str, Any]
    tolerance: float = Field(description="Validation accuracy the compressed model may lose (a fraction).")
    queue: str
    state: JobState
    stage: str | None
    progress: float
    device_seconds: float = Field(description="Device-seconds the job has spent: the wall-clock seconds of the "
                                                "worker process that ran it (its attempts added), which holds a "
                                                "device for that long, and those of the workers that trained its "
                                                "search trials.")
    error: str | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    model_ids: list[uuid.UUID] = Field(description="The job's models: the dense one first, then the compressed.")
    models: list[JobModel] = Field(description="The job's models with their variants, in `model_ids`' order.")


class JobEventOut(BaseModel):
    """One entry of a job's event log."""

    model_config = ConfigDict(from_attributes=True)

    seq: int
    at: datetime
    kind: str
    payload: dict[str, Any]
