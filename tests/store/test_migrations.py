"""The migrations build exactly the models' schema, and can be undone and redone."""

from __future__ import annotations

import uuid
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from store.base import Base, utcnow
from store.db import make_engine
from store.migrate import downgrade, upgrade

TABLES = {"users", "api_keys", "datasets", "jobs", "job_events", "candidates", "models", "reports", "report_images",
          "explanation_requests", "search_results",
          "trial_tasks", "web_sessions"}


def _diff(url: str) -> list[Any]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_models_and_migrations_agree(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    assert _tables(empty_db_url) == TABLES
    assert _diff(empty_db_url) == []


def test_an_empty_database_differs_from_the_models(empty_db_url: str) -> None:
    # The comparison above can fail: against an unmigrated database it reports every table missing.
    added = {d[1].name for d in _diff(empty_db_url) if d[0] == "add_table"}
    assert added == TABLES


def test_upgrade_downgrade_upgrade_on_postgres(pg_url: str) -> None:
    upgrade(pg_url)
    downgrade(pg_url, "base")
    assert _tables(pg_url) == set()
    upgrade(pg_url)
    assert _tables(pg_url) == TABLES
    assert _diff(pg_url) == []


def test_upgrade_downgrade_upgrade_on_sqlite(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    downgrade(url, "base")
    assert _tables(url) == set()
    upgrade(url)
    assert _diff(url) == []


def test_quota_columns_are_added_empty_to_existing_users_and_removed_again(empty_db_url: str) -> None:
    """0006 keeps every user: none disabled, every quota the default (NULL); undoing it keeps them too."""
    upgrade(empty_db_url, "0005")
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO users (id, email, display_name, created_at) "
                              "VALUES (:id, 'ada@example.org', 'Ada', :at)"), {"id": uuid.uuid4().hex, "at": utcnow()})
        upgrade(empty_db_url)
        with engine.connect() as conn:
            row = conn.execute(text("SELECT email, disabled_at, quota_active_jobs, quota_device_seconds, "
                                    "quota_storage_bytes FROM users")).one()
        assert tuple(row) == ("ada@example.org", None, None, None, None)
        downgrade(empty_db_url, "0005")
        assert "disabled_at" not in {c["name"] for c in inspect(engine).get_columns("users")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT email FROM users")).scalar_one() == "ada@example.org"
    finally:
        engine.dispose()
