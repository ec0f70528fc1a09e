"""The tables: users, API keys and the browser sessions signed in with them, datasets, jobs and their events,
candidates and the trials sent to other workers, trained models; and, from `store.outputs`, the models'
explainability reports, the jobs' search results and the users' explanation requests."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from domain.rules import DEFAULT_TOLERANCE
from store.base import Base, HasId, UTCDateTime, portable_enum, utcnow
from store.outputs import ExplanationRequest, ExplanationState, Report, ReportImage, SearchResult

__all__ = [
    "VARIANTS",
    "ApiKey",
    "Base",
    "BudgetTier",
    "Candidate",
    "CandidateStatus",
    "Dataset",
    "DatasetStatus",
    "ExplanationRequest",
    "ExplanationState",
    "Job",
    "JobEvent",
    "JobState",
    "Modality",
    "Report",
    "ReportImage",
    "SearchResult",
    "TrainedModel",
    "TrialState",
    "TrialTask",
    "User",
    "WebSession",
]


VARIANTS = ("dense", "compressed")
"""The models a job delivers, in the order the API lists them: the trained network, then its compressed form."""


class Modality(enum.StrEnum):
    """What kind of samples a dataset holds."""

    IMAGE = "image"
    TABULAR = "tabular"
    TEXT = "text"
    AUDIO = "audio"


class DatasetStatus(enum.StrEnum):
    """Where a dataset is in upload and validation."""

    UPLOADED = "uploaded"
    VALIDATING = "validating"
    READY = "ready"
    REJECTED = "rejected"


class BudgetTier(enum.StrEnum):
    """How much device time a job may spend: low / medium / high (2 / 5 / 16 device-hours by default, see
    `Settings.tier_seconds`), or custom seconds."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CUSTOM = "custom"


class JobState(enum.StrEnum):
    """A job's lifecycle; `store.jobs.transition` enforces the legal moves."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class CandidateStatus(enum.StrEnum):
    """Where a candidate architecture is in the search."""

    PROPOSED = "proposed"
    TRAINING = "training"
    TRAINED = "trained"
    FAILED = "failed"
    DISCARDED = "discarded"


class TrialState(enum.StrEnum):
    """Where a search trial sent to another worker is: waiting, training, done, or given up by its search."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class User(HasId, Base):
    """An account that owns datasets and jobs; a disabled one's keys no longer authenticate. The quota columns are
    an admin's overrides of the settings' defaults (`store.quotas`), None where the default applies."""

    __tablename__ = "users"

    email: Mapped[str] = mapped_column(String(320), unique=True)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    quota_active_jobs: Mapped[int | None] = mapped_column(Integer)
    quota_device_seconds: Mapped[int | None] = mapped_column(BigInteger)
    quota_storage_bytes: Mapped[int | None] = mapped_column(BigInteger)

    api_keys: Mapped[list[ApiKey]] = relationship(back_populates="user")


class ApiKey(HasId, Base):
    """An API key: only its lookup prefix and a SHA-256 hash of the whole key are stored."""

    __tablename__ = "api_keys"

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship(back_populates="api_keys")


class WebSession(HasId, Base):
    """A browser's sign-in, made from an API key: only a SHA-256 hash of its cookie's token is stored. It ends at
    `expires_at`, when it is deleted (sign-out), and as soon as its key is revoked or its user disabled."""

    __tablename__ = "web_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    api_key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)

    user: Mapped[User] = relationship()
    api_key: Mapped[ApiKey] = relationship()


class Dataset(HasId, Base):
    """An uploaded labelled dataset; its files live in the blob store under `blob_key`."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_datasets_owner_id_name"),)

    owner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    modality: Mapped[Modality] = mapped_column(portable_enum(Modality))
    classes: Mapped[list[str]] = mapped_column(JSON, default=list)
    class_counts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    sample_count: Mapped[int] = mapped_column(Integer, default=0)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    profile: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checksum: Mapped[str] = mapped_column(String(64))
    blob_key: Mapped[str] = mapped_column(String(512))
    format: Mapped[str] = mapped_column(String(16), default="")
    filename: Mapped[str] = mapped_column(String(255), default="")
    status: Mapped[DatasetStatus] = mapped_column(portable_enum(DatasetStatus), default=DatasetStatus.UPLOADED)
    error: Mapped[str | None] = mapped_column(Text)


class Job(HasId, Base):
    """A synthesis run on one dataset under a device-time budget."""

    __tablename__ = "jobs"

    owner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # SET NULL: deleting a dataset (its data) keeps the finished jobs and models trained on it
    dataset_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"), index=True)
    budget_tier: Mapped[BudgetTier] = mapped_column(portable_enum(BudgetTier))
    budget_seconds: Mapped[int] = mapped_column(Integer)
    budget_epochs: Mapped[int | None] = mapped_column(Integer)  # reproducible mode: a budget of training epochs
    seed: Mapped[int] = mapped_column(Integer, default=0)
    constraints: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    tolerance: Mapped[float] = mapped_column(Float, default=DEFAULT_TOLERANCE)  # compression's accuracy loss
    state: Mapped[JobState] = mapped_column(portable_enum(JobState), default=JobState.QUEUED, index=True)
    stage: Mapped[str | None] = mapped_column(String(64))
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    # "device-seconds": the wall-clock seconds of the worker process that ran the job (its attempts added), which
    # holds the device for that long, plus those of the worker processes that ran its search trials (`trial_seconds`,
    # `store.metering`); not a measurement of the device itself
    device_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    trial_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    queue: Mapped[str] = mapped_column(String(64), default="cpu")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # when the reaper last published the job's task again (`store.outbox`); None: only the API's publish at creation
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    events: Mapped[list[JobEvent]] = relationship(back_populates="job", order_by="JobEvent.seq")


class JobEvent(Base):
    """One entry of a job's append-only log; rows are never updated or deleted."""

    __tablename__ = "job_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    job: Mapped[Job] = relationship(back_populates="events")


class Candidate(HasId, Base):
    """An architecture the search proposed for a job, with what training it measured and cost. ``genome`` is the
    search's candidate (`synthesis.space.Candidate.to_dict`: id, origin, arch, hparams), stored in the column
    ``spec`` (its name before it was called what it holds)."""

    __tablename__ = "candidates"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    genome: Mapped[dict[str, Any]] = mapped_column("spec", JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cost: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[CandidateStatus] = mapped_column(portable_enum(CandidateStatus), default=CandidateStatus.PROPOSED)


class TrialTask(HasId, Base):
    """One search trial of a job's attempt that runs as a sub-task on another worker: the request the search
    sent, which worker took it, and its outcome (curve, status, reason, cost); its weights, when it kept any,
    are in the blob store under `weights_key`."""

    __tablename__ = "trial_tasks"
    __table_args__ = (UniqueConstraint("job_id", "attempt", "trial_index", name="uq_trial_tasks_job_attempt_index"),)

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    trial_index: Mapped[int] = mapped_column(Integer)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[TrialState] = mapped_column(portable_enum(TrialState), default=TrialState.QUEUED)
    worker: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # `synthesis.executor.TrialOutcome.to_dict`
    weights_key: Mapped[str | None] = mapped_column(String(512))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # the wall-clock seconds the worker process that took the trial spent on it, charged to the job as they pass
    # (`store.metering.charge_trial`); None until a worker took it
    device_seconds: Mapped[float | None] = mapped_column(Float)


class TrainedModel(HasId, Base):
    """A trained network a job produced: spec, weights, ONNX export, preprocessing and metrics.

    A job has at most one model per `variant` (VARIANTS), so a redelivered job never duplicates one. The weights
    of a "dense" model are safetensors; those of a "compressed" one the compressed artifact (`core.artifact`,
    its length the model's bytes), and its metrics hold the compression's before / after figures.
    """

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("job_id", "variant", name="uq_models_job_id_variant"),)

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    candidate_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("candidates.id", ondelete="SET NULL"))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    variant: Mapped[str] = mapped_column(String(32), default="dense")
    weights: Mapped[bytes] = mapped_column(LargeBinary)
    onnx: Mapped[bytes] = mapped_column(LargeBinary)
    classes: Mapped[list[str]] = mapped_column(JSON, default=list)
    preprocessing: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    param_count: Mapped[int] = mapped_column(BigInteger)
    weights_bytes: Mapped[int] = mapped_column(BigInteger)
    # the layers with their output shapes, as the engine computed them (`core.analysis.architecture`); None for the
    # models saved before it was recorded
    architecture: Mapped[dict[str, Any] | None] = mapped_column(JSON)
