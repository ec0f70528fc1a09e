"""Jobs for the end-to-end tests: submitted through a real API server, looked at in the database."""

from __future__ import annotations

import uuid

import httpx
from sqlalchemy import select

from infra.settings import Settings
from store.db import make_engine, make_session_factory
from store.jobs import TERMINAL
from store.models import Job, JobEvent, TrainedModel
from tests.workers.conftest import Digits, Keys
from tests.workers.service import ApiServer

V1 = "/api/v1"


class Db:
    """Read-only looks at a job's row, events and models."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)

    def job(self, job_id: uuid.UUID) -> Job:
        with self.factory() as s:
            return s.get_one(Job, job_id)

    def kinds(self, job_id: uuid.UUID) -> list[str]:
        with self.factory() as s:
            return list(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))

    def events(self, job_id: uuid.UUID, kind: str) -> list[dict[str, object]]:
        """The payloads of the job's events of one kind, in order."""
        with self.factory() as s:
            query = select(JobEvent.payload).where(JobEvent.job_id == job_id, JobEvent.kind == kind)
            return list(s.scalars(query.order_by(JobEvent.seq)))

    def models(self, job_id: uuid.UUID) -> list[str]:
        """The variants of the job's models, sorted."""
        with self.factory() as s:
            return sorted(s.scalars(select(TrainedModel.variant).where(TrainedModel.job_id == job_id)))

    def ended(self, job_id: uuid.UUID) -> Job | None:
        job = self.job(job_id)
        return job if job.state in TERMINAL else None


def submit(settings: Settings, digits: Digits, keys: Keys, budget: int, name: str = "digits") -> uuid.UUID:
    """Upload the digits (as dataset `name`) through a real API server and submit a job of `budget` seconds on them
    as alice."""
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            r = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)},
                            data={"name": name})
            assert r.status_code == 201, r.text
            dataset = r.json()
        r = client.post(f"{V1}/jobs", headers=keys.alice, json={"dataset_id": dataset["id"], "budget": budget})
        assert r.status_code == 201, r.text
        return uuid.UUID(r.json()["id"])
