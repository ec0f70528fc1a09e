"""Compilation: the persistent cache of compiled programs, and a meter of the seconds spent compiling.

:func:`use_cache` points JAX's persistent compilation cache at a folder (or turns it off); programs compiled once
are then read back from disk by later processes, as small as they are (XLA:CPU programs compile in well under JAX's
default threshold of a second, so the thresholds are lifted). :func:`metered` counts, in the calling thread, the
seconds JAX spends tracing, lowering and compiling (or reading back from the cache) the programs it runs, from
JAX's own monitoring events.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import jax
from jax import monitoring

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""XLA's compilation of a lowered program, or its retrieval from the persistent cache."""
COMPILE_EVENTS = (TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT)
"""The duration events whose sum is the seconds a program cost before it first ran."""
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_MISS_EVENT = "/jax/compilation_cache/cache_misses"


def use_cache(path: str | os.PathLike[str] | None) -> None:
    """Keep compiled programs in the folder `path` (created when missing) and read them back from there; `None`
    turns the persistent cache off. Call it before the first compilation of the process: a cache JAX already used
    is reset to take the change."""
    from jax.experimental.compilation_cache import compilation_cache

    settings: dict[str, object] = {"jax_enable_compilation_cache": False}
    if path is not None:
        os.makedirs(path, exist_ok=True)
        settings = {"jax_enable_compilation_cache": True, "jax_compilation_cache_dir": os.fspath(path),
                    "jax_persistent_cache_min_compile_time_secs": 0.0, "jax_persistent_cache_min_entry_size_bytes": -1}
    for name, value in settings.items():
        jax.config.update(name, value)  # type: ignore[no-untyped-call]
    compilation_cache.reset_cache()


@dataclass(eq=False)
class CompileMeter:
    """What compilation cost while a meter was open: seconds (trace, lowering, XLA compilation or retrieval),
    programs compiled by XLA or read from the cache, and the persistent cache's hits and misses."""

    seconds: float = 0.0
    programs: int = 0
    cache_hits: int = 0
    cache_misses: int = 0

    def to_dict(self) -> dict[str, float | int]:
        """The meter as JSON-ready figures."""
        return {"compile_seconds": round(self.seconds, 3), "compiled_programs": self.programs,
                "compile_cache_hits": self.cache_hits, "compile_cache_misses": self.cache_misses}


_local = threading.local()
_registered = False
_lock = threading.Lock()


def _open() -> list[CompileMeter]:
    meters: list[CompileMeter] | None = getattr(_local, "meters", None)
    if meters is None:
        meters = _local.meters = []
    return meters


def _on_duration(event: str, duration_secs: float, **_kwargs: str | int) -> None:
    if event in COMPILE_EVENTS:
        for meter in _open():
            meter.seconds += duration_secs
            meter.programs += event == COMPILE_EVENT


def _on_event(event: str, **_kwargs: str | int) -> None:
    if event in (CACHE_HIT_EVENT, CACHE_MISS_EVENT):
        for meter in _open():
            meter.cache_hits += event == CACHE_HIT_EVENT
            meter.cache_misses += event == CACHE_MISS_EVENT


def _listen() -> None:
    global _registered
    with _lock:
        if not _registered:
            monitoring.register_event_duration_secs_listener(_on_duration)
            monitoring.register_event_listener(_on_event)
            _registered = True


@contextmanager
def metered() -> Iterator[CompileMeter]:
    """A meter of the compilation the calling thread does inside the `with` block (meters nest: an inner block's
    compilation counts in the outer ones too)."""
    _listen()
    meter = CompileMeter()
    meters = _open()
    meters.append(meter)
    try:
        yield meter
    finally:
        meters.remove(meter)
