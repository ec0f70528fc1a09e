"""API keys: issued once in plaintext, stored as a lookup prefix plus a SHA-256 hash."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.base import utcnow
from store.models import ApiKey, User

KEY_PREFIX = "ns_"
PREFIX_CHARS = 12


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


def verify_api_key(session: Session, plaintext: str) -> User | None:
    """Return the user a presented key belongs to, or None if it is unknown, wrong or revoked."""
    prefix = _prefix(plaintext)
    if prefix is None:
        return None
    row = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.key_hash, hash_key(plaintext)):
        return None
    row.last_used_at = utcnow()
    return row.user


def revoke_api_key(key: ApiKey) -> None:
    """Mark `key` revoked so that it no longer verifies."""
    key.revoked_at = utcnow()
