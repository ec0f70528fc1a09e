"""Prometheus metrics at `GET /metrics` (text exposition format, not in the OpenAPI document), for a scraper that
sends `Authorization: Bearer <NETSYNTH_METRICS_TOKEN>`. Without that setting the route answers 404: nothing is served
to anyone. A wrong or missing token is 401 and counts against the client's address like any request that does not
authenticate (`api.deps.refuse`).

* `netsynth_http_requests_total{route,method,status}` and `netsynth_http_request_duration_seconds{route,method}`
  (seconds until the response began: for an event stream, until it opened), counted by `record_request`, which the
  request middleware calls; `route` is the path template, never the raw path.
* Read from the database and the broker (`StoreCollector`), so every API process reports the same, at most once every
  NETSYNTH_METRICS_REFRESH_S seconds (60) per process: scrapes in between answer the figures last read, so however
  often and by however many scrapers it is scraped, the database counts its tables at most that often.
  `netsynth_jobs{state}`, `netsynth_device_seconds_total` (spent by all jobs), `netsynth_trials_total` (trials the
  searches reported: `candidate` events), `netsynth_candidates{status}` (finished jobs' trials),
  `netsynth_trial_tasks{state}` (trials sent to other workers), `netsynth_queue_depth{queue}` (tasks waiting: the
  Redis list's length, or the filesystem broker's message files) and `netsynth_source_up{source}` (1 when the
  database / broker answered that read).

Several API processes (`uvicorn --workers N`): start them with `PROMETHEUS_MULTIPROC_DIR` naming an empty folder that
they share; each process then writes its counts there and a scrape of any of them adds up all of them
(prometheus_client's multiprocess mode, https://prometheus.github.io/client_python/multiprocess/).
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import redis
from fastapi import FastAPI, Request, Response
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from api.deps import refuse
from api.errors import Unauthenticated
from domain.errors import NotFound
from infra.broker import QUEUES, filesystem_dir, is_redis
from infra.settings import Settings
from store.models import Candidate, CandidateStatus, Job, JobEvent, JobState, TrialState, TrialTask

PATH = "/metrics"
"""Where the metrics are served (outside the API's prefix, where scrapers look by default)."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter("netsynth_http_requests", "HTTP requests answered, by route template, method and status.",
                   ["route", "method", "status"])
LATENCY = Histogram("netsynth_http_request_duration_seconds", "Seconds until the response began, by route template.",
                    ["route", "method"], buckets=LATENCY_BUCKETS)

log = logging.getLogger(__name__)


def record_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request (methods outside METHODS are counted as OTHER)."""
    method = method if method in METHODS else "OTHER"
    REQUESTS.labels(route, method, str(status)).inc()
    LATENCY.labels(route, method).observe(seconds)


def _by(family: GaugeMetricFamily, values: Iterable[str], counts: Mapping[Any, int]) -> GaugeMetricFamily:
    """`family` with one sample per value (enum members are strings), 0 for those without rows."""
    for value in values:
        family.add_metric([str(value)], counts.get(value, 0))
    return family


def _counts(session: Session, column: InstrumentedAttribute[Any]) -> dict[Any, int]:
    """How many rows of `column`'s table have each value of it."""
    return {value: count for value, count in session.execute(select(column, func.count()).group_by(column))}


UNFINISHED = ("proposed", "remote")
"""Statuses of a trial's `candidate` events before it ends (each trial reports again when it ends)."""


class StoreCollector(Collector):
    """The gauges and counters read from the database and the broker: at the first scrape, then again at a scrape
    `settings.metrics_refresh_s` or more after the last read (`clock`'s seconds); the scrapes in between, however many,
    answer what that read found. One read at a time: a scrape that comes during one waits for it and answers it."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.factory, self.settings, self.clock = factory, settings, clock
        self.queues = sorted({*QUEUES, settings.default_queue})
        broker = settings.broker_url
        self.redis = (redis.Redis.from_url(broker, socket_timeout=2, socket_connect_timeout=2)
                      if is_redis(broker) else None)
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._figures: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.settings.metrics_refresh_s:
                self._figures, self._read_at = list(self._read()), now
            return self._figures

    def _read(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("netsynth_source_up", "Whether the source answered the last read.", labels=["source"])
        try:
            yield from self._database()
            up.add_metric(["database"], 1)
        except SQLAlchemyError as exc:
            log.warning("metrics: the database did not answer: %s", str(exc).splitlines()[0])
            up.add_metric(["database"], 0)
        try:
            yield self._queue_depth()
            up.add_metric(["broker"], 1)
        except (redis.RedisError, OSError) as exc:
            log.warning("metrics: the broker did not answer: %s", exc)
            up.add_metric(["broker"], 0)
        yield up

    def _database(self) -> list[Metric]:
        with self.factory() as session:
            jobs, candidates, tasks = (_counts(session, c) for c in (Job.state, Candidate.status, TrialTask.state))
            seconds = session.scalar(select(func.coalesce(func.sum(Job.device_seconds), 0.0)))
            ended = JobEvent.payload["status"].as_string().not_in(UNFINISHED)  # a trial's first event proposes it
            trials = session.scalar(select(func.count()).select_from(JobEvent).where(JobEvent.kind == "candidate",
                                                                                      ended))
        return [
            _by(GaugeMetricFamily("netsynth_jobs", "Jobs by state.", labels=["state"]), JobState, jobs),
            CounterMetricFamily("netsynth_device_seconds", "Device-seconds spent by all jobs.", float(seconds or 0)),
            CounterMetricFamily("netsynth_trials", "Search trials that ended (trained, stopped, failed or cancelled).",
                                trials or 0),
            _by(GaugeMetricFamily("netsynth_candidates", "Trials of finished jobs, by status.", labels=["status"]),
                CandidateStatus, candidates),
            _by(GaugeMetricFamily("netsynth_trial_tasks", "Trials sent to other workers, by state.",
                                  labels=["state"]), TrialState, tasks),
        ]

    def _queue_depth(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily("netsynth_queue_depth", "Tasks waiting in the broker, by queue.", labels=["queue"])
        folder = filesystem_dir(self.settings.broker_url)
        if self.redis is not None:
            for queue in self.queues:
                family.add_metric([queue], float(self.redis.llen(queue)))
        elif folder is not None:
            names = [p.name.partition(".")[2] for p in folder.iterdir()] if folder.is_dir() else []
            for queue in self.queues:
                family.add_metric([queue], float(names.count(f"{queue}.msg")))
        return family


class _Process(Collector):
    """This process's own metrics (requests; without multiprocess mode, also its memory and CPU)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def exposition(store: Collector) -> bytes:
    """The text exposition of every metric: the requests of all API processes (of this one without
    PROMETHEUS_MULTIPROC_DIR), then `store`'s."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Process())
    registry.register(store)
    return generate_latest(registry)


def _bearer(request: Request) -> str:
    """The token of the request's `Authorization: Bearer` header ('' without one)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def install_metrics(app: FastAPI) -> None:
    """Serve `GET /metrics` on `app` to the bearer of NETSYNTH_METRICS_TOKEN (404 without that setting; left out of
    the OpenAPI document)."""
    settings: Settings = app.state.settings
    store = StoreCollector(app.state.session_factory, settings)
    expected = settings.metrics_token.encode()

    def metrics(request: Request) -> Response:
        if not expected:
            raise NotFound("metrics are not served: the server has no NETSYNTH_METRICS_TOKEN")
        presented = _bearer(request)
        if not hmac.compare_digest(presented.encode(), expected):
            refuse(request, Unauthenticated("metrics need 'Authorization: Bearer <the server's "
                                            "NETSYNTH_METRICS_TOKEN>'", invalid_token=bool(presented)))
        return Response(exposition(store), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route(PATH, metrics, methods=["GET"], include_in_schema=False)
