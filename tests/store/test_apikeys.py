"""API keys: the plaintext is shown once, only its hash is stored, verification checks the whole key in constant time,
use is recorded at most once a minute, and a disabled user's keys do not verify."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store.apikeys import (
    active_api_keys,
    create_api_key,
    find_api_key,
    hash_key,
    owned_active_key,
    revoke_api_key,
    verify_api_key,
)
from store.base import utcnow
from store.db import session_scope
from store.models import ApiKey, User
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


def test_use_is_recorded_at_most_once_a_minute(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        plaintext = create_api_key(s, make_user(s)).plaintext
    start = utcnow()
    for offset, recorded in ((0, 0), (59, 0), (60, 60), (61, 60), (125, 125)):
        with session_scope(factory) as s:
            row = find_api_key(s, plaintext, now=start + timedelta(seconds=offset))
            assert row is not None
            assert row.last_used_at == start + timedelta(seconds=recorded), offset
            writes = s.dirty
            assert bool(writes) == (offset == recorded), offset  # a request that records nothing writes nothing


def test_the_hash_is_compared_in_constant_time(factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    with session_scope(factory) as s:
        plaintext = create_api_key(s, make_user(s)).plaintext
    compared: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def compare_digest(a: str, b: str) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr("store.apikeys.hmac.compare_digest", compare_digest)
    with factory() as s:
        assert verify_api_key(s, plaintext) is not None
    assert compared == [(hash_key(plaintext), hash_key(plaintext))]


def test_a_disabled_users_keys_do_not_verify(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        user = make_user(s)
        plaintext = create_api_key(s, user).plaintext
        user.disabled_at = utcnow()
    with factory() as s:
        assert verify_api_key(s, plaintext) is None
        assert s.scalars(select(ApiKey)).one().last_used_at is None


def test_listing_and_finding_keys_see_only_the_users_working_keys(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        ada, bob = make_user(s), make_user(s)
        first, revoked, second = (create_api_key(s, ada, name=n).row for n in ("first", "revoked", "second"))
        revoke_api_key(revoked)
        bobs = create_api_key(s, bob).row
        ids = {row.name: row.id for row in (first, revoked, second)}
    with factory() as s:
        ada_again = s.get(User, ada.id)
        assert ada_again is not None
        assert [k.name for k in active_api_keys(s, ada_again)] == ["first", "second"]
        found = owned_active_key(s, ada_again, ids["second"])
        assert found is not None and found.name == "second"
        assert owned_active_key(s, ada_again, ids["revoked"]) is None
        assert owned_active_key(s, ada_again, bobs.id) is None
        assert owned_active_key(s, ada_again, uuid.uuid4()) is None
