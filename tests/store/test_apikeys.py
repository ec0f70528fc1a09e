"""API keys: the plaintext is shown once, only its hash is stored, and verification checks the whole key."""

from __future__ import annotations

import hashlib

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store.apikeys import create_api_key, revoke_api_key, verify_api_key
from store.db import session_scope
from store.models import ApiKey
from tests.store.factories import make_user


def test_only_prefix_and_hash_are_stored(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        issued = create_api_key(s, make_user(s), name="laptop")
    with factory() as s:
        row = s.scalars(select(ApiKey)).one()
        stored = [str(v) for v in (row.prefix, row.key_hash, row.name)]
        assert issued.plaintext not in stored
        assert row.key_hash == hashlib.sha256(issued.plaintext.encode()).hexdigest()
        assert issued.plaintext.startswith("ns_" + row.prefix)


def test_verify_accepts_the_key_and_records_use(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        user = make_user(s)
        plaintext, user_id = create_api_key(s, user).plaintext, user.id
    with session_scope(factory) as s:
        found = verify_api_key(s, plaintext)
        assert found is not None and found.id == user_id
    with factory() as s:
        assert s.scalars(select(ApiKey)).one().last_used_at is not None


def test_verify_rejects_wrong_malformed_and_revoked_keys(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        plaintext = create_api_key(s, make_user(s)).plaintext
    tampered = plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")
    with factory() as s:
        assert verify_api_key(s, tampered) is None  # right prefix, wrong secret
        assert verify_api_key(s, "ns_short") is None
        assert verify_api_key(s, "") is None
        assert verify_api_key(s, "xx_" + plaintext[3:]) is None
    with session_scope(factory) as s:
        revoke_api_key(s.scalars(select(ApiKey)).one())
    with factory() as s:
        assert verify_api_key(s, plaintext) is None


def test_each_key_is_distinct(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        user = make_user(s)
        keys = [create_api_key(s, user).plaintext for _ in range(5)]
    assert len(set(keys)) == 5
    with factory() as s:
        assert all(verify_api_key(s, k) is not None for k in keys)
