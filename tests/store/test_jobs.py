"""The job state machine allows exactly the documented moves; the event log is append-only."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy.orm import Session, sessionmaker

from domain.errors import AppendOnly, InvalidTransition
from store.db import session_scope
from store.jobs import TERMINAL, append_event, can_transition, events_since, transition
from store.models import Job, JobEvent, JobState
from tests.store.factories import make_job

LEGAL = {
    (JobState.QUEUED, JobState.RUNNING),
    (JobState.QUEUED, JobState.FAILED),
    (JobState.QUEUED, JobState.CANCELLED),
    (JobState.RUNNING, JobState.SUCCEEDED),
    (JobState.RUNNING, JobState.FAILED),
    (JobState.RUNNING, JobState.CANCELLED),
}


@pytest.mark.parametrize(("current", "new"), list(itertools.product(JobState, JobState)))
def test_transition_allows_exactly_the_legal_moves(current: JobState, new: JobState) -> None:
    job = Job(state=current)
    if (current, new) in LEGAL:
        transition(job, new)
        assert job.state is new
    else:
        with pytest.raises(InvalidTransition) as info:
            transition(job, new)
        assert (info.value.current, info.value.requested) == (current.value, new.value)
        assert job.state is current
    assert can_transition(current, new) == ((current, new) in LEGAL)


def test_terminal_states_are_the_three_outcomes() -> None:
    assert frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}) == TERMINAL


def test_transition_stamps_times_and_error(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        job = make_job(s)
        transition(job, JobState.RUNNING)
        assert job.started_at is not None and job.finished_at is None
        transition(job, JobState.FAILED, error="out of memory")
        job_id = job.id
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert job.state is JobState.FAILED
        assert job.error == "out of memory"
        assert job.finished_at is not None and job.started_at is not None
        assert job.finished_at >= job.started_at


def test_success_completes_progress() -> None:
    job = Job(state=JobState.RUNNING, progress=0.4)
    transition(job, JobState.SUCCEEDED)
    assert job.progress == 1.0


def test_error_message_only_with_failure() -> None:
    job = Job(state=JobState.RUNNING)
    with pytest.raises(ValueError, match="failed"):
        transition(job, JobState.SUCCEEDED, error="nope")
    assert job.state is JobState.RUNNING and job.finished_at is None  # a refused move changes nothing


def test_events_append_in_order_and_page(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        job = make_job(s)
        first = append_event(s, job, "stage", {"stage": "profile"})
        append_event(s, job, "progress", {"progress": 0.5})
        append_event(s, job, "stage", {"stage": "train"})
        job_id, first_seq = job.id, first.seq
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert [e.kind for e in job.events] == ["stage", "progress", "stage"]
        later = events_since(s, job, first_seq)
        assert [e.payload for e in later] == [{"progress": 0.5}, {"stage": "train"}]
        assert events_since(s, job, later[-1].seq) == []


def test_events_cannot_be_updated(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        seq = append_event(s, make_job(s), "stage", {"stage": "profile"}).seq
    with pytest.raises(AppendOnly), session_scope(factory) as s:
        s.get_one(JobEvent, seq).kind = "rewritten"
        s.flush()
    with factory() as s:
        assert s.get_one(JobEvent, seq).kind == "stage"


def test_events_cannot_be_deleted(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        seq = append_event(s, make_job(s), "stage").seq
    with pytest.raises(AppendOnly), session_scope(factory) as s:
        s.delete(s.get_one(JobEvent, seq))
        s.flush()
    with factory() as s:
        assert s.get(JobEvent, seq) is not None


def test_store_offers_no_update_or_delete_for_events() -> None:
    import store.jobs

    public = [n for n in dir(store.jobs) if not n.startswith("_")]
    assert "append_event" in public
    assert not [n for n in public if any(w in n.lower() for w in ("update", "delete", "remove", "edit"))]
