"""The `netsynth` command line: migrate the database, manage users (create, list, disable, enable, quotas), serve the
API, run workers, run it all."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from api import processes
from api.predict_cli import add_predict_parser
from api.processes import worker_command
from domain.errors import StoreError
from infra.settings import Settings
from store import migrate
from store.apikeys import create_api_key
from store.db import make_engine, make_session_factory, session_scope
from store.models import User
from store.quotas import QUOTA_COLUMNS, Quota, set_quota, usage
from store.users import all_users, disable_user, enable_user, user_by_email

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


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    """A session on the settings' database that commits when the block succeeds."""
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


def _create_user(settings: Settings, email: str, name: str, *, only_if_no_users: bool = False) -> str | None:
    """Create a user with a first API key and return the key; None when `only_if_no_users` and users exist."""
    try:
        with _session(settings) as session:
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


def _limit(quota: Quota) -> str:
    """`used/limit`, the limit starred when it is the user's own."""
    return f"{quota.used}/{quota.limit}{'*' if quota.overridden else ''}"


def _user_line(session: Session, settings: Settings, user: User) -> str:
    quotas = usage(session, user, settings)
    status = "disabled" if user.disabled_at else "active"
    return "\t".join([user.email, user.display_name, user.created_at.date().isoformat(), status,
                      _limit(quotas.active_jobs), _limit(quotas.device_seconds), _limit(quotas.storage_bytes)])


USER_COLUMNS = "\t".join(["EMAIL", "NAME", "CREATED", "STATUS", "ACTIVE JOBS", "DEVICE-SECONDS/30 DAYS",
                          "STORAGE BYTES"])


def cmd_user_list(settings: Settings, _args: argparse.Namespace) -> None:
    """Print every user with its usage against each quota (`*`: a limit set for that user)."""
    with _session(settings) as session:
        print(USER_COLUMNS)
        for user in all_users(session):
            print(_user_line(session, settings, user))


def cmd_user_disable(settings: Settings, args: argparse.Namespace) -> None:
    """Disable a user: its keys answer 401 at once, its queued jobs are cancelled, its running ones asked to stop."""
    with _session(settings) as session:
        stopped = disable_user(session, user_by_email(session, args.email, lock=True))
    print(f"disabled {args.email}: {stopped.cancelled} queued job(s) cancelled, {stopped.stopping} running job(s) "
          "asked to stop")


def cmd_user_enable(settings: Settings, args: argparse.Namespace) -> None:
    """Enable a disabled user again: its keys that were not deleted work again."""
    with _session(settings) as session:
        enable_user(user_by_email(session, args.email, lock=True))
    print(f"enabled {args.email}")


_UNCHANGED = object()


def _quota_value(text: str) -> int | None:
    """A quota option's value: a count of at least 0, or `default` (None)."""
    if text == "default":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0 or 'default'")
    return int(text)


def cmd_user_quota(settings: Settings, args: argparse.Namespace) -> None:
    """Set a user's own limits (`default`: back to the settings'), then print its usage against each."""
    changes = {name: value for name in QUOTA_COLUMNS if (value := getattr(args, name)) is not _UNCHANGED}
    with _session(settings) as session:
        user = user_by_email(session, args.email, lock=True)
        set_quota(user, changes)
        session.flush()
        line = _user_line(session, settings, user)
    print(USER_COLUMNS)
    print(line)


def serve(settings: Settings, host: str, port: int) -> None:
    """Serve the API on `host`:`port` with uvicorn, until stopped."""
    import uvicorn

    from api.app import create_app

    # the app believes forwarded headers from NETSYNTH_FORWARDED_ALLOW_IPS itself; uvicorn's own copy of that, which
    # trusts 127.0.0.1 (or FORWARDED_ALLOW_IPS) whatever the settings say, stays off. httptools parses HTTP and uvloop
    # runs the event loop, both compiled (dependencies): uvicorn's fallbacks, h11 and asyncio's loop, are pure Python
    # and cost a status poll more CPU than the rest of its path
    uvicorn.run(create_app(settings), host=host, port=port, proxy_headers=False, http="httptools", loop="uvloop")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    """Serve the API with uvicorn."""
    serve(settings, args.host, args.port)


def cmd_worker(settings: Settings, args: argparse.Namespace) -> None:
    """Replace this process with a Celery worker (the workers' code is loaded by name, never imported here)."""
    command = worker_command(args.queues, args.concurrency or settings.worker_devices)
    sys.stdout.flush()
    os.execv(command[0], command)


HANDED_OVER = {"synthesize": "workers.synthesize_cli", "explain": "workers.explain_cli"}
"""The commands that run the engine, by the module that implements them (loaded by name, never imported here)."""


def cmd_handed_over(_settings: Settings, args: argparse.Namespace) -> None:
    """Replace this process with `python -m <module>` of the command (`HANDED_OVER`), its arguments untouched."""
    command = [sys.executable, "-m", HANDED_OVER[args.command], *args.rest]
    sys.stdout.flush()
    os.execv(command[0], command)


REMOTE = ("datasets", "jobs", "models")
"""The command groups that drive a service over its HTTP API (`netsynth.cli`, the Python client's)."""


def cmd_remote(_settings: Settings, args: argparse.Namespace) -> None:
    """Run a remote command (`REMOTE`) with the client's command line; exit with its status."""
    from netsynth.cli import main as remote_main

    sys.exit(remote_main([args.command, *args.rest]))


def cmd_run(settings: Settings, args: argparse.Namespace) -> None:
    """The embedded default: migrate, create a local admin on first start, then serve the API with a worker for
    jobs and one for explanations."""
    _ensure_sqlite_dir(settings.database_url)
    migrate.upgrade(settings.database_url)
    key = _create_user(settings, settings.admin_email, "admin", only_if_no_users=True)
    if key is not None:
        print(f"local admin {settings.admin_email}: API key (shown once, store it now): {key}", flush=True)
    workers = processes.start(processes.embedded_workers(settings, args.queues))  # jobs', and explanations'
    print(f"netsynth at http://{args.host}:{args.port}/ : the dashboard (sign in with an API key), the API under "
          "/api/v1, its documentation at /docs", flush=True)
    try:
        serve(settings, args.host, args.port)
    finally:
        processes.stop(workers)
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
    users.add_parser("list", help="list users with their usage against each quota").set_defaults(func=cmd_user_list)
    for name, func, what in (("disable", cmd_user_disable, "disable a user: its keys answer 401, its jobs are "
                              "cancelled"), ("enable", cmd_user_enable, "enable a disabled user again")):
        p = users.add_parser(name, help=what)
        p.add_argument("email")
        p.set_defaults(func=func)
    p = users.add_parser("quota", help="show or set a user's quotas (N, or 'default' for the settings' value)")
    p.add_argument("email")
    for name in QUOTA_COLUMNS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_quota_value, default=_UNCHANGED,
                       metavar="N|default")
    p.set_defaults(func=cmd_user_quota)
    p = sub.add_parser("serve", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("worker", help="run a Celery worker: one job (or explanation) at a time per device")
    p.add_argument("--queues", default=settings_queue(), help="comma-separated queues to serve (cpu, gpu; explain "
                   "for explanation requests, NETSYNTH_EXPLAIN_QUEUE)")
    p.add_argument("--concurrency", type=int, default=0, help="jobs at once, one per device (default: "
                   "NETSYNTH_WORKER_DEVICES)")
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser("synthesize", add_help=False, help="synthesize a model from a local dataset "
                       "(netsynth synthesize --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_handed_over, command="synthesize")
    p = sub.add_parser("explain", add_help=False, help="explain a model package's predictions on images or texts "
                       "(netsynth explain --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_handed_over, command="explain")
    add_predict_parser(sub)
    for name, what in zip(REMOTE, ("upload and list datasets on a service (NETSYNTH_URL, NETSYNTH_API_KEY)",
                                   "create, list, watch and cancel jobs on a service",
                                   "download models from a service and predict with them"), strict=True):
        p = sub.add_parser(name, add_help=False, help=f"{what} (netsynth {name} --help)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=cmd_remote, command=name)
    p = sub.add_parser("run", help="migrate, create a local admin, serve the API with a worker for jobs and one for "
                       "explanations (Ctrl-C stops)")
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
    if argv[:1] and argv[0] in HANDED_OVER:  # their options (--help included) are their modules', passed on untouched
        args = argparse.Namespace(func=cmd_handed_over, command=argv[0], rest=argv[1:])
    elif argv[:1] and argv[0] in REMOTE:  # the client's own command line, which needs no settings
        from netsynth.cli import main as remote_main

        return remote_main(argv)
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
