"""The Celery app of the workers: `celery -A workers.app worker` (or `netsynth worker`) runs it.

Each pool process runs one job at a time on one device: the pool has `Settings.worker_devices` processes, and
with `NETSYNTH_PIN_GPUS=1` process i sees only GPU i. JAX is imported in the pool processes only (and XLA's
flags and its persistent compilation cache set before its backend starts), never in the worker's main process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery, signals

from infra.broker import celery_config
from infra.logs import configure_worker_logging
from infra.settings import Settings


def make_app(settings: Settings | None = None) -> Celery:
    """The workers' Celery app on `settings` (read from the environment when omitted), with its tasks."""
    settings = settings or Settings()
    configure_worker_logging(settings.log_format)
    celery = Celery("netsynth", config_source=celery_config(settings))
    celery.conf.include = ["workers.tasks"]
    return celery


def use_cpu_xla_flags() -> None:
    """Add core's XLA:CPU flags to `XLA_FLAGS` (keeping any set already); call before JAX's backend starts."""
    from core.kernels import CPU_XLA_FLAGS  # imports JAX; XLA reads its flags when the backend starts, later

    current = os.environ.get("XLA_FLAGS", "")
    extra = [f for f in CPU_XLA_FLAGS if f.split("=")[0] not in current]
    os.environ["XLA_FLAGS"] = " ".join([current, *extra]).strip()


def use_compile_cache(settings: Settings | None = None) -> Path | None:
    """Keep compiled programs in `NETSYNTH_COMPILE_CACHE` (default `var/jax-cache`; empty or "off": no cache) and
    return that folder; call before the process compiles anything. Left to JAX (None returned) when only the
    default applies and JAX_COMPILATION_CACHE_DIR names a folder of its own."""
    settings = settings or Settings()
    if "compile_cache" not in settings.model_fields_set and os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    from core.compilation import use_cache

    use_cache(settings.compile_cache)
    return settings.compile_cache


@signals.worker_process_init.connect
def _prepare_pool_process(**_kwargs: Any) -> None:
    """Before a pool process imports JAX: the XLA:CPU flags core was tuned with, the persistent compilation cache,
    and one GPU per process."""
    from billiard.process import current_process

    use_cpu_xla_flags()
    use_compile_cache()
    if os.environ.get("NETSYNTH_PIN_GPUS") == "1":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(getattr(current_process(), "index", 0) or 0)


app = make_app()
