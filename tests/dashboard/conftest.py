"""Fixtures of the dashboard's browser tests: Debian's Chromium driven by Playwright (never a browser Playwright
downloads), the built dashboard, and the end-to-end fixtures of the worker tests (real PostgreSQL, Redis, Celery)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

from tests.services import unavailable
from tests.workers.conftest import digits, pg_db, pg_redis_settings, pg_skip_reason, redis_url, worker_factory

__all__ = ["digits", "pg_db", "pg_redis_settings", "pg_skip_reason", "redis_url", "worker_factory"]

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "frontend" / "dist"
ARTIFACTS = Path(os.environ.get("NETSYNTH_TEST_ARTIFACTS", ROOT / "var" / "test-artifacts")) / "dashboard"
EXPECTED_REFUSAL = re.compile(r"Failed to load resource: the server responded with a status of 4(01|03|04|22)\b")
"""The browser logs every 4xx a page's fetch receives; these are the answers the tests provoke on purpose (a wrong
key, a refused upload, a report not built yet). Anything else logged as an error fails the test."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium from Debian's package. Module-scoped: Playwright's sync API keeps an asyncio loop running
    in the thread while it is open, and later tests in the same process call `asyncio.run`."""
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"{CHROMIUM} is not installed (apt-get install chromium)")
    if not (BUILD / "index.html").is_file():
        unavailable(f"the dashboard is not built ({BUILD}; make frontend builds it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


class Console:
    """Errors a page logged or threw, less the refusals a test provokes on purpose."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", self._message)
        page.on("pageerror", self._thrown)

    def _message(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not EXPECTED_REFUSAL.search(message.text):
            self.errors.append(message.text)

    def _thrown(self, error: Error) -> None:
        self.errors.append(f"{error.name}: {error.message}")


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as a test artifact (`NETSYNTH_TEST_ARTIFACTS`, default var/test-artifacts)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
