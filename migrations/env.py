"""Alembic environment: migrates the database named by the caller or by NETSYNTH_DATABASE_URL."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

import store.models  # noqa: F401  (registers every table on the metadata)
from infra.settings import Settings
from store.base import Base, UTCDateTime
from store.db import make_engine

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return str(url) if url else Settings().database_url


def _render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        render_item=_render_item,
        compare_type=True,
    )


def run_offline() -> None:
    """Emit SQL for the migration without connecting."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_item=_render_item)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Run the migration on a connection: the caller's, or a new one to the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
