"""How a synthesis ended decides the job's state, in one table (`workers.runner.job_state`)."""

from __future__ import annotations

import pytest

from store.models import JobState
from synthesis.progress import Cancelled, Ending, OutOfTime
from workers.runner import job_state


@pytest.mark.parametrize(("stop_reason", "ending"), [
    ("budget", Ending.COMPLETED), ("exhausted", Ending.COMPLETED), (OutOfTime.reason, Ending.DEADLINE),
    (Cancelled.reason, Ending.CANCELLED),
])
def test_a_delivered_synthesis_ends_as_its_stop_reason_says(stop_reason: str, ending: Ending) -> None:
    assert Ending.of(stop_reason) is ending


@pytest.mark.parametrize(("ending", "delivered", "state"), [
    (Ending.COMPLETED, True, JobState.SUCCEEDED),
    (Ending.DEADLINE, True, JobState.SUCCEEDED),  # the best model so far ships
    (Ending.DEADLINE, False, JobState.FAILED),  # nothing had finished training
    (Ending.CANCELLED, True, JobState.CANCELLED),  # with the best model so far
    (Ending.CANCELLED, False, JobState.CANCELLED),
    (Ending.FAILED, False, JobState.FAILED),
])
def test_each_ending_maps_to_one_job_state(ending: Ending, delivered: bool, state: JobState) -> None:
    assert job_state(ending, delivered=delivered) is state
