"""The benchmark protocol: how every bench script that writes to `bench/results/` starts and writes.

A figure taken on a busy machine is noise, so :func:`start` refuses to run when the 1-minute load average is above
`BUSY_LOAD` (unless the script was given ``--busy``, and then the file says ``"busy": true``), and :func:`write`
records beside the rows what is needed to trust them: the load average before and after, the CPU model and count,
Python's and the key libraries' versions and ``XLA_FLAGS``. This module is the one place that defines the rule.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

BUSY_LOAD = 1.5  # above this 1-minute load average a timing is noise (bench/README.md)
REFUSED = 3  # the exit status of a refused run
LIBRARIES = ("numpy", "jax", "jaxlib", "flax", "optax", "scikit-learn", "torch", "onnxruntime")

Load = Callable[[], tuple[float, float, float]]  # os.getloadavg (read at each call, so a test can replace it)


def add_busy(parser: argparse.ArgumentParser) -> None:
    """Give a script's parser the ``--busy`` flag: run even on a busy machine, and mark the results so."""
    parser.add_argument("--busy", action="store_true",
                        help=f"run even when the 1-minute load average is above {BUSY_LOAD}; the results say busy")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from /proc/cpuinfo (the processor's name from `platform` where there is none)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
    """The installed version of each of `LIBRARIES` (None where it is not installed), without importing them."""
    found: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def start(busy: bool, load: Load | None = None) -> dict[str, Any]:
    """Check the machine is quiet and return the run's record so far (load before, CPU, versions).

    Exits with status `REFUSED` when the 1-minute load average is above `BUSY_LOAD` and `busy` is not set: call it
    before the benchmark does anything."""
    before = [round(x, 2) for x in (load or os.getloadavg)()]
    if before[0] > BUSY_LOAD and not busy:
        print(f"refusing to run: the 1-minute load average is {before[0]}, above {BUSY_LOAD}, so the figures would be "
              "noise; wait for a quiet machine or pass --busy (the results are then marked busy)", file=sys.stderr)
        raise SystemExit(REFUSED)
    return {"busy": busy, "load_average_before": before, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "versions": versions()}


def stamp(doc: dict[str, Any], run: dict[str, Any], load: Load | None = None) -> dict[str, Any]:
    """`doc` with the run's record (from :func:`start`), the load average now and ``XLA_FLAGS`` added at its top."""
    after = [round(x, 2) for x in (load or os.getloadavg)()]
    record = {**run, "load_average_after": after, "xla_flags": os.environ.get("XLA_FLAGS")}
    return {**record, **{k: v for k, v in doc.items() if k not in record}}


def write(path: Path, doc: dict[str, Any], run: dict[str, Any], load: Load | None = None, indent: int = 2) -> None:
    """Write `doc`, stamped with the run's record (:func:`stamp`), to `path` as JSON."""
    path.write_text(json.dumps(stamp(doc, run, load), indent=indent, default=str) + "\n")
    print(f"wrote {path}")


def use_cpu_flags() -> None:
    """Put core's XLA:CPU flags (`core.kernels.CPU_XLA_FLAGS`) into ``XLA_FLAGS``: XLA reads them when its backend
    starts, so before the first computation."""
    from core.kernels import CPU_XLA_FLAGS

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()


def run_rows(path: Path, runs: Iterable[Callable[[], dict[str, Any]]], busy: bool) -> None:
    """Check the machine (:func:`start`), run each of `runs` in turn with core's CPU flags, print each row as it
    comes, and write them all (:func:`write`)."""
    run = start(busy)
    use_cpu_flags()
    rows = []
    for each in runs:
        rows.append(each())
        print(json.dumps(rows[-1]), flush=True)
    write(path, {"rows": rows}, run, indent=1)
