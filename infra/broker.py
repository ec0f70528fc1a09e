"""The task broker's configuration and task names, shared by the API (which sends) and the workers (which run).

Tasks are sent by name (the API never imports the workers), after the job row is committed. References:
Celery task guide, https://docs.celeryq.dev/en/stable/userguide/tasks.html (acks_late, reject_on_worker_lost).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import OperationalError

from domain.errors import Unavailable
from domain.rules import MAX_BUDGET_SECONDS
from infra.settings import Settings

SYNTHESIZE = "netsynth.synthesize"
"""Name of the task that runs one job: `synthesize(job_id: str)`."""

TRIAL = "netsynth.trial"
"""Name of the task that trains one search trial for a job running elsewhere: `trial(trial_task_id: str)`."""

EXPLAIN = "netsynth.explain"
"""Name of the task that explains one input with a model: `explain(explanation_id: str)`."""
EXPLAIN_SECONDS = 300
"""Soft time limit of an explain task (one input)."""
EXPLAIN_HARD_SECONDS = EXPLAIN_SECONDS + 60
"""Hard time limit of an explain task: past it the pool process is killed (the task is acknowledged, not redelivered);
also the device-seconds a queued or running explanation holds of its owner's quota, on top of what it spent."""

QUEUES = ("cpu", "gpu", "explain")
"""The queues workers serve (and /metrics shows the depth of): jobs go to `Settings.default_queue`, explanations to
their own (`Settings.explain_queue`, default "explain"), so that neither waits behind the other; a worker names the
ones it serves."""

_FILESYSTEM = "filesystem://"


class QueuedJob(Protocol):
    """What sending a job's task reads of it (a `store.models.Job` row): its id, queue and budget."""

    @property
    def id(self) -> object: ...

    @property
    def queue(self) -> str: ...

    @property
    def budget_seconds(self) -> float: ...


def is_redis(broker_url: str) -> bool:
    """Whether `broker_url` is a Redis broker (which rate limits and queue-depth metrics then use too)."""
    return broker_url.startswith(("redis://", "rediss://"))


def filesystem_dir(broker_url: str) -> Path | None:
    """The folder of a `filesystem://PATH` broker URL, or None for any other broker."""
    if not broker_url.startswith(_FILESYSTEM):
        return None
    return Path(broker_url.removeprefix(_FILESYSTEM) or "./var/broker")


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings of both ends: late acks, requeue on worker loss, one prefetched task, JSON only."""
    config: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 5,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": settings.default_queue,
        "task_create_missing_queues": True,
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": settings.worker_devices,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
    }
    folder = filesystem_dir(settings.broker_url)
    if folder is not None:
        queue_dir = folder.resolve()
        queue_dir.mkdir(parents=True, exist_ok=True)
        (queue_dir / "processed").mkdir(exist_ok=True)
        config["broker_url"] = "filesystem://"
        config["broker_transport_options"] = {
            "data_folder_in": str(queue_dir),
            "data_folder_out": str(queue_dir),
            "processed_folder": str(queue_dir / "processed"),
            "store_processed": False,
            "polling_interval": settings.broker_poll_seconds,
        }
    elif is_redis(settings.broker_url):
        config["broker_transport_options"] = {"visibility_timeout": visibility_timeout(settings)}
    return config


def visibility_timeout(settings: Settings) -> int:
    """Seconds Redis waits for a task's acknowledgement before it delivers the task again: past the hard time limit
    of the largest budget a job may have (a bare budget or a tier), so a running job is never redelivered while its
    worker lives. A job whose worker died is found by its lease instead (`store.leases.abandoned`), in a minute,
    and a redelivered copy of a job another live worker runs waits for that worker's lease (`store.leases.claim`)."""
    tiers = (settings.tier_low_seconds, settings.tier_medium_seconds, settings.tier_high_seconds)
    return int(time_limits(max(MAX_BUDGET_SECONDS, *tiers))[1]) + 60


def time_limits(budget_seconds: float) -> tuple[float, float]:
    """Soft and hard time limits of a job's task: the budget with 10 % + 60 s of grace, then 60 s more."""
    soft = budget_seconds * 1.1 + 60
    return soft, soft + 60


def enqueue_synthesize(sender: Celery, job: QueuedJob) -> None:
    """Publish `synthesize(job.id)` to the job's queue with time limits from its budget; call after the commit.

    Raises Unavailable when the broker does not answer.
    """
    soft, hard = time_limits(job.budget_seconds)
    _publish(sender, SYNTHESIZE, str(job.id), queue=job.queue, soft_time_limit=soft, time_limit=hard)


def _publish(sender: Celery, name: str, arg: str, **options: Any) -> None:
    """Send task `name`(`arg`); Unavailable when the broker does not answer."""
    try:
        sender.send_task(name, args=[arg], **options)
    except (OperationalError, OSError) as exc:
        raise Unavailable(f"the task broker does not answer: {exc}") from exc


def enqueue_trial(sender: Celery, trial_task_id: str, queue: str, seconds: float) -> None:
    """Publish `trial(trial_task_id)` to `queue`, with time limits for a trial of at most `seconds`."""
    soft = int(seconds) + 60
    sender.send_task(TRIAL, args=[trial_task_id], queue=queue, soft_time_limit=soft, time_limit=soft + 60)


def enqueue_explain(sender: Celery, explanation_id: str, queue: str) -> None:
    """Publish `explain(explanation_id)` to `queue` (`Settings.explain_queue`); call after the commit.

    Raises Unavailable when the broker does not answer.
    """
    _publish(sender, EXPLAIN, explanation_id, queue=queue, soft_time_limit=EXPLAIN_SECONDS,
             time_limit=EXPLAIN_HARD_SECONDS)
