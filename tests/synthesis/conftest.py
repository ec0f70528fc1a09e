"""What the synthesis tests share: a fixed latency model and a tiny digits task."""

from __future__ import annotations

import numpy as np
import pytest

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
