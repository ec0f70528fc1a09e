"""Small builders for rows the tests need."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from store.models import BudgetTier, Dataset, Job, Modality, User


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


def make_job(session: Session, owner: User | None = None) -> Job:
    owner = owner or make_user(session)
    ds = make_dataset(session, owner, name=f"ds-{uuid.uuid4().hex[:6]}")
    job = Job(owner_id=owner.id, dataset_id=ds.id, budget_tier=BudgetTier.LOW, budget_seconds=600,
              constraints={"max_params": 100_000})
    session.add(job)
    session.flush()
    return job
