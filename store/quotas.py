"""Per-user quotas: jobs queued or running at once, explanation requests queued or running at once, device-seconds
over 30 days, and bytes stored (datasets and explanation requests).

Each limit is the user's override (set by an admin: `netsynth user quota`) or else the settings' default; active
explanations have the setting only (`NETSYNTH_MAX_ACTIVE_EXPLANATIONS_PER_USER`), apart from active jobs, so that a
user whose jobs run may still explain. Device time is counted for the jobs and explanation requests created in the
last 30 days: what a finished one spent, and what one still queued or running may yet spend (a job its whole
budget; an explanation what it spent plus one attempt's hard time limit). Stored bytes are the datasets' and the
explanation requests' (each its input, and its answer once stored). A check that fails raises QuotaExceeded with a
`reason` and a detail that says what would free the quota; each check first locks the user (`store.users.lock_user`:
the user's row on PostgreSQL, the database's write lock on SQLite), so two requests of one user are checked one after
the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, case, func, select
from sqlalchemy.orm import Session

from domain.errors import QuotaExceeded
from infra.broker import EXPLAIN_HARD_SECONDS
from infra.settings import Settings
from store.base import utcnow
from store.explanations import PENDING
from store.jobs import TERMINAL
from store.models import Dataset, ExplanationRequest, Job, User
from store.users import lock_user

WINDOW = timedelta(days=30)
"""How far back device time counts."""
ACTIVE_JOBS, DEVICE_SECONDS, STORAGE = "quota-active-jobs", "quota-device-seconds", "quota-storage"
ACTIVE_EXPLANATIONS = "quota-active-explanations"


@dataclass(frozen=True)
class Quota:
    """One quota: what is used of it, its limit, and whether the limit is the user's own (an admin's override)."""

    used: int
    limit: int
    overridden: bool

    @property
    def left(self) -> int:
        """What may still be used (0 when the quota is already exceeded, e.g. after its limit was lowered)."""
        return max(0, self.limit - self.used)


@dataclass(frozen=True)
class Usage:
    """A user's three quotas."""

    active_jobs: Quota
    device_seconds: Quota
    storage_bytes: Quota


def _limit(override: int | None, default: int) -> tuple[int, bool]:
    return (default, False) if override is None else (override, True)


def _charges(session: Session, user: User, since: datetime) -> list[tuple[datetime, int, bool]]:
    """(created_at, device-seconds charged, finished) of the user's jobs created since `since` or still active."""
    active = Job.state.not_in(TERMINAL)
    rows = session.execute(select(Job.created_at, Job.device_seconds, Job.budget_seconds, active)
                           .where(Job.owner_id == user.id, (Job.created_at >= since) | active)
                           .order_by(Job.created_at))
    return [(created, round(max(spent, budget) if running else spent), not running)
            for created, spent, budget, running in rows]


def active_jobs(session: Session, user: User, settings: Settings) -> Quota:
    """The user's queued and running jobs against their limit."""
    used = session.scalar(select(func.count()).select_from(Job)
                          .where(Job.owner_id == user.id, Job.state.not_in(TERMINAL))) or 0
    return Quota(used, *_limit(user.quota_active_jobs, settings.max_active_jobs_per_user))


def device_seconds(session: Session, user: User, settings: Settings, now: datetime) -> Quota:
    """The device-seconds the user's jobs and explanation requests of the last 30 days spent or hold, against their
    limit."""
    used = sum(charge for _, charge, _ in _charges(session, user, now - WINDOW))
    used += explanation_seconds(session, user, now - WINDOW)
    return Quota(used, *_limit(user.quota_device_seconds, settings.device_seconds_per_30_days))


def storage_bytes(session: Session, user: User, settings: Settings) -> Quota:
    """The bytes of the user's datasets and explanation requests against their limit."""
    stored = session.scalar(select(func.coalesce(func.sum(Dataset.size_bytes), 0))
                            .where(Dataset.owner_id == user.id)) or 0
    stored += explanation_bytes(session, user)
    return Quota(int(stored), *_limit(user.quota_storage_bytes, settings.storage_bytes_per_user))


def _of_explanations(user: User, *columns: Any) -> Select[Any]:
    """A query of `columns` over the user's explanation requests (theirs through their models' jobs)."""
    return (select(*columns).select_from(ExplanationRequest).join(Job, Job.id == ExplanationRequest.job_id)
            .where(Job.owner_id == user.id))


def explanation_bytes(session: Session, user: User) -> int:
    """The bytes the user's explanation requests hold: inputs, and the answers stored."""
    return int(session.scalar(_of_explanations(user, func.coalesce(func.sum(ExplanationRequest.size_bytes), 0)))
               or 0)


def explanation_seconds(session: Session, user: User, since: datetime) -> int:
    """The device-seconds the user's explanation requests created since `since` (or still pending) spent, each
    still queued or running with one attempt's hard time limit more, which it may yet spend."""
    pending = ExplanationRequest.state.in_(PENDING)
    charged = case((pending, ExplanationRequest.device_seconds + EXPLAIN_HARD_SECONDS),
                   else_=ExplanationRequest.device_seconds)
    query = _of_explanations(user, func.coalesce(func.sum(charged), 0.0)).where(
        (ExplanationRequest.created_at >= since) | pending)
    return round(float(session.scalar(query) or 0.0))


def active_explanations(session: Session, user: User, settings: Settings) -> Quota:
    """The user's queued and running explanation requests against the setting's limit."""
    used = session.scalar(_of_explanations(user, func.count()).where(ExplanationRequest.state.in_(PENDING))) or 0
    return Quota(int(used), settings.max_active_explanations_per_user, False)


def usage(session: Session, user: User, settings: Settings, now: datetime | None = None) -> Usage:
    """What `user` uses of each quota now, against its effective limit."""
    return Usage(active_jobs(session, user, settings), device_seconds(session, user, settings, now or utcnow()),
                 storage_bytes(session, user, settings))


def _frees_at(session: Session, user: User, quota: Quota, needed: int, now: datetime) -> datetime | None:
    """When enough finished jobs' device time leaves the 30-day window for `needed` more seconds to fit."""
    freed = quota.limit - quota.used
    for created, charge, finished in _charges(session, user, now - WINDOW):
        if finished and charge > 0 and created >= now - WINDOW:
            freed += charge
            if freed >= needed:
                return created + WINDOW
    return None


def check_job(session: Session, user: User, settings: Settings, budget_seconds: int,
              now: datetime | None = None) -> None:
    """Raise QuotaExceeded unless `user` may queue one more job with a budget of `budget_seconds`. The caller inserts
    the job in the same transaction: until it ends, another check of the user's waits."""
    now = now or utcnow()
    lock_user(session, user)
    active = active_jobs(session, user, settings)
    if active.used >= active.limit:
        raise QuotaExceeded(ACTIVE_JOBS, f"you have {active.used} queued or running job(s), your limit is "
                            f"{active.limit}: cancel one (POST /api/v1/jobs/{{job_id}}/cancel) or wait for one "
                            "to finish")
    device = device_seconds(session, user, settings, now)
    if budget_seconds > device.left:
        frees = _frees_at(session, user, device, budget_seconds, now)
        when = f"; or wait until {frees.isoformat(timespec='seconds')}, when older jobs' time leaves the " \
               "30-day window" if frees is not None else ""
        raise QuotaExceeded(DEVICE_SECONDS, f"this job's budget of {budget_seconds} device-seconds does not fit: "
                            f"{device.left} of your {device.limit} per 30 days are left ({device.used} spent or "
                            f"held by queued and running jobs). Ask for a budget of at most {device.left}, or "
                            f"cancel a queued or running job to release what it holds{when}")


def check_storage(session: Session, user: User, settings: Settings, size_bytes: int) -> None:
    """Raise QuotaExceeded unless `user` may store `size_bytes` more bytes of datasets; holds the user's lock
    (`store.users.lock_user`) until the caller's transaction ends, so that the check and the insert it allows are one
    step on both databases."""
    lock_user(session, user)
    storage = storage_bytes(session, user, settings)
    if size_bytes > storage.left:
        if size_bytes > storage.limit:
            what = "it is larger than your whole quota; upload a smaller dataset"
        else:
            what = f"delete datasets or answered explanations to free at least {size_bytes - storage.left} bytes"
        raise QuotaExceeded(STORAGE, f"this upload of {size_bytes} bytes does not fit: your datasets and "
                            f"explanations use {storage.used} of your {storage.limit} bytes; {what}")


def check_explanation(session: Session, user: User, settings: Settings, size_bytes: int,
                      now: datetime | None = None) -> None:
    """Raise QuotaExceeded unless `user` may ask one more explanation whose input takes `size_bytes` bytes: a place
    among their active explanations, one attempt's hard time limit of device-seconds, and the input's bytes."""
    lock_user(session, user)
    active = active_explanations(session, user, settings)
    if active.used >= active.limit:
        raise QuotaExceeded(ACTIVE_EXPLANATIONS, f"you have {active.used} queued or running explanation(s), your "
                            f"limit is {active.limit}: wait for one to be answered (poll its URL), then ask again")
    device = device_seconds(session, user, settings, now or utcnow())
    if device.left < EXPLAIN_HARD_SECONDS:
        raise QuotaExceeded(DEVICE_SECONDS, f"an explanation holds up to {EXPLAIN_HARD_SECONDS} device-seconds "
                            f"until it is answered; {device.left} of your {device.limit} per 30 days are left "
                            f"({device.used} spent or held by queued and running jobs and explanations): cancel a "
                            "queued or running job to release what it holds, or wait for older jobs' and "
                            "explanations' time to leave the 30-day window")
    storage = storage_bytes(session, user, settings)
    if size_bytes > storage.left:
        raise QuotaExceeded(STORAGE, f"this input of {size_bytes} bytes does not fit: your datasets and "
                            f"explanations use {storage.used} of your {storage.limit} bytes; delete datasets "
                            "(DELETE /datasets/{dataset_id}) or answered explanations "
                            "(DELETE /models/{model_id}/explanations/{explanation_id}) to free at least "
                            f"{size_bytes - storage.left} bytes")


QUOTA_COLUMNS = {"active_jobs": "quota_active_jobs", "device_seconds": "quota_device_seconds",
                 "storage_bytes": "quota_storage_bytes"}
"""The quotas an admin may override, and the user's column that holds each override."""


def set_quota(user: User, changes: Mapping[str, int | None]) -> None:
    """Override the user's limits named in `changes` (QUOTA_COLUMNS' keys); None goes back to the default."""
    for name, value in changes.items():
        if name not in QUOTA_COLUMNS:
            raise ValueError(f"no quota {name!r}: one of {', '.join(QUOTA_COLUMNS)}")
        if value is not None and value < 0:
            raise ValueError(f"a quota cannot be negative: {name}={value}")
        setattr(user, QUOTA_COLUMNS[name], value)
