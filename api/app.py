"""The FastAPI application factory: JSON routes under `/api/v1`, OpenAPI docs at `/docs`, the web dashboard at `/`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from api.admission import Admission, admission_limit
from api.bodies import BodyFirst
from api.dashboard import install_dashboard
from api.errors import install_error_handlers
from api.fanout import close_hub
from api.logs import RequestContext, install_logging
from api.metrics import PATH as METRICS_PATH
from api.metrics import install_metrics, record_request
from api.openapi import install_problem_schema
from api.routes import datasets, explanations, health, jobs, me, models, reports, samples, search, session
from api.tasks import make_sender
from infra.settings import Settings
from store.db import make_engine, make_session_factory

API_PREFIX = "/api/v1"
PROBES = frozenset({API_PREFIX + health.PATH, METRICS_PATH})
"""The health probe and the metrics scrape: no API key, so never rate limited, and never kept waiting for
admission (a probe must answer however busy the API is)."""
STREAMED = frozenset({API_PREFIX + "/datasets"})
"""The paths whose routes receive their own bodies as they come (an upload, written to disk as it arrives): every
other body is received whole before its request goes on (`api.bodies`)."""


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app on `settings` (read from the environment when omitted), with its own database engine."""
    settings = settings or Settings()
    engine = make_engine(settings.database_url, echo=settings.sql_echo)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        close_hub(app.state.session_factory)
        engine.dispose()

    app = FastAPI(
        title="netsynth",
        summary="Upload a labelled dataset, get a trained, compressed, explained network.",
        version="0.1.0",
        docs_url="/docs",
        openapi_url=f"{API_PREFIX}/openapi.json",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.sender = make_sender(settings)
    install_error_handlers(app)
    app.include_router(health.router, prefix=API_PREFIX)
    # jobs first: the router tries each included router's routes in turn, and the status poll, the most frequent
    # request, is found after a third as many tries as behind the others (no two routers' paths overlap)
    for module in (jobs, session, me, datasets, samples, search, models, reports, explanations):
        app.include_router(module.router, prefix=API_PREFIX)
    install_problem_schema(app)
    install_dashboard(app, settings.dashboard_dir)
    install_logging(settings.log_format)
    app.add_middleware(Admission, limit=admission_limit(engine), exempt=PROBES)
    app.add_middleware(BodyFirst, routes=lambda: app.router.routes, timeout=settings.body_timeout_s,
                       streamed=STREAMED)
    app.add_middleware(RequestContext, observe=record_request)
    # the scheme and client of a request that came through a trusted proxy are the ones it forwards (the server
    # runs without uvicorn's own copy of this: `api.cli.serve`)
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
    install_metrics(app)
    return app
