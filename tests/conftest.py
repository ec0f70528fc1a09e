"""Test configuration shared by every package's tests.

Two virtual CPU devices are set before JAX loads so that data-parallel code runs sharded in tests;
JAX runs in a strict configuration (no implicit rank promotion), as in Equinox's test suite.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
from hypothesis import settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# CI runs the property tests derandomised, so a submission's result does not depend on the draw;
# local runs explore new examples every time.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
