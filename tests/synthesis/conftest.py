"""What the synthesis tests share: a fixed latency model, a tiny digits task, and its split and search space."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from synthesis.engine import space_info
from synthesis.interface import Task
from synthesis.space import LatencyModel
from tests.datasets import digits_arrays

LATENCY = LatencyModel(ms_per_mmac=0.02, overhead_ms=0.05)
"""Fixed, so runs do not depend on this machine's measured latencies."""


@pytest.fixture(scope="module")
def digits_task() -> Task:
    """450 of scikit-learn's digits: tiny, so a search takes seconds."""
    x, y = digits_arrays()
    keep = np.arange(len(y)) % 4 == 0
    return Task("image", x[keep], y[keep], 10)


@pytest.fixture(scope="module")
def digits() -> tuple[Dataset, Any]:
    """The same 450 digits, the first 360 for training and the rest for validation, and their search space's info."""
    x, y = digits_arrays()
    x, y = x[::4].astype(np.float32), y[::4]
    return Dataset(x[:360], y[:360], x[360:], y[360:]), space_info(Task("image", x, y, 10), np.arange(360))
