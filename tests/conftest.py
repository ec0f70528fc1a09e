"""Test configuration shared by every package's tests.

Two virtual CPU devices are set before JAX loads so that data-parallel code runs sharded in tests;
JAX runs in a strict configuration (no implicit rank promotion), as in Equinox's test suite. Compiled programs
go to a persistent cache in a temporary folder for the session (inherited by the worker processes the tests
start), so a program that many tests compile alike (the same search on the same tiny data, the twin runs of the
reproducibility test) compiles once.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_JAX_CACHE = None if "JAX_COMPILATION_CACHE_DIR" in os.environ else tempfile.mkdtemp(prefix="netsynth-jax-")
if _JAX_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # tiny test programs compile fast but often
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (after the environment above, which JAX reads as it loads)
from hypothesis import settings  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# CI runs the property tests derandomised, so a submission's result does not depend on the draw;
# local runs explore new examples every time.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_unconfigure() -> None:
    """Remove the session's compilation cache."""
    if _JAX_CACHE:
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)
