"""`/jobs/{id}/candidates` and `/jobs/{id}/pareto`: a job's search log and the Pareto front of its candidates."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import select

from api.deps import CurrentUser, SessionDep
from api.openapi import ProblemRoute, problems
from api.routes.jobs import NO_JOB, owned_job
from store.models import Candidate, SearchResult

router = APIRouter(route_class=ProblemRoute, prefix="/jobs", tags=["jobs"])


class CandidateOut(BaseModel):
    """One search-log entry: genome, learning curve and accuracies, cost, status and why."""

    id: uuid.UUID
    genome: dict[str, Any]
    metrics: dict[str, Any]
    cost: dict[str, Any]
    status: str


@router.get("/{job_id}/candidates", responses=problems(NO_JOB))
def list_candidates(job_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> list[CandidateOut]:
    """Every candidate the job's search proposed, in the order it tried them (empty until the job ends)."""
    job = owned_job(session, user, job_id)
    rows = session.scalars(select(Candidate).where(Candidate.job_id == job.id))
    ordered = sorted(rows, key=lambda c: int(c.cost.get("index", 0)))
    return [CandidateOut(id=c.id, genome=c.genome, metrics=c.metrics, cost=c.cost, status=c.status.value)
            for c in ordered]


@router.get("/{job_id}/pareto", responses=problems(NO_JOB))
def read_pareto(job_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> list[dict[str, Any]]:
    """The Pareto front of accuracy against parameters and latency over the job's candidates (and its model)."""
    job = owned_job(session, user, job_id)
    found = session.scalars(select(SearchResult).where(SearchResult.job_id == job.id)).first()
    return list(found.pareto) if found is not None else []
