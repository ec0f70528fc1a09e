"""Structured logs: with `NETSYNTH_LOG_FORMAT=json` every line is one JSON object (time, level, logger, message, the
`request_id` / `job_id` of what is being done, any `extra=` fields, and `exc` with the traceback).

The API and the workers share it: `log_context(...)` adds fields to every line logged inside it (in this task or
thread); `setup_logging` installs the JSON handler on the root logger; `configure_worker_logging` lets a Celery worker
log the same way, each synthesis task's lines carrying its `job_id`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TextIO

from celery import signals

from infra.broker import SYNTHESIZE, TRIAL

Field = str | Callable[[], str | None] | None
"""A context field: a value, or a function that gives it when a line is logged (None: left out)."""

_fields: ContextVar[Mapping[str, Field]] = ContextVar("netsynth_log_fields",
                                                                  default=MappingProxyType({}))
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_UID = "netsynth-logs"
_TASK_FIELD = {SYNTHESIZE: "job_id", TRIAL: "trial_task_id"}
"""The field a task's first argument is logged as."""


@contextmanager
def log_context(**fields: Field) -> Iterator[None]:
    """Add `fields` to every line logged inside the block (by this task or thread)."""
    token = _fields.set({**_fields.get(), **fields})
    try:
        yield
    finally:
        _fields.reset(token)


def context_fields() -> dict[str, str]:
    """The context's fields now, functions evaluated, None left out."""
    found = {}
    for name, value in _fields.get().items():
        resolved = value() if callable(value) else value
        if resolved is not None:
            found[name] = resolved
    return found


class ContextFilter(logging.Filter):
    """Copies the context's fields onto each record (without replacing what `extra=` set)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in context_fields().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, then the record's other fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_"))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class JsonHandler(logging.StreamHandler[TextIO]):
    """The handler `setup_logging` installs: JSON lines with the context's fields."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream or sys.stderr)
        self.setFormatter(JsonFormatter())
        self.addFilter(ContextFilter())


def setup_logging(log_format: str, *, stream: TextIO | None = None, level: int | str = logging.INFO) -> None:
    """Log JSON lines to `stream` (stderr) from the root logger at `level` when `log_format` is "json"; with "text",
    leave logging as it is. Idempotent: a JSON handler installed before is replaced (or removed, for "text")."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, JsonHandler)]:
        root.removeHandler(handler)
    if log_format != "json":
        return
    root.addHandler(JsonHandler(stream))
    root.setLevel(level)


def configure_worker_logging(log_format: str) -> None:
    """In a Celery worker: with "json", log JSON lines instead of Celery's text (at the worker's --loglevel), each
    line of a task carrying the id its first argument names (`job_id` for a synthesis, `trial_task_id` for a trial,
    whose lines also carry its job's `job_id` once it knows it: `workers.subtask`). With
    "text", Celery logs as it does by default (and an earlier "json" is undone)."""
    receivers = ((signals.setup_logging, _celery_setup_logging), (signals.task_prerun, _bind_task),
                 (signals.task_postrun, _unbind_task))
    for signal, receiver in receivers:
        if log_format == "json":
            signal.connect(receiver, weak=False, dispatch_uid=_UID)
        else:
            signal.disconnect(receiver, dispatch_uid=_UID)


def _celery_setup_logging(loglevel: int | str | None = None, **_kwargs: Any) -> None:
    setup_logging("json", level=loglevel or logging.INFO)


_task_tokens: dict[str, Any] = {}


def _bind_task(task_id: str = "", task: Any = None, args: Any = None, **_kwargs: Any) -> None:
    name = _TASK_FIELD.get(getattr(task, "name", ""))
    if name and args:
        _task_tokens[task_id] = _fields.set({**_fields.get(), name: str(args[0]), "task_id": task_id})


def _unbind_task(task_id: str = "", **_kwargs: Any) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        with contextlib.suppress(ValueError):  # set in another context: nothing of it is left here
            _fields.reset(token)
