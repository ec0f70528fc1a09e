"""Small builders for rows the tests need (the store's, the API's and the workers' tests share them)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.jobs import transition
from store.models import (
    BudgetTier,
    Dataset,
    DatasetStatus,
    ExplanationRequest,
    Job,
    JobState,
    Modality,
    TrainedModel,
    User,
)


def make_user(session: Session, email: str | None = None) -> User:
    user = User(email=email or f"{uuid.uuid4().hex[:8]}@example.org", display_name="Ada")
    session.add(user)
    session.flush()
    return user


def make_dataset(session: Session, owner: User, name: str = "digits") -> Dataset:
    ds = Dataset(
        owner_id=owner.id, name=name, modality=Modality.IMAGE, classes=["0", "1"], class_counts={"0": 10, "1": 12},
        sample_count=22, size_bytes=1234, profile={"shape": [28, 28, 1]}, checksum="ab" * 32, blob_key="ds/digits",
    )
    session.add(ds)
    session.flush()
    return ds


def ready_dataset(factory: sessionmaker[Session], owner: User, sample_count: int | None = None,
                  status: DatasetStatus = DatasetStatus.READY) -> uuid.UUID:
    """A committed dataset of `owner` with a fresh name, in `status` (ready), of `sample_count` samples (22)."""
    with session_scope(factory) as s:
        ds = make_dataset(s, owner, name=f"ds-{uuid.uuid4().hex[:6]}")
        if sample_count is not None:
            ds.sample_count = sample_count
        ds.status = status
        return ds.id


def make_job(session: Session, owner: User | None = None) -> Job:
    owner = owner or make_user(session)
    ds = make_dataset(session, owner, name=f"ds-{uuid.uuid4().hex[:6]}")
    job = Job(owner_id=owner.id, dataset_id=ds.id, budget_tier=BudgetTier.LOW, budget_seconds=600,
              constraints={"max_params": 100_000})
    session.add(job)
    session.flush()
    return job


def committed_job(factory: sessionmaker[Session], owner: User | None = None) -> Job:
    """`make_job`, committed."""
    with session_scope(factory) as s:
        return make_job(s, owner)


def walk_job(job: Job, state: JobState, error: str | None = None) -> None:
    """Move a queued `job` to `state` through the state machine (running first, unless it is cancelled before it
    starts); a failed job fails with `error`."""
    path = {JobState.QUEUED: [], JobState.RUNNING: [JobState.RUNNING],
            JobState.CANCELLED: [JobState.CANCELLED]}.get(state, [JobState.RUNNING, state])
    for step in path:
        transition(job, step, error=error if step is JobState.FAILED else None)


def make_model(session: Session, owner: User | None = None, **fields: Any) -> TrainedModel:
    """A trained model of a new job of `owner` (a new user): tiny stand-ins for its spec, weights and graph, the
    `fields` given set."""
    model = TrainedModel(job_id=make_job(session, owner).id, spec={}, weights=b"w", onnx=b"o", param_count=1,
                         weights_bytes=1, **fields)
    session.add(model)
    session.flush()
    return model


def explanation_content(row: ExplanationRequest) -> dict[str, Any]:
    """An explanation request as the JSON `reports.content` held before requests had their own table (migration
    0009): state, method and input, and whichever of text, attribution, overlay, reason and error it has."""
    content: dict[str, Any] = {"state": row.state.value, "method": row.method, "input": row.input}
    answers = {"text": row.text, "attribution": row.attribution, "reason": row.reason, "error": row.error}
    content.update({k: v for k, v in answers.items() if v is not None})
    if row.overlay is not None:
        content["overlay"] = "overlay.png"
    return content
