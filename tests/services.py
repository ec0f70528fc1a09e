"""The one rule for a test whose real service (PostgreSQL, Redis, SeaweedFS, Chromium) is not there: skip on a
developer's machine, fail when `CI` is set, where `.ci/run` provides every service (a CI run must never pass with a
service's tests skipped)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Fail with `reason` when CI is set, else skip with it."""
    if os.environ.get("CI"):
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)
