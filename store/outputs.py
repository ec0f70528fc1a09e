"""The tables of what a job leaves beside its models, and of what users ask of those models: each model's
explainability report with its files, the job's search result, and explanation requests."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from store.base import Base, HasId, UTCDateTime, portable_enum


class ExplanationState(enum.StrEnum):
    """Where an explanation request is."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Report(HasId, Base):
    """A model's explainability report: its report.json, and its images and page (`ReportImage`)."""

    __tablename__ = "reports"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    content: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    images: Mapped[list[ReportImage]] = relationship(back_populates="report", cascade="all, delete-orphan")


class ReportImage(Base):
    """One file of a report (a PNG image, or its HTML page), stored as bytes."""

    __tablename__ = "report_images"
    __table_args__ = (UniqueConstraint("report_id", "name", name="uq_report_images_report_id_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    report_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("reports.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    media_type: Mapped[str] = mapped_column(String(64), default="image/png")
    data: Mapped[bytes] = mapped_column(LargeBinary)

    report: Mapped[Report] = relationship(back_populates="images")


class SearchResult(HasId, Base):
    """What a finished job's search leaves beside its candidates: its summary (why it stopped, the split, its
    seconds, trials and compile seconds) and the Pareto front of its candidates and delivered models."""

    __tablename__ = "search_results"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True, unique=True)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    pareto: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)


class ExplanationRequest(HasId, Base):
    """A user's request to explain one input (a text, or an uploaded image) with one of their models by `method`,
    and once a worker has answered it, the attribution (and an image's overlay PNG) or why it failed. The image
    and the overlay load only when read. What it costs its owner (`store.quotas`): its bytes, its device-seconds,
    and while queued or running a place among their active explanations; how its attempts are run and reaped:
    `store.explain_runs`."""

    __tablename__ = "explanation_requests"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    state: Mapped[ExplanationState] = mapped_column(portable_enum(ExplanationState), default=ExplanationState.QUEUED,
                                                    index=True)
    method: Mapped[str] = mapped_column(String(64))
    input: Mapped[str] = mapped_column(String(255))  # the image's file name, or "0": a text is row 0, as in a CSV
    text: Mapped[str | None] = mapped_column(Text)
    image: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)  # as uploaded
    attribution: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    overlay: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    reason: Mapped[str | None] = mapped_column(String(64))  # why it failed, as a slug
    error: Mapped[str | None] = mapped_column(Text)  # why it failed, for people
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # stored: the input, then the answer too
    device_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # its attempts' wall-clock seconds, added up
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # how many times a worker took it
    worker: Mapped[str | None] = mapped_column(String(255))  # the process running its attempt (host:pid:suffix)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # when its last attempt began
    beat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # its running attempt's last heartbeat
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # its task's last publish by a reaper
    erased_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # its owner deleted it: content gone, cost kept
