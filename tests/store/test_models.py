"""Every table round-trips its values through a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import UTC

import pytest
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.models import (
    BudgetTier,
    Candidate,
    CandidateStatus,
    Dataset,
    DatasetStatus,
    Job,
    JobState,
    Report,
    ReportImage,
    TrainedModel,
    User,
)
from tests.store.factories import make_dataset, make_job, make_user


def test_dataset_round_trips_and_defaults(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        owner = make_user(s)
        ds_id = make_dataset(s, owner).id
    with factory() as s:
        ds = s.get_one(Dataset, ds_id)
        assert ds.classes == ["0", "1"]
        assert ds.class_counts == {"0": 10, "1": 12}
        assert ds.profile == {"shape": [28, 28, 1]}
        assert ds.status is DatasetStatus.UPLOADED
        assert ds.created_at.tzinfo is not None and ds.created_at.utcoffset() == UTC.utcoffset(None)
        assert isinstance(ds.id, uuid.UUID)


def test_job_defaults_are_queued_with_nothing_spent(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        job_id = make_job(s).id
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert job.state is JobState.QUEUED
        assert (job.progress, job.device_seconds, job.stage, job.error) == (0.0, 0.0, None, None)
        assert job.constraints == {"max_params": 100_000}


def test_candidate_model_and_report_with_bytes(factory: sessionmaker[Session]) -> None:
    weights = bytes(range(256)) * 40
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\xff" * 100
    with session_scope(factory) as s:
        job = make_job(s)
        cand = Candidate(job_id=job.id, genome={"layers": [{"op": "dense", "units": 8}]}, cost={"device_seconds": 1.5})
        s.add(cand)
        s.flush()
        model = TrainedModel(job_id=job.id, candidate_id=cand.id, spec=cand.genome, weights=weights, onnx=b"onnx",
                             metrics={"accuracy": 0.93}, param_count=1234, weights_bytes=len(weights))
        s.add(model)
        s.flush()
        report = Report(job_id=job.id, model_id=model.id, content={"confusion": [[1, 0], [0, 1]]})
        report.images.append(ReportImage(name="confusion.png", data=png))
        s.add(report)
        s.flush()
        model_id, report_id = model.id, report.id
    with factory() as s:
        model = s.get_one(TrainedModel, model_id)
        assert model.weights == weights
        assert model.metrics == {"accuracy": 0.93}
        cand_row = s.scalars(select(Candidate).where(Candidate.id == model.candidate_id)).one()
        assert cand_row.status is CandidateStatus.PROPOSED
        report = s.get_one(Report, report_id)
        assert report.content == {"confusion": [[1, 0], [0, 1]]}
        assert [(i.name, i.media_type, i.data) for i in report.images] == [("confusion.png", "image/png", png)]


def test_foreign_key_rejects_unknown_owner_id(factory: sessionmaker[Session]) -> None:
    with pytest.raises(IntegrityError), session_scope(factory) as s:
        s.add(Job(owner_id=uuid.uuid4(), dataset_id=uuid.uuid4(), budget_tier=BudgetTier.LOW, budget_seconds=1))
        s.flush()


def test_email_and_dataset_name_are_unique(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        owner = make_user(s, "a@example.org")
        make_dataset(s, owner, "digits")
    with pytest.raises(IntegrityError), session_scope(factory) as s:
        make_user(s, "a@example.org")
    with pytest.raises(IntegrityError), session_scope(factory) as s:
        make_dataset(s, s.scalars(select(User)).one(), "digits")


def test_deleting_a_user_cascades_to_api_keys_in_the_database(factory: sessionmaker[Session]) -> None:
    from store.apikeys import create_api_key
    from store.models import ApiKey

    with session_scope(factory) as s:
        user = make_user(s)
        create_api_key(s, user)
        user_id = user.id
    with session_scope(factory) as s:
        s.execute(delete(User).where(User.id == user_id))
    with factory() as s:
        assert s.scalars(select(ApiKey)).all() == []
