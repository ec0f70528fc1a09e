"""The `netsynth` command line: migrate, create a user whose printed key authenticates, clear errors on bad input."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import inspect

from api.app import create_app
from api.cli import main
from store.db import make_engine
from store.settings import Settings


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


def test_serve_runs_uvicorn_on_localhost_8000(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def fake_run(app: object, host: str, port: int) -> None:
        seen.update(app=app, host=host, port=port)

    monkeypatch.setattr("uvicorn.run", fake_run)
    assert main(["serve"], Settings(database_url=f"sqlite:///{tmp_path / 'n.db'}")) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8000
    assert type(seen["app"]).__name__ == "FastAPI"
