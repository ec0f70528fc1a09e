"""The `netsynth` command line: migrate, create a user whose printed key authenticates, the admin's user list,
disable, enable and quota, clear errors on bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import uvloop
from sqlalchemy import inspect, select
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.app import create_app
from api.cli import main
from infra.settings import Settings
from store.db import make_engine, make_session_factory, session_scope
from store.jobs import transition
from store.models import Job, JobState, User
from tests.store.factories import make_job


def _run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), Settings(database_url=url))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.anyio
async def test_user_create_prints_a_key_that_authenticates(
    capsys: pytest.CaptureFixture[str], empty_db_url: str
) -> None:
    assert _run(capsys, empty_db_url, "migrate")[0] == 0
    code, out, err = _run(capsys, empty_db_url, "user", "create", "grace@example.org", "--name", "Grace")
    assert code == 0, err
    key = out.strip().splitlines()[-1]
    assert key.startswith("ns_")
    app = create_app(Settings(database_url=empty_db_url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
    app.state.engine.dispose()
    assert r.status_code == 200
    assert r.json()["email"] == "grace@example.org"
    assert r.json()["display_name"] == "Grace"


def test_migrate_creates_the_tables_and_the_sqlite_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'var' / 'netsynth.db'}"
    code, out, _ = _run(capsys, url, "migrate")
    assert code == 0 and "migrated" in out
    engine = make_engine(url)
    assert {"users", "api_keys", "jobs"} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_duplicate_user_is_a_clear_error_with_exit_2(capsys: pytest.CaptureFixture[str], empty_db_url: str) -> None:
    url = empty_db_url
    _run(capsys, url, "migrate")
    assert _run(capsys, url, "user", "create", "ada@example.org")[0] == 0
    code, out, err = _run(capsys, url, "user", "create", "ada@example.org")
    assert code == 2
    assert out == ""  # no second key is printed
    assert err.strip() == "netsynth: error: a user with email 'ada@example.org' already exists"


def test_bad_email_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'n.db'}"
    _run(capsys, url, "migrate")
    code, _, err = _run(capsys, url, "user", "create", "not-an-email")
    assert code == 2
    assert "'not-an-email' is not an email address" in err


def test_unmigrated_database_says_to_migrate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, f"sqlite:///{tmp_path / 'n.db'}", "user", "create", "ada@example.org")
    assert code == 1
    assert "netsynth migrate" in err
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv in ([], ["user"], ["frobnicate"], ["serve", "--port", "eighty"]):
        with pytest.raises(SystemExit) as exc_info:
            main(argv, Settings(database_url=f"sqlite:///{tmp_path / 'n.db'}"))
        assert exc_info.value.code == 2
    assert "usage: netsynth" in capsys.readouterr().err


async def _asgi(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app for uvicorn's configuration to load."""


def test_serve_runs_uvicorn_on_localhost_8000(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def fake_run(app: object, host: str, port: int, proxy_headers: bool, http: str, loop: str) -> None:
        seen.update(app=app, host=host, port=port, proxy_headers=proxy_headers, http=http, loop=loop)

    monkeypatch.setattr("uvicorn.run", fake_run)
    assert main(["serve"], Settings(database_url=f"sqlite:///{tmp_path / 'n.db'}")) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8000
    assert seen["proxy_headers"] is False  # the app reads forwarded headers itself (NETSYNTH_FORWARDED_ALLOW_IPS)
    assert type(seen["app"]).__name__ == "FastAPI"
    # the compiled HTTP parser and event loop, not uvicorn's pure-Python fallbacks (h11, asyncio's loop)
    config = uvicorn.Config(_asgi, http=str(seen["http"]), loop=str(seen["loop"]))
    config.load()
    assert config.http_protocol_class is HttpToolsProtocol
    assert config.get_loop_factory() is uvloop.new_event_loop


def _users(capsys: pytest.CaptureFixture[str], url: str, *emails: str) -> dict[str, str]:
    """Migrate `url` and create users; return each one's key."""
    _run(capsys, url, "migrate")
    keys = {}
    for email in emails:
        code, out, err = _run(capsys, url, "user", "create", email)
        assert code == 0, err
        keys[email] = out.strip().splitlines()[-1]
    return keys


def test_user_list_shows_status_and_usage_against_each_quota(capsys: pytest.CaptureFixture[str],
                                                             empty_db_url: str) -> None:
    _users(capsys, empty_db_url, "ada@example.org", "bob@example.org")
    engine = make_engine(empty_db_url)
    with session_scope(make_session_factory(engine)) as s:
        ada = s.scalars(select(User).where(User.email == "ada@example.org")).one()
        make_job(s, ada).budget_seconds = 900
        ada.quota_active_jobs = 5
    engine.dispose()
    code, out, _ = _run(capsys, empty_db_url, "user", "list")
    assert code == 0
    header, *rows = [line.split("\t") for line in out.strip().splitlines()]
    assert header == ["EMAIL", "NAME", "CREATED", "STATUS", "ACTIVE JOBS", "DEVICE-SECONDS/30 DAYS", "STORAGE BYTES"]
    defaults = Settings()
    assert rows[0][0] == "ada@example.org" and rows[0][3:] == [
        "active", "1/5*", f"900/{defaults.device_seconds_per_30_days}", f"1234/{defaults.storage_bytes_per_user}"]
    assert rows[1][0] == "bob@example.org" and rows[1][4] == f"0/{defaults.max_active_jobs_per_user}"


@pytest.mark.anyio
async def test_user_disable_refuses_the_keys_and_cancels_the_jobs_and_enable_undoes_it(
    capsys: pytest.CaptureFixture[str], empty_db_url: str
) -> None:
    key = _users(capsys, empty_db_url, "ada@example.org")["ada@example.org"]
    engine = make_engine(empty_db_url)
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        ada = s.scalars(select(User)).one()
        queued, running = make_job(s, ada), make_job(s, ada)
        transition(running, JobState.RUNNING)
        ids = queued.id, running.id
    code, out, _ = _run(capsys, empty_db_url, "user", "disable", "ada@example.org")
    assert code == 0
    assert out.strip() == "disabled ada@example.org: 1 queued job(s) cancelled, 1 running job(s) asked to stop"
    with factory() as s:
        jobs = [s.get_one(Job, job_id) for job_id in ids]
        assert jobs[0].state is JobState.CANCELLED and jobs[1].cancel_requested_at is not None
    engine.dispose()
    assert "\tdisabled\t" in _run(capsys, empty_db_url, "user", "list")[1]
    assert await _me_status(empty_db_url, key) == 401
    assert _run(capsys, empty_db_url, "user", "enable", "ada@example.org")[:2] == (0, "enabled ada@example.org\n")
    assert await _me_status(empty_db_url, key) == 200


async def _me_status(url: str, key: str) -> int:
    app = create_app(Settings(database_url=url))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        r = await c.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
    app.state.engine.dispose()
    return r.status_code


def test_user_quota_sets_shows_and_resets_a_users_limits(capsys: pytest.CaptureFixture[str],
                                                         empty_db_url: str) -> None:
    _users(capsys, empty_db_url, "ada@example.org")
    code, out, err = _run(capsys, empty_db_url, "user", "quota", "ada@example.org", "--active-jobs", "4",
                          "--device-seconds", "3600", "--storage-bytes", "0")
    assert code == 0, err
    assert out.splitlines()[1].split("\t")[4:] == ["0/4*", "0/3600*", "0/0*"]
    code, out, _ = _run(capsys, empty_db_url, "user", "quota", "ada@example.org", "--device-seconds", "default")
    assert out.splitlines()[1].split("\t")[4:] == ["0/4*", f"0/{Settings().device_seconds_per_30_days}", "0/0*"]
    assert _run(capsys, empty_db_url, "user", "quota", "ada@example.org")[1] == out  # no option: only shows


def test_user_admin_commands_refuse_unknown_users_and_bad_values(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'n.db'}"
    _run(capsys, url, "migrate")
    for command in ("disable", "enable", "quota"):
        code, _, err = _run(capsys, url, "user", command, "nobody@example.org")
        assert (code, err.strip()) == (2, "netsynth: error: no user with email 'nobody@example.org'")
    for value in ("-1", "lots", "1.5"):
        with pytest.raises(SystemExit) as exc_info:
            main(["user", "quota", "a@example.org", "--active-jobs", value], Settings(database_url=url))
        assert exc_info.value.code == 2
    assert "is not a whole number >= 0 or 'default'" in capsys.readouterr().err
