"""Sending tasks to the workers by name (the API never imports the workers' code, nor JAX)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from store.broker import SYNTHESIZE, celery_config, time_limits
from store.errors import Unavailable
from store.models import Job
from store.settings import Settings


def make_sender(settings: Settings) -> Celery:
    """A Celery client configured like the workers, used only to publish tasks."""
    return Celery("netsynth-api", config_source=celery_config(settings), set_as_current=False)


def enqueue_synthesize(sender: Celery, job: Job) -> None:
    """Publish `synthesize(job.id)` to the job's queue with time limits from its budget; call after the commit.

    Raises Unavailable when the broker does not answer.
    """
    soft, hard = time_limits(job.budget_seconds)
    options: dict[str, Any] = {"queue": job.queue, "soft_time_limit": soft, "time_limit": hard}
    try:
        sender.send_task(SYNTHESIZE, args=[str(job.id)], **options)
    except (OperationalError, OSError) as exc:
        raise Unavailable(f"the task broker does not answer: {exc}") from exc
