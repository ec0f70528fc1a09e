"""`/session`: a browser signs in with an API key and gets a session cookie (an `EventSource` cannot send an
`Authorization` header), reads its session back (a reloaded page gets its CSRF token again), and signs out.

The cookie `netsynth_session` is `HttpOnly; SameSite=Strict; Path=/`, `Secure` when the request came over https (to
the API, or to a proxy that NETSYNTH_FORWARDED_ALLOW_IPS trusts and that says so in X-Forwarded-Proto) or when
NETSYNTH_SECURE_COOKIES is set, and lasts the session's lifetime (`NETSYNTH_SESSION_HOURS`); only a hash of its token
is stored (`store.sessions`).
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request, Response

from api.deps import (
    SESSION_COOKIE,
    CurrentWebSession,
    SessionDep,
    SettingsDep,
    get_settings,
    limit_rate,
    refuse,
)
from api.errors import Unauthenticated
from api.openapi import RATE_LIMITED, ProblemRoute, problems
from api.schemas import UserOut
from api.schemas.session import SessionIn, SessionOut
from domain.errors import RateLimited
from store.apikeys import find_api_key
from store.models import WebSession
from store.sessions import end_session, start_session

router = APIRouter(route_class=ProblemRoute, prefix="/session", tags=["session"])


def _out(row: WebSession) -> SessionOut:
    return SessionOut(user=UserOut.model_validate(row.user), csrf_token=row.csrf_token, expires_at=row.expires_at)


def _set_cookie(response: Response, request: Request, token: str, max_age: int) -> None:
    """Set the session cookie to `token` for `max_age` seconds (0: clear it)."""
    secure = get_settings(request).secure_cookies or request.url.scheme == "https"
    response.set_cookie(SESSION_COOKIE, token, max_age=max_age, path="/", secure=secure, httponly=True,
                        samesite="strict")


@router.post("", responses=problems({
    Unauthenticated: "The API key was not accepted: it is unknown, wrong or revoked, or its user is disabled.",
    RateLimited: RATE_LIMITED,
}))
def sign_in(body: SessionIn, request: Request, response: Response, session: SessionDep,
            settings: SettingsDep) -> SessionOut:
    """Sign a browser in with an API key: the answer sets the session cookie and holds the session's CSRF token."""
    key = find_api_key(session, body.api_key)
    if key is None:
        refuse(request, Unauthenticated("the API key was not accepted: it is unknown, wrong or revoked, or its user is "
                                        "disabled", invalid_token=True))
    limit_rate(request, key.user_id)
    lifetime = timedelta(hours=settings.session_hours)
    issued = start_session(session, key, lifetime)
    _set_cookie(response, request, issued.token, int(lifetime.total_seconds()))
    return _out(issued.row)


@router.get("")
def read_session(row: CurrentWebSession) -> SessionOut:
    """The session the session cookie names: who is signed in, its CSRF token and when it ends."""
    return _out(row)


@router.delete("", status_code=204)
def sign_out(row: CurrentWebSession, session: SessionDep, request: Request, response: Response) -> None:
    """Sign out: the session ends and the answer clears its cookie."""
    end_session(session, row)
    _set_cookie(response, request, "", 0)
