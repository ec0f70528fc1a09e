"""How fast the dashboard first renders, in Debian's Chromium (headless, via Playwright) against the real API serving
the built dashboard (`make frontend` builds it) on loopback with an embedded SQLite database.

Per page, over fresh browser contexts (a cold cache each run): first contentful paint, the time until the page's own
content shows (the sign-in form, the jobs table, a dataset's class histogram), and the bytes the browser fetched
(JS and CSS as sent: gzipped). `npm run build` prints the bundle's gzip sizes; this measures what a browser does with
them. Prints a table and writes `bench/results/dashboard.json`.

    .venv/bin/python bench/dashboard.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import protocol  # noqa: E402
from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402

from infra.settings import Settings  # noqa: E402
from store.apikeys import create_api_key  # noqa: E402
from store.db import make_engine, make_session_factory, session_scope  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.models import User  # noqa: E402
from tests.datasets import digits_arrays, write_image_zip  # noqa: E402
from tests.workers.service import ApiServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
OUT = ROOT / "bench" / "results" / "dashboard.json"
MEASURE = """() => {
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  const fetched = performance.getEntriesByType("resource").concat(performance.getEntriesByType("navigation"));
  return {fcp_ms: paint ? paint.startTime : null, ready_ms: performance.now(),
          kb: fetched.reduce((sum, e) => sum + (e.transferSize || 0), 0) / 1000,
          script_kb: fetched.filter(e => /\\.(js|css)$/.test(e.name))
                            .reduce((sum, e) => sum + (e.encodedBodySize || 0), 0) / 1000,
          requests: fetched.length};
}"""


@dataclass(frozen=True)
class PageCase:
    """A page of the dashboard and what shows that it rendered its own content."""

    name: str
    path: str
    signed_in: bool
    ready: Callable[[Page], None]


def _key(database_url: str) -> str:
    engine = make_engine(database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            user = User(email="bench@example.org", display_name="bench")
            session.add(user)
            session.flush()
            return create_api_key(session, user).plaintext
    finally:
        engine.dispose()


def _cases(dataset_id: str) -> list[PageCase]:
    return [
        PageCase("sign-in", "/", False, lambda p: p.get_by_label("API key").wait_for()),
        PageCase("jobs", "/jobs", True, lambda p: p.get_by_role("button", name="Sign out").wait_for()),
        PageCase("dataset profile (chart)", f"/datasets/{dataset_id}", True,
                 lambda p: p.locator("canvas").first.wait_for()),
    ]


def _run(browser: Browser, url: str, key: str, case: PageCase) -> dict[str, Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        if case.signed_in:
            assert context.request.post(f"{url}/api/v1/session", data={"api_key": key}).ok
        page = context.new_page()
        page.goto(url + case.path)
        case.ready(page)
        measured: dict[str, Any] = page.evaluate(MEASURE)
        return measured
    finally:
        context.close()


def _median(rows: list[dict[str, Any]], field: str) -> float | None:
    values = [r[field] for r in rows if r[field] is not None]
    return round(statistics.median(values), 1) if values else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    protocol.add_busy(parser)
    args = parser.parse_args(argv)
    if not (ROOT / "frontend" / "dist" / "index.html").is_file():
        sys.exit("the dashboard is not built: run `make frontend` first")
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    folder = Path(tempfile.mkdtemp(prefix="netsynth-bench-dashboard-"))
    settings = Settings(database_url=f"sqlite:///{folder / 'db.sqlite'}", blob_dir=folder / "blobs")
    upgrade(settings.database_url)
    key = _key(settings.database_url)
    x, y = digits_arrays()
    digits = write_image_zip(folder / "digits.zip", x, y, root="digits")
    rows = []
    with ApiServer(settings) as api, sync_playwright() as playwright:
        with digits.open("rb") as f:
            r = httpx.post(f"{api.url}/api/v1/datasets", headers={"Authorization": f"Bearer {key}"},
                           files={"file": ("digits.zip", f)}, timeout=120)
        r.raise_for_status()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for case in _cases(r.json()["id"]):
            runs = [_run(browser, api.url, key, case) for _ in range(args.runs)]
            rows.append({"page": case.name, "runs": len(runs),
                         **{field: _median(runs, field) for field in ("fcp_ms", "ready_ms", "kb", "script_kb")},
                         "requests": runs[-1]["requests"]})
        browser.close()
    print(f"\n{'page':<26}{'first paint ms':>16}{'content ms':>12}{'fetched kB':>12}{'JS+CSS kB':>11}{'requests':>10}")
    for row in rows:
        print(f"{row['page']:<26}{row['fcp_ms']!s:>16}{row['ready_ms']!s:>12}{row['kb']!s:>12}{row['script_kb']!s:>11}"
              f"{row['requests']!s:>10}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(OUT, {"when": datetime.now(UTC).isoformat(timespec="seconds"), "cores": os.cpu_count(),
                         "runs": args.runs, "pages": rows}, run_record)
    print(f"\nwrote {OUT.relative_to(ROOT)} (medians of {args.runs} cold loads each, loopback, medians in ms)")


if __name__ == "__main__":
    main()
