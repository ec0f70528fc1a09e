"""Sending tasks to the workers by name (the API never imports the workers' code, nor JAX)."""

from __future__ import annotations

from celery import Celery

from infra.broker import celery_config, enqueue_explain, enqueue_synthesize
from infra.settings import Settings

__all__ = ["enqueue_explain", "enqueue_synthesize", "make_sender"]


def make_sender(settings: Settings) -> Celery:
    """A Celery client configured like the workers, used only to publish tasks."""
    return Celery("netsynth-api", config_source=celery_config(settings), set_as_current=False)
