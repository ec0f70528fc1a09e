"""`/jobs`: submit a synthesis job on a ready dataset, follow it, cancel it, read its event log.

Every route is scoped to the caller: another user's job or dataset answers 404 exactly like a missing one.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from celery import Celery
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import TypeAdapter
from sqlalchemy import Row, bindparam, case, select
from sqlalchemy.orm import Session, sessionmaker

from api.deps import (
    BearerDep,
    CookieDep,
    CurrentUser,
    SenderDep,
    SessionDep,
    SettingsDep,
    authenticates,
    credential_of,
    get_current_user,
)
from api.events import EVENT_STREAM, JSON, MAX_SEQ, event_stream, prefers_json
from api.openapi import ProblemRoute, problems
from api.routes.datasets import owned_dataset
from api.schemas.jobs import BudgetSeconds, JobCreate, JobEventOut, JobModel, JobOut, NamedBudget
from api.tasks import enqueue_synthesize
from domain.errors import Conflict, InvalidInput, NotFound, QuotaExceeded, Unavailable
from domain.rules import DEFAULT_TOLERANCE, tier_for
from infra.settings import Settings
from store.db import read_scope
from store.jobs import append_event, events_since, transition
from store.leases import request_cancel
from store.models import VARIANTS, BudgetTier, DatasetStatus, Job, JobState, TrainedModel, User
from store.quotas import check_job

router = APIRouter(route_class=ProblemRoute, prefix="/jobs", tags=["jobs"])

BROKER_DOWN = "the task broker did not answer; resubmit the job"
"""The error a job is failed with when its task could not be sent (the broker did not answer)."""
MAX_OFFSET = 2**31 - 1
_EVENTS = TypeAdapter(list[JobEventOut])
_EVENT_SCHEMA = JobEventOut.model_json_schema()


def owned_job(session: Session, user: User, job_id: uuid.UUID, *, lock: bool = False) -> Job:
    """The user's job `job_id` (row-locked when `lock`); NotFound for a missing one and for another user's alike."""
    query = select(Job).where(Job.id == job_id, Job.owner_id == user.id)
    job = session.scalars(query.with_for_update() if lock else query).first()
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def _budget(budget: NamedBudget | BudgetSeconds | None, sample_count: int,
            settings: Settings) -> tuple[BudgetTier, int]:
    """The tier and device-seconds of a requested budget (None: the tier the dataset's size calls for)."""
    if isinstance(budget, int):
        return BudgetTier.CUSTOM, budget
    tier = BudgetTier(tier_for(sample_count) if budget is None else budget)
    return tier, settings.tier_seconds(tier.value)


_VARIANT_ORDER = (case({v: i for i, v in enumerate(VARIANTS)}, value=TrainedModel.variant, else_=len(VARIANTS)),
                  TrainedModel.variant)
"""A job's models in the order they are listed: dense first (VARIANTS' order)."""


def _models(session: Session, jobs: list[Job]) -> dict[uuid.UUID, list[JobModel]]:
    """Each job's trained models, dense first (VARIANTS' order)."""
    found: dict[uuid.UUID, list[JobModel]] = {job.id: [] for job in jobs}
    if jobs:
        rows = session.execute(select(TrainedModel.job_id, TrainedModel.id, TrainedModel.variant)
                               .where(TrainedModel.job_id.in_(found)).order_by(*_VARIANT_ORDER))
        for job_id, model_id, variant in rows:
            found[job_id].append(JobModel(id=model_id, variant=variant))
    return found


_OUT_COLUMNS = (Job.id, Job.dataset_id, Job.budget_tier, Job.budget_seconds, Job.budget_epochs, Job.seed,
                Job.constraints, Job.tolerance, Job.queue, Job.state, Job.stage, Job.progress, Job.device_seconds,
                Job.error, Job.attempts, Job.cancel_requested_at, Job.created_at, Job.started_at, Job.finished_at)
"""The columns `_out` reads: a row of them serves as well as a Job."""


def _out(job: Job | Row[Any], models: list[JobModel]) -> JobOut:
    return JobOut(
        id=job.id, dataset_id=job.dataset_id, budget_tier=job.budget_tier, budget_seconds=job.budget_seconds,
        budget_epochs=job.budget_epochs, seed=job.seed, constraints=job.constraints, tolerance=job.tolerance,
        queue=job.queue, state=job.state, stage=job.stage, progress=job.progress,
        device_seconds=job.device_seconds, error=job.error, attempts=job.attempts,
        cancel_requested=job.cancel_requested_at is not None, created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, model_ids=[m.id for m in models], models=models,
    )


def _enqueue(session: Session, sender: Celery, job: Job) -> None:
    """Publish the committed job; when the broker does not answer, fail the job (never leave it queued) and raise."""
    try:
        enqueue_synthesize(sender, job)
    except Unavailable:
        session.refresh(job, with_for_update=True)
        if job.state is JobState.QUEUED:
            transition(job, JobState.FAILED, error=BROKER_DOWN)
            append_event(session, job, "failed", {"error": BROKER_DOWN})
        session.commit()
        raise


NO_JOB: dict[type[Exception], str] = {NotFound: "No such job of the caller's."}


@router.post("", status_code=201, responses=problems({
    NotFound: "No such dataset of the caller's.",
    Conflict: "The dataset is not ready.",
    InvalidInput: "Both a time budget and an epoch budget were given.",
    Unavailable: "The task broker did not answer: the job was marked failed.",
    QuotaExceeded: "Too many active jobs (`quota-active-jobs`), or the budget does not fit in the caller's "
                   "device-seconds of the last 30 days (`quota-device-seconds`): `detail` says what would free it.",
}))
def create_job(body: JobCreate, user: CurrentUser, session: SessionDep, settings: SettingsDep, sender: SenderDep,
               request: Request, response: Response) -> JobOut:
    """Queue a synthesis job on one of the caller's ready datasets."""
    dataset = owned_dataset(session, user, body.dataset_id)
    if dataset.status != DatasetStatus.READY:
        raise Conflict(f"dataset {dataset.id} is {dataset.status.value}, not ready")
    tier, seconds = _budget(body.budget, dataset.sample_count, settings)
    constraints = body.constraints.model_dump(exclude_none=True) if body.constraints else {}
    if body.epochs is not None and body.budget is not None:
        raise InvalidInput("give a budget in time ('budget') or in epochs ('epochs'), not both")
    check_job(session, user, settings, seconds)
    job = Job(owner_id=user.id, dataset_id=dataset.id, budget_tier=tier, budget_seconds=seconds,
              budget_epochs=body.epochs, seed=body.seed, constraints=constraints,
              tolerance=DEFAULT_TOLERANCE if body.tolerance is None else body.tolerance,
              queue=body.queue or settings.default_queue, state=JobState.QUEUED)
    session.add(job)
    session.flush()
    append_event(session, job, "queued", {"budget_tier": tier.value, "budget_seconds": seconds})
    session.commit()  # the worker must find the row: publish only after it is committed
    _enqueue(session, sender, job)
    response.headers["Location"] = request.app.url_path_for("read_job", job_id=str(job.id))
    return _out(job, [])


@router.get("")
def list_jobs(user: CurrentUser, session: SessionDep,
              limit: Annotated[int, Query(ge=1, le=200)] = 50,
              offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
              state: JobState | None = None, dataset_id: uuid.UUID | None = None) -> list[JobOut]:
    """The caller's jobs, newest first, optionally only those in `state` or on `dataset_id`."""
    query = select(Job).where(Job.owner_id == user.id)
    if state is not None:
        query = query.where(Job.state == state)
    if dataset_id is not None:
        query = query.where(Job.dataset_id == dataset_id)
    jobs = list(session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit).offset(offset)))
    models = _models(session, jobs)
    return [_out(job, models[job.id]) for job in jobs]


_JOB_AND_MODELS = (
    select(*_OUT_COLUMNS, TrainedModel.id.label("model_id"), TrainedModel.variant.label("model_variant"))
    .outerjoin(TrainedModel, TrainedModel.job_id == Job.id)
    .where(Job.id == bindparam("job_id"), Job.owner_id == bindparam("owner_id"))
    .order_by(*_VARIANT_ORDER))
"""A job (if the owner's) with each of its models (none: one row with NULLs), dense first: plain rows, which cost
less to read than ORM objects."""


@router.get("/{job_id}", response_model=JobOut, responses=problems(NO_JOB))
@authenticates
async def read_job(job_id: uuid.UUID, request: Request, credentials: BearerDep, token: CookieDep) -> Response:
    """One of the caller's jobs."""
    return await run_in_threadpool(_read_job, request, job_id, credentials, token)


def _read_job(request: Request, job_id: uuid.UUID, credentials: HTTPAuthorizationCredentials | None,
              token: str | None) -> Response:
    """The status poll, the API's most frequent request, in one worker thread (the key's check, the read and the
    commit; as dependencies they take three) and one statement built once, its answer serialised here (FastAPI
    would validate the JobOut again, in yet another thread). It only reads: no transaction (`read_scope`)."""
    factory: sessionmaker[Session] = request.app.state.session_factory
    with read_scope(factory) as session:
        user = get_current_user(request, session, credentials, token)
        rows = session.execute(_JOB_AND_MODELS, {"job_id": job_id, "owner_id": user.id}).all()
        if not rows:
            raise NotFound(f"no job {job_id}")
    models = [JobModel(id=row.model_id, variant=row.model_variant) for row in rows if row.model_id is not None]
    return Response(_out(rows[0], models).model_dump_json(by_alias=True), media_type=JSON)


@router.post("/{job_id}/cancel", responses=problems({**NO_JOB, Conflict: "The job already ended."}))
def cancel_job(job_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> JobOut:
    """Cancel a queued job now, or ask a running job's worker to stop (`cancel_requested`); idempotent."""
    job = owned_job(session, user, job_id, lock=True)
    if job.state in (JobState.SUCCEEDED, JobState.FAILED):
        raise Conflict(f"job already {job.state.value}")
    request_cancel(session, job)
    session.flush()
    return _out(job, _models(session, [job])[job.id])


@router.get(
    "/{job_id}/events",
    response_model=None,
    responses={
        200: {
            "description": "Server-Sent Events, or the events so far as a JSON list when `Accept` prefers JSON.",
            "content": {EVENT_STREAM: {}, JSON: {"schema": {"type": "array", "items": _EVENT_SCHEMA}}},
        },
        **problems(NO_JOB),
    },
)
def job_events(job_id: uuid.UUID, user: CurrentUser, session: SessionDep, request: Request,
               after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Only events with a later seq.")] = 0,
               last_event_id: Annotated[int | None, Header(ge=0, le=MAX_SEQ)] = None,
               accept: Annotated[str | None, Header()] = None) -> Response:
    """The job's events after `after` (or `Last-Event-ID`): live as SSE until the job ends, or as JSON."""
    job = owned_job(session, user, job_id)
    after = max(after, last_event_id or 0)
    if prefers_json(accept):
        events = [JobEventOut.model_validate(e) for e in events_since(session, job, after)]
        return Response(_EVENTS.dump_json(events), media_type=JSON)
    factory: sessionmaker[Session] = request.app.state.session_factory
    return event_stream(factory, job.id, after, credential_of(request))
