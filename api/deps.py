"""Typed request dependencies: the settings, a database session per request, and the authenticated user (whose request
rate is limited here, so every authenticated route is limited and health and metrics are not).

A request authenticates with `Authorization: Bearer <api key>` or with the session cookie a browser got from signing
in (`POST /api/v1/session`); a cookie request that asks for a change (any method but GET, HEAD and OPTIONS) must
also send the session's CSRF token in the `X-CSRF-Token` header. All of a user's keys and sessions share one rate
(`limit_rate`); a request that does not authenticate is counted against its client address (`refuse`), the one a
proxy that NETSYNTH_FORWARDED_ALLOW_IPS trusts forwards, so that a flood of made-up keys is refused too.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
from celery import Celery
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.errors import CsrfRejected, Unauthenticated
from domain.errors import RateLimited
from infra.ratelimit import RateLimits, address_key, make_limits
from infra.settings import Settings
from store.apikeys import find_api_key
from store.base import utcnow
from store.models import ApiKey, User, WebSession
from store.sessions import csrf_matches, find_session

SESSION_COOKIE = "netsynth_session"
"""The cookie that carries a browser's session token."""
CSRF_HEADER = "X-CSRF-Token"
"""The header a cookie request that asks for a change carries the session's CSRF token in."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing, so a cookie request needs no CSRF token for them."""
SIGN_IN = "sign in with POST /api/v1/session"

_bearer = HTTPBearer(auto_error=False, description="An API key from `netsynth user create`.")
_cookie = APIKeyCookie(name=SESSION_COOKIE, auto_error=False, description=(
    f"A browser's session, from signing in with an API key (`POST /api/v1/session`). A request that asks for a "
    f"change (POST, PUT, PATCH, DELETE) must also send the session's CSRF token in the `{CSRF_HEADER}` header."))


@dataclass(frozen=True)
class Credential:
    """What a request authenticated with: an API key, or the browser session (`session_id`) made from one."""

    key_id: uuid.UUID
    session_id: uuid.UUID | None = None

    def holds(self, session: Session, now: datetime | None = None) -> bool:
        """Whether the credential still signs its user in: the session not ended (signed out, expired), the key not
        revoked, its user not disabled. One query."""
        query = (select(ApiKey.id).join(User, User.id == ApiKey.user_id)
                 .where(ApiKey.id == self.key_id, ApiKey.revoked_at.is_(None), User.disabled_at.is_(None)))
        if self.session_id is not None:
            query = query.join(WebSession, WebSession.api_key_id == ApiKey.id).where(
                WebSession.id == self.session_id, WebSession.expires_at > (now or utcnow()))
        return session.scalar(query) is not None


CREDENTIAL = "netsynth_credential"
"""The request state's attribute that holds the request's `Credential`, once authenticated."""


def credential_of(request: Request) -> Credential:
    """The credential the request authenticated with (`get_current_user` or `get_web_session` ran first)."""
    credential: Credential = getattr(request.state, CREDENTIAL)
    return credential


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session that commits when the request succeeds and rolls back when it raises, then closes.

    Made in the event loop (a session takes no connection before its first statement); its end, which waits for the
    database, runs in one worker thread, shielded from a cancelled request so that its connection always goes back.
    """
    factory: sessionmaker[Session] = request.app.state.session_factory
    session = factory()
    try:
        yield session
    except BaseException:
        with anyio.CancelScope(shield=True):
            await run_in_threadpool(_end, session, False)
        raise
    with anyio.CancelScope(shield=True):
        await run_in_threadpool(_end, session, True)


def _end(session: Session, commit: bool) -> None:
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


def get_limits(request: Request) -> RateLimits:
    """The app's rate limits, made from its settings on first use."""
    limits: RateLimits | None = getattr(request.app.state, "rate_limits", None)
    if limits is None:
        limits = request.app.state.rate_limits = make_limits(get_settings(request))
    return limits


def get_sender(request: Request) -> Celery:
    """The Celery client the app publishes tasks with."""
    sender: Celery = request.app.state.sender
    return sender


async def _settings(request: Request) -> Settings:
    return get_settings(request)


async def _sender(request: Request) -> Celery:
    return get_sender(request)


# the dependencies that need no thread are coroutines: FastAPI runs a plain function's in a worker thread
SenderDep = Annotated[Celery, Depends(_sender)]
SettingsDep = Annotated[Settings, Depends(_settings)]
# scope="function": the commit runs before the response is sent, so a failed commit is never reported as success.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# built once: a statement made per request costs more CPU than its execution (construction, then its cache key)
def limit_rate(request: Request, user_id: uuid.UUID) -> None:
    """Count one request of the user `user_id`, whichever of its API keys or sessions sent it; RateLimited when the
    user has sent more requests than its rate allows."""
    limiter = get_limits(request).users
    retry_after = limiter.hit(user_id.hex)
    if retry_after is not None:
        raise RateLimited(retry_after, f"your account sent more than {limiter.requests} requests in "
                          f"{limiter.seconds} s (all its API keys and sessions together); retry after the seconds "
                          "Retry-After says")


def refuse(request: Request, error: Unauthenticated) -> NoReturn:
    """Count a request that did not authenticate against its client address, then raise `error`; or RateLimited
    when the address has sent more such requests than their rate allows (a valid key from the same address still
    works: its user's rate is its own)."""
    limiter = get_limits(request).addresses
    address = address_key(request.client.host) if request.client is not None else "unknown"
    retry_after = limiter.hit(address)
    if retry_after is not None:
        raise RateLimited(retry_after, f"{address} sent more than {limiter.requests} requests that did not "
                          f"authenticate in {limiter.seconds} s; retry after the seconds Retry-After says") from error
    raise error


def get_web_session(
    request: Request, session: SessionDep, token: Annotated[str | None, Depends(_cookie)],
) -> WebSession:
    """The live session the session cookie names; Unauthenticated without one, CsrfRejected for a change asked
    without its CSRF token, RateLimited past its user's rate (or, unauthenticated, its address's)."""
    if token is None:
        refuse(request, Unauthenticated(f"no session cookie: {SIGN_IN}"))
    row = find_session(session, token)
    if row is None:
        refuse(request, Unauthenticated("the session cookie is unknown or its session has ended (expired, signed out, "
                                        f"or its API key revoked): {SIGN_IN} again", invalid_token=True))
    if request.method not in SAFE_METHODS:
        presented = request.headers.get(CSRF_HEADER)
        if not csrf_matches(row, presented):
            raise CsrfRejected(
                f"a request signed in with the session cookie must send the session's CSRF token in the {CSRF_HEADER} "
                f"header to {request.method} ({'it does not match' if presented else 'it is missing'}); "
                "GET /api/v1/session answers it")
    limit_rate(request, row.user_id)
    setattr(request.state, CREDENTIAL, Credential(row.api_key_id, row.id))
    return row


BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
"""The `Authorization: Bearer` credentials, if sent (no database work: FastAPI runs it in the event loop)."""
CookieDep = Annotated[str | None, Depends(_cookie)]
"""The session cookie's token, if sent (no database work either)."""


def get_current_user(request: Request, session: SessionDep, credentials: BearerDep, token: CookieDep) -> User:
    """The user whose API key the `Authorization: Bearer` header carries or, without that header, whose session the
    session cookie names (`get_web_session`); raise Unauthenticated otherwise, and RateLimited when the user has
    sent more requests than its rate allows (or, unauthenticated, its address has: `refuse`)."""
    if credentials is None and token is not None:
        return get_web_session(request, session, token).user
    if credentials is None:
        refuse(request, Unauthenticated(f"an API key is required: send 'Authorization: Bearer <key>', or {SIGN_IN}"))
    key = find_api_key(session, credentials.credentials)
    if key is None:
        refuse(request, Unauthenticated("the API key is unknown, wrong or revoked, or its user is disabled",
                                        invalid_token=True))
    limit_rate(request, key.user_id)
    setattr(request.state, CREDENTIAL, Credential(key.id))
    return key.user


AUTHENTICATES = "netsynth_authenticates"
"""The attribute of an endpoint that calls `get_current_user` itself rather than depending on it (`authenticates`)."""
F = TypeVar("F", bound=Callable[..., Any])


def authenticates(endpoint: F) -> F:
    """Mark an endpoint that authenticates its request by calling `get_current_user` itself, in the worker thread
    that does the rest of its database work (a dependency takes a thread of its own): its OpenAPI responses list
    what authenticating can answer all the same (`api.openapi.ProblemRoute`). It takes `BearerDep` and `CookieDep`."""
    setattr(endpoint, AUTHENTICATES, True)
    return endpoint


CurrentUser = Annotated[User, Depends(get_current_user)]
CurrentWebSession = Annotated[WebSession, Depends(get_web_session)]
