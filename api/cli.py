"""The `netsynth` command line: migrate the database, create users with an API key, serve the API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from store import migrate
from store.apikeys import create_api_key
from store.db import make_engine, make_session_factory, session_scope
from store.models import User
from store.settings import Settings

USAGE_ERROR = 2


class CliError(Exception):
    """Bad input on the command line: reported as `netsynth: error: ...` with exit code 2."""


def _ensure_sqlite_dir(url: str) -> None:
    """Create the directory of a SQLite database file, so the default `./var/netsynth.db` works out of the box."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(str(parsed.database)).parent.mkdir(parents=True, exist_ok=True)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> None:
    """Apply the migrations up to `args.revision`."""
    _ensure_sqlite_dir(settings.database_url)
    migrate.upgrade(settings.database_url, args.revision)
    print(f"database migrated to {args.revision}")


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> None:
    """Create a user and print its first API key, which is shown only this once."""
    email = args.email.strip()
    if "@" not in email or len(email) > 320:
        raise CliError(f"{args.email!r} is not an email address")
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            if session.scalars(select(User).where(User.email == email)).first() is not None:
                raise CliError(f"a user with email {email!r} already exists")
            user = User(email=email, display_name=args.name or email.split("@", 1)[0])
            session.add(user)
            session.flush()
            issued = create_api_key(session, user, name="cli")
    except IntegrityError as exc:  # a concurrent create won the race
        raise CliError(f"a user with email {email!r} already exists") from exc
    finally:
        engine.dispose()
    print(f"created user {email} ({user.id})")
    print("API key (shown once, store it now):", file=sys.stderr)
    print(issued.plaintext)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    """Serve the API with uvicorn."""
    import uvicorn

    from api.app import create_app

    uvicorn.run(create_app(settings), host=args.host, port=args.port)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="netsynth", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("migrate", help="apply the database migrations")
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.set_defaults(func=cmd_migrate)
    users = sub.add_parser("user", help="manage users").add_subparsers(dest="user_command", required=True)
    p = users.add_parser("create", help="create a user and print its API key once")
    p.add_argument("email", help="the user's email address (unique)")
    p.add_argument("--name", default="", help="display name (default: the email's local part)")
    p.set_defaults(func=cmd_user_create)
    p = sub.add_parser("serve", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None, settings: Settings | None = None) -> int:
    """Run the command line; return its exit status (0 ok, 1 database failure, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = settings or Settings()
    try:
        args.func(settings, args)
    except CliError as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except SQLAlchemyError as exc:
        first = str(exc).splitlines()[0]
        print(f"netsynth: error: database failure (is it migrated? run `netsynth migrate`): {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
