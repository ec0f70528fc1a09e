"""How a bench script writes its rows: with the load average before it started and after it ended."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_rows(path: Path, rows: list[dict[str, Any]], load_before: list[float]) -> None:
    """Write `rows` to `path` as JSON beside the 1-minute, 5-minute and 15-minute load averages before and after."""
    out = {"rows": rows, "load_average_before": load_before, "load_average_after": list(os.getloadavg())}
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
