"""The app's shape: health without auth, OpenAPI docs, problem+json for unknown routes and unexpected errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from api.app import create_app
from api.deps import SessionDep
from infra.settings import Settings
from store.models import User
from tests.api.conftest import Account, assert_problem

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


async def test_health_needs_no_key_and_checks_the_database(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/v1/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": "ok"}


async def test_health_is_503_when_the_database_does_not_answer(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.get("/api/v1/health")
    body = assert_problem(r, 503)
    assert body["detail"] == "the database does not answer"


async def test_openapi_documents_the_routes_and_the_bearer_scheme(client: httpx.AsyncClient) -> None:
    assert (await client.get("/docs")).status_code == 200
    spec = (await client.get("/api/v1/openapi.json")).json()
    assert {"/api/v1/health", "/api/v1/me"} <= spec["paths"].keys()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


async def test_unknown_route_is_a_404_problem(client: httpx.AsyncClient) -> None:
    body = assert_problem(await client.get("/api/v1/no-such-thing"), 404)
    assert body["type"] == "about:blank"
    assert body["title"] == "Not Found"


async def test_wrong_method_is_a_405_problem_that_keeps_the_allow_header(client: httpx.AsyncClient) -> None:
    r = await client.delete("/api/v1/health")
    assert_problem(r, 405)
    assert "GET" in r.headers["allow"]


async def test_unexpected_error_is_a_500_problem_that_leaks_nothing(app: FastAPI, account: Account) -> None:
    @app.get("/api/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret connection string postgres://admin:hunter2@db")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.get("/api/v1/boom", headers=account.auth)
    body = assert_problem(r, 500)
    assert "hunter2" not in r.text and "RuntimeError" not in r.text
    assert body["detail"] == "the server hit an unexpected error"


async def test_a_failed_commit_is_an_error_not_a_success(app: FastAPI, account: Account) -> None:
    @app.post("/api/v1/clash")
    def clash(session: SessionDep) -> dict[str, str]:
        session.add(User(email="ada@example.org"))  # a duplicate email: fails only at commit
        return {"status": "created"}

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.post("/api/v1/clash")
    assert_problem(r, 500)
    with app.state.session_factory() as s:
        assert [u.email for u in s.scalars(select(User))] == ["ada@example.org"]


def test_serving_the_api_never_loads_jax(tmp_path: Path) -> None:
    """A fresh process that serves an upload, a job, a model download and a prediction never imports JAX, Flax,
    Optax or the engine's packages (tests/api/serve_without_jax.py)."""
    result = subprocess.run([sys.executable, "-m", "tests.api.serve_without_jax", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
