"""The dashboard from the API's origin: its page for any path outside /api/ (the single-page app routes in the
browser), its assets with a long immutable cache, a page saying it is not built when it is not, and the API's own
routes and 404 problems unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from api.dashboard import DEFAULT_DIR
from infra.settings import Settings
from tests.api.conftest import Account, assert_problem

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
PAGE = "<!doctype html><title>netsynth</title><div id=root></div><script src=/assets/app-3f2a.js></script>"
SCRIPT = "console.log('dashboard')"


@pytest.fixture
def build(tmp_path: Path) -> Path:
    """A fake Vite build: index.html, one hashed asset and a favicon; beside it a file that must never be served."""
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(PAGE)
    (dist / "assets" / "app-3f2a.js").write_text(SCRIPT)
    (dist / "favicon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (tmp_path / "secret.txt").write_text("not for the web")
    return dist


@asynccontextmanager
async def _serving(settings: Settings, directory: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app that serves the dashboard built in `directory`."""
    app = create_app(settings.model_copy(update={"dashboard_dir": directory}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c
    app.state.engine.dispose()


@pytest.fixture
async def served(settings: Settings, build: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _serving(settings, build) as c:
        yield c


@pytest.fixture
async def unbuilt(settings: Settings, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _serving(settings, tmp_path / "no-such-build") as c:
        yield c


@pytest.mark.parametrize("path", ["/", "/jobs", "/jobs/4c1d9a0e-8f4e-4a44-9b3b-0cf8b2a3b7e1", "/models/x/report",
                                  "/index.html", "/favicon.ico", "/docs-and-more"])
async def test_every_path_outside_the_api_answers_the_page(served: httpx.AsyncClient, path: str) -> None:
    r = await served.get(path)
    assert r.status_code == 200
    assert r.text == PAGE
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-content-type-options"] == "nosniff"


async def test_head_answers_the_page_without_a_body(served: httpx.AsyncClient) -> None:
    r = await served.head("/jobs")
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len(PAGE)


async def test_assets_are_cached_for_good_and_other_files_revalidated(served: httpx.AsyncClient) -> None:
    r = await served.get("/assets/app-3f2a.js")
    assert r.status_code == 200 and r.text == SCRIPT
    assert "javascript" in r.headers["content-type"]
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    icon = await served.get("/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")
    assert icon.headers["cache-control"] == "no-cache"


async def test_assets_are_gzipped_for_a_browser_that_accepts_it(served: httpx.AsyncClient, build: Path) -> None:
    script = "".join(f"export const chart{i} = () => {i} * Math.random();\n" for i in range(2000))
    (build / "assets" / "chart-9b1c.js").write_text(script)
    r = await served.get("/assets/chart-9b1c.js", headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and r.text == script  # httpx decodes it
    assert r.num_bytes_downloaded < len(script) / 3  # bytes on the wire
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    plain = await served.get("/assets/chart-9b1c.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.text == script


async def test_a_missing_asset_is_a_404_not_the_page(served: httpx.AsyncClient) -> None:
    assert_problem(await served.get("/assets/app-0000.js"), 404)


@pytest.mark.parametrize("path", ["/assets/..%2f..%2fsecret.txt", "/..%2fsecret.txt", "/%2e%2e/secret.txt"])
async def test_nothing_outside_the_build_is_served(served: httpx.AsyncClient, path: str) -> None:
    r = await served.get(path)
    assert "not for the web" not in r.text
    assert r.status_code in (200, 404)


@pytest.mark.parametrize("path", ["/api", "/api/", "/api/v1/no-such-thing", "/api/v2/jobs", "/api/index.html"])
async def test_unknown_api_paths_stay_404_problems(served: httpx.AsyncClient, path: str) -> None:
    body = assert_problem(await served.get(path), 404)
    assert body["title"] == "Not Found"


async def test_other_methods_outside_the_api_are_404_problems(served: httpx.AsyncClient) -> None:
    assert_problem(await served.post("/jobs", json={}), 404)
    assert_problem(await served.delete("/"), 404)


async def test_the_api_docs_and_metrics_come_first(served: httpx.AsyncClient, account: Account) -> None:
    assert "swagger" in (await served.get("/docs")).text.lower()
    spec = await served.get("/api/v1/openapi.json")
    assert spec.status_code == 200 and "paths" in spec.json()
    assert not [path for path in spec.json()["paths"] if not path.startswith("/api/")]
    assert_problem(await served.get("/metrics"), 404)  # a route, not the page (no metrics token: not served)
    me = await served.get("/api/v1/me", headers=account.auth)
    assert me.status_code == 200 and me.json()["email"] == "ada@example.org"


async def test_without_a_build_the_page_says_make_run_builds_it(unbuilt: httpx.AsyncClient) -> None:
    for path in ("/", "/jobs/1"):
        r = await unbuilt.get(path)
        assert r.status_code == 503
        assert r.headers["content-type"].startswith("text/html")
        assert "not built" in r.text and "make run" in r.text
    assert_problem(await unbuilt.get("/assets/app-3f2a.js"), 404)
    assert (await unbuilt.get("/api/v1/health")).status_code == 200


def test_the_default_build_is_frontend_dist_of_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert DEFAULT_DIR == ROOT / "frontend" / "dist"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NETSYNTH_DASHBOARD_DIR", "")
    assert Settings().dashboard_dir is None
    monkeypatch.setenv("NETSYNTH_DASHBOARD_DIR", "/srv/dashboard")
    assert Settings().dashboard_dir == Path("/srv/dashboard")
