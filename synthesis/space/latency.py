"""A linear latency model: inference time of one example as a function of its multiply-adds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from core.analysis import analyse
from core.spec import Spec


@dataclass(frozen=True)
class LatencyModel:
    """Predicted latency of one example: ``overhead_ms + ms_per_mmac * MACs / 1e6``."""

    ms_per_mmac: float
    overhead_ms: float

    def estimate_ms(self, spec: Spec) -> float:
        """Return the predicted latency of ``spec`` for one example, in milliseconds."""
        return self.estimate_from_macs(analyse(spec).macs)

    def estimate_from_macs(self, macs: int) -> float:
        """Return the predicted latency of a network of ``macs`` multiply-adds per example, in milliseconds."""
        return self.overhead_ms + self.ms_per_mmac * macs / 1e6

    @classmethod
    def calibrate(cls, specs_and_measured_ms: Iterable[tuple[Spec, float]]) -> LatencyModel:
        """Fit the model to measured latencies by least squares (coefficients clipped at zero).

        Needs at least two networks of different MAC counts (``ValueError`` otherwise).
        """
        pairs = [(analyse(spec).macs / 1e6, float(ms)) for spec, ms in specs_and_measured_ms]
        mmacs = np.array([p[0] for p in pairs])
        if len(set(mmacs.tolist())) < 2:
            raise ValueError("calibration needs at least two networks of different MAC counts")
        design = np.stack([mmacs, np.ones_like(mmacs)], axis=1)
        (slope, intercept), *_ = np.linalg.lstsq(design, np.array([p[1] for p in pairs]), rcond=None)
        return cls(ms_per_mmac=max(float(slope), 0.0), overhead_ms=max(float(intercept), 0.0))
