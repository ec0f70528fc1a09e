"""Admin operations on users: find one by email, list them all, disable one (its keys stop at once and its jobs are
cancelled) or enable it again; and `lock_user`, which makes checks of one user's limits run one after the other."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.errors import NotFound
from store.base import utcnow
from store.db import hold_write_lock
from store.jobs import TERMINAL
from store.leases import request_cancel
from store.models import Job, JobState, User


@dataclass(frozen=True)
class Stopped:
    """What disabling a user did to its jobs: queued ones cancelled, running ones asked to stop."""

    cancelled: int
    stopping: int


def user_by_email(session: Session, email: str, *, lock: bool = False) -> User:
    """The user with `email` (row-locked when `lock`); NotFound when there is none."""
    query = select(User).where(User.email == email.strip())
    user = session.scalars(query.with_for_update() if lock else query).first()
    if user is None:
        raise NotFound(f"no user with email {email!r}")
    return user


def lock_user(session: Session, user: User) -> None:
    """Until the transaction ends, make any other transaction that locks `user` wait: on PostgreSQL by the user's row
    lock, on SQLite, which locks no rows, by the database's write lock (`store.db.hold_write_lock`). What the caller
    counts of the user's rows after this cannot change until it commits: a check of a limit and the insert it allows
    are one step."""
    hold_write_lock(session)
    session.execute(select(User.id).where(User.id == user.id).with_for_update())


def all_users(session: Session) -> list[User]:
    """Every user, oldest first."""
    return list(session.scalars(select(User).order_by(User.created_at, User.email)))


def disable_user(session: Session, user: User) -> Stopped:
    """Disable `user`: its keys answer 401 from now on, its queued jobs are cancelled and its running ones asked to
    stop. Idempotent: disabling again keeps the first time and stops any job still active."""
    if user.disabled_at is None:
        user.disabled_at = utcnow()
    jobs = list(session.scalars(select(Job).where(Job.owner_id == user.id, Job.state.not_in(TERMINAL))
                                .order_by(Job.created_at).with_for_update()))
    cancelled = stopping = 0
    for job in jobs:
        if job.state is JobState.QUEUED:
            cancelled += 1
        elif job.cancel_requested_at is None:
            stopping += 1
        request_cancel(session, job)
    session.flush()
    return Stopped(cancelled=cancelled, stopping=stopping)


def enable_user(user: User) -> None:
    """Undo `disable_user`: the user's keys that were not deleted work again (its cancelled jobs stay cancelled)."""
    user.disabled_at = None
