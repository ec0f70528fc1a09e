"""The `netsynth` command line: migrate the database, create users, serve the API, run workers, run it all."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from api.predict_cli import add_predict_parser
from store import migrate
from store.apikeys import create_api_key
from store.db import make_engine, make_session_factory, session_scope
from store.errors import StoreError
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


def _create_user(settings: Settings, email: str, name: str, *, only_if_no_users: bool = False) -> str | None:
    """Create a user with a first API key and return the key; None when `only_if_no_users` and users exist."""
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            if only_if_no_users and session.scalars(select(User.id)).first() is not None:
                return None
            if session.scalars(select(User).where(User.email == email)).first() is not None:
                raise CliError(f"a user with email {email!r} already exists")
            user = User(email=email, display_name=name or email.split("@", 1)[0])
            session.add(user)
            session.flush()
            issued = create_api_key(session, user, name="cli")
    except IntegrityError as exc:  # a concurrent create won the race
        raise CliError(f"a user with email {email!r} already exists") from exc
    finally:
        engine.dispose()
    print(f"created user {email} ({user.id})")
    return issued.plaintext


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> None:
    """Create a user and print its first API key, which is shown only this once."""
    email = args.email.strip()
    if "@" not in email or len(email) > 320:
        raise CliError(f"{args.email!r} is not an email address")
    key = _create_user(settings, email, args.name)
    print("API key (shown once, store it now):", file=sys.stderr)
    print(key)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    """Serve the API with uvicorn."""
    import uvicorn

    from api.app import create_app

    uvicorn.run(create_app(settings), host=args.host, port=args.port)


def worker_command(queues: str, concurrency: int) -> list[str]:
    """The command that starts a Celery worker process serving `queues` with one pool process per device."""
    return [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--queues", queues,
            "--concurrency", str(concurrency), "--pool", "prefork", "--loglevel", "INFO",
            "--hostname", f"netsynth-{queues.replace(',', '-')}@%h"]


def cmd_worker(settings: Settings, args: argparse.Namespace) -> None:
    """Replace this process with a Celery worker (the workers' code is loaded by name, never imported here)."""
    command = worker_command(args.queues, args.concurrency or settings.worker_devices)
    sys.stdout.flush()
    os.execv(command[0], command)


def cmd_synthesize(_settings: Settings, args: argparse.Namespace) -> None:
    """Replace this process with `python -m workers.cli` (the engine is loaded by name, never imported here)."""
    command = [sys.executable, "-m", "workers.cli", *args.rest]
    sys.stdout.flush()
    os.execv(command[0], command)


def cmd_run(settings: Settings, args: argparse.Namespace) -> None:
    """The embedded default: migrate, create a local admin on first start, then serve the API and one worker."""
    import uvicorn

    from api.app import create_app

    _ensure_sqlite_dir(settings.database_url)
    migrate.upgrade(settings.database_url)
    key = _create_user(settings, settings.admin_email, "admin", only_if_no_users=True)
    if key is not None:
        print(f"local admin {settings.admin_email}: API key (shown once, store it now): {key}", flush=True)
    worker = subprocess.Popen(worker_command(args.queues, settings.worker_devices), start_new_session=True)
    try:
        uvicorn.run(create_app(settings), host=args.host, port=args.port)
    finally:
        worker.send_signal(signal.SIGTERM)  # warm shutdown: a running job's lease lapses and it is requeued
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        print("netsynth stopped", flush=True)


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
    p = sub.add_parser("worker", help="run a Celery worker: one job at a time per device")
    p.add_argument("--queues", default=settings_queue(), help="comma-separated queues to serve (cpu, gpu)")
    p.add_argument("--concurrency", type=int, default=0, help="jobs at once, one per device (default: "
                   "NETSYNTH_WORKER_DEVICES)")
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser("synthesize", add_help=False, help="synthesize a model from a local dataset "
                       "(netsynth synthesize --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_synthesize)
    add_predict_parser(sub)
    p = sub.add_parser("run", help="migrate, create a local admin, serve the API with one worker (Ctrl-C stops)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--queues", default=settings_queue())
    p.set_defaults(func=cmd_run)
    return parser


def settings_queue() -> str:
    """The default queue, from the environment's settings."""
    return Settings().default_queue


def main(argv: Sequence[str] | None = None, settings: Settings | None = None) -> int:
    """Run the command line; return its exit status (0 ok, 1 database failure, 2 bad input)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["synthesize"]:  # its options (--help included) are workers.cli's, passed on untouched
        args = argparse.Namespace(func=cmd_synthesize, rest=argv[1:])
    else:
        args = parser.parse_args(argv)
    settings = settings or Settings()
    try:
        args.func(settings, args)
    except (CliError, StoreError) as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except SQLAlchemyError as exc:
        first = str(exc).splitlines()[0]
        print(f"netsynth: error: database failure (is it migrated? run `netsynth migrate`): {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
