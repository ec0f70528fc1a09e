"""Browser sessions, the dashboard's sign-in: made from an API key and named by a random token that only the
browser's cookie holds (the table keeps its SHA-256 hash), each with a CSRF token the page sends back with every
change it asks for. A session ends when it expires, when it is deleted (sign-out), and as soon as its API key is
revoked or its user disabled."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session, contains_eager

from store.apikeys import hash_key, record_use
from store.base import utcnow
from store.models import ApiKey, WebSession

TOKEN_BYTES = 32
"""Random bytes of a session token and of a CSRF token (43 URL-safe characters each)."""


@dataclass(frozen=True)
class IssuedSession:
    """A session just started: the stored row and its token, which only the browser's cookie will hold."""

    row: WebSession
    token: str


def start_session(session: Session, key: ApiKey, lifetime: timedelta, now: datetime | None = None) -> IssuedSession:
    """Start a session of `key`'s user that lasts `lifetime` (sessions already expired are deleted)."""
    now = now or utcnow()
    session.execute(delete(WebSession).where(WebSession.expires_at <= now))
    token = secrets.token_urlsafe(TOKEN_BYTES)
    row = WebSession(token_hash=hash_key(token), user_id=key.user_id, api_key_id=key.id, created_at=now,
                     csrf_token=secrets.token_urlsafe(TOKEN_BYTES), expires_at=now + lifetime)
    session.add(row)
    session.flush()
    return IssuedSession(row=row, token=token)


_WEB_SESSION = (select(WebSession).join(WebSession.api_key).join(ApiKey.user)
                .options(contains_eager(WebSession.api_key).contains_eager(ApiKey.user))
                .where(WebSession.token_hash == bindparam("token_hash")))
"""A session with its key and the key's user, in one statement built once."""


def find_session(session: Session, token: str, now: datetime | None = None) -> WebSession | None:
    """The live session `token` names (its key's use recorded, key and user loaded), or None when it is unknown,
    expired or deleted, or its key is revoked or its user disabled."""
    now = now or utcnow()
    row = session.scalars(_WEB_SESSION, {"token_hash": hash_key(token)}).one_or_none()
    if row is None or row.expires_at <= now:
        return None
    key = row.api_key
    if key.revoked_at is not None or key.user.disabled_at is not None:
        return None
    record_use(key, now)
    return row


def csrf_matches(row: WebSession, presented: str | None) -> bool:
    """Whether `presented` is the session's CSRF token (compared in constant time)."""
    return presented is not None and hmac.compare_digest(row.csrf_token.encode(), presented.encode())


def end_session(session: Session, row: WebSession) -> None:
    """Delete the session: its cookie no longer signs anyone in."""
    session.delete(row)
