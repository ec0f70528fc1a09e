"""How a bench script writes its rows: with the load average before it started and after it ended."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def write_rows(path: Path, rows: list[dict[str, Any]], load_before: list[float]) -> None:
    """Write `rows` to `path` as JSON beside the 1-minute, 5-minute and 15-minute load averages before and after."""
    out = {"rows": rows, "load_average_before": load_before, "load_average_after": list(os.getloadavg())}
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


def use_cpu_flags() -> None:
    """Put core's XLA:CPU flags (`core.kernels.CPU_XLA_FLAGS`) into ``XLA_FLAGS``: XLA reads them when its backend
    starts, so before the first computation."""
    from core.kernels import CPU_XLA_FLAGS

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()


def run_rows(path: Path, runs: Iterable[Callable[[], dict[str, Any]]]) -> None:
    """Run each of `runs` in turn with core's CPU flags, print each row as it comes, and write them all
    (:func:`write_rows`) with the load average from before the first."""
    use_cpu_flags()
    rows, before = [], list(os.getloadavg())
    for run in runs:
        rows.append(run())
        print(json.dumps(rows[-1]), flush=True)
    write_rows(path, rows, before)
