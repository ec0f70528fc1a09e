"""Typed request dependencies: the settings, a database session per request, and the authenticated user (whose key's
request rate is limited here, so every authenticated route is limited and health and metrics are not)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from api.errors import Unauthenticated
from store.apikeys import find_api_key
from store.db import session_scope
from store.errors import RateLimited
from store.models import User
from store.ratelimit import RateLimiter, make_limiter
from store.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API key from `netsynth user create`.")


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    """A session that commits when the request succeeds and rolls back when it raises."""
    factory: sessionmaker[Session] = request.app.state.session_factory
    with session_scope(factory) as session:
        yield session


def get_limiter(request: Request) -> RateLimiter:
    """The app's rate limiter, made from its settings on first use."""
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if limiter is None:
        limiter = request.app.state.rate_limiter = make_limiter(get_settings(request))
    return limiter


def get_sender(request: Request) -> Celery:
    """The Celery client the app publishes tasks with."""
    sender: Celery = request.app.state.sender
    return sender


SenderDep = Annotated[Celery, Depends(get_sender)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
# scope="function": the commit runs before the response is sent, so a failed commit is never reported as success.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_current_user(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    """The user whose API key the `Authorization: Bearer` header carries; raise Unauthenticated otherwise, and
    RateLimited when the key has sent more requests than its rate allows."""
    if credentials is None:
        raise Unauthenticated("an API key is required: send 'Authorization: Bearer <key>'")
    key = find_api_key(session, credentials.credentials)
    if key is None:
        raise Unauthenticated("the API key is unknown, wrong or revoked, or its user is disabled", invalid_token=True)
    limiter = get_limiter(request)
    retry_after = limiter.hit(key.id.hex)
    if retry_after is not None:
        raise RateLimited(retry_after, f"this API key sent more than {limiter.requests} requests in "
                          f"{limiter.seconds} s; retry after the seconds Retry-After says")
    return key.user


CurrentUser = Annotated[User, Depends(get_current_user)]
