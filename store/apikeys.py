"""API keys: issued once in plaintext, stored as a lookup prefix plus a SHA-256 hash; a disabled user's keys and
revoked keys never verify. Use is recorded at most once a minute per key, so most requests write nothing. A user
makes its own keys up to a limit (`issue_api_key`)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session, contains_eager

from domain.errors import TooManyKeys
from store.base import utcnow
from store.models import ApiKey, User
from store.users import lock_user

KEY_PREFIX = "ns_"
PREFIX_CHARS = 12
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""How stale `last_used_at` may get: a key used again within this time of its recorded use writes nothing."""


@dataclass(frozen=True)
class IssuedKey:
    """A freshly created key: the stored row and the plaintext, which is never retrievable again."""

    row: ApiKey
    plaintext: str


def hash_key(plaintext: str) -> str:
    """Return the hex SHA-256 digest stored for a key."""
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def _prefix(plaintext: str) -> str | None:
    if not plaintext.startswith(KEY_PREFIX) or len(plaintext) <= len(KEY_PREFIX) + PREFIX_CHARS:
        return None
    return plaintext[len(KEY_PREFIX) : len(KEY_PREFIX) + PREFIX_CHARS]


def create_api_key(session: Session, user: User, name: str = "") -> IssuedKey:
    """Create a key for `user`; the returned plaintext is the only copy that will ever exist."""
    secret = secrets.token_urlsafe(32)  # 43 characters, longer than the lookup prefix
    plaintext = KEY_PREFIX + secret
    row = ApiKey(user_id=user.id, name=name, prefix=secret[:PREFIX_CHARS], key_hash=hash_key(plaintext))
    session.add(row)
    session.flush()
    return IssuedKey(row=row, plaintext=plaintext)


def issue_api_key(session: Session, user: User, name: str, limit: int) -> IssuedKey:
    """Create a key for `user` unless it already has `limit` keys that are not revoked (TooManyKeys; nothing is
    written). The count and the insert hold the user's lock (`lock_user`): concurrent requests cannot pass the limit
    together."""
    lock_user(session, user)
    held = session.scalar(select(func.count()).select_from(ApiKey)
                          .where(ApiKey.user_id == user.id, ApiKey.revoked_at.is_(None))) or 0
    if held >= limit:
        raise TooManyKeys(f"you have {held} API keys, the most you may have: delete one you no longer use "
                          "(DELETE /api/v1/me/keys/{key_id}) to make room")
    return create_api_key(session, user, name)


def record_use(row: ApiKey, now: datetime) -> None:
    """Move `last_used_at` to `now` unless it is already within LAST_USED_RESOLUTION of it."""
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        row.last_used_at = now


_KEY = (select(ApiKey).join(ApiKey.user).options(contains_eager(ApiKey.user))
        .where(ApiKey.prefix == bindparam("prefix")))
"""A key with its user, in one statement built once (every authenticated request runs it; building a statement
costs more than running it)."""


def find_api_key(session: Session, plaintext: str, now: datetime | None = None) -> ApiKey | None:
    """The key row a presented key matches (its use recorded, its user loaded), or None if it is unknown, wrong,
    revoked, or its user is disabled. The hash is compared in constant time."""
    prefix = _prefix(plaintext)
    if prefix is None:
        return None
    row = session.scalars(_KEY, {"prefix": prefix}).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.key_hash, hash_key(plaintext)):
        return None
    if row.user.disabled_at is not None:
        return None
    record_use(row, now or utcnow())
    return row


def verify_api_key(session: Session, plaintext: str) -> User | None:
    """Return the user a presented key belongs to, or None where `find_api_key` finds no key."""
    row = find_api_key(session, plaintext)
    return None if row is None else row.user


def active_api_keys(session: Session, user: User) -> list[ApiKey]:
    """The user's keys that are not revoked, oldest first."""
    query = select(ApiKey).where(ApiKey.user_id == user.id, ApiKey.revoked_at.is_(None))
    return list(session.scalars(query.order_by(ApiKey.created_at, ApiKey.id)))


def owned_active_key(session: Session, user: User, key_id: uuid.UUID) -> ApiKey | None:
    """The user's key `key_id` if it is not revoked; None for a missing, revoked or another user's key alike."""
    row = session.get(ApiKey, key_id)
    if row is None or row.user_id != user.id or row.revoked_at is not None:
        return None
    return row


def revoke_api_key(key: ApiKey) -> None:
    """Mark `key` revoked so that it no longer verifies."""
    key.revoked_at = utcnow()
