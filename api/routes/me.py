"""`/me`: the user the request's API key belongs to, its usage against its quotas, and its API keys."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from api.deps import CurrentUser, SessionDep, SettingsDep
from api.openapi import ProblemRoute, problems
from api.schemas import UserOut, UserUpdate
from api.schemas.me import ApiKeyCreate, ApiKeyCreated, ApiKeyOut, MeOut, QuotaOut, QuotasOut
from domain.errors import NotFound, TooManyKeys
from store.apikeys import KEY_PREFIX, active_api_keys, issue_api_key, owned_active_key, revoke_api_key
from store.models import ApiKey
from store.quotas import Quota, usage

router = APIRouter(route_class=ProblemRoute, prefix="/me", tags=["users"])


def _quota(quota: Quota) -> QuotaOut:
    return QuotaOut(used=quota.used, limit=quota.limit, left=quota.left, custom=quota.overridden)


def _key(row: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(id=row.id, name=row.name, prefix=KEY_PREFIX + row.prefix, created_at=row.created_at,
                     last_used_at=row.last_used_at)


@router.get("")
def read_me(user: CurrentUser, session: SessionDep, settings: SettingsDep) -> MeOut:
    """Return the authenticated user, with its usage against each quota."""
    quotas = usage(session, user, settings)
    return MeOut(**UserOut.model_validate(user).model_dump(), quotas=QuotasOut(
        active_jobs=_quota(quotas.active_jobs), device_seconds=_quota(quotas.device_seconds),
        storage_bytes=_quota(quotas.storage_bytes)))


@router.patch("")
def update_me(body: UserUpdate, user: CurrentUser, session: SessionDep) -> UserOut:
    """Change the authenticated user's display name."""
    user.display_name = body.display_name
    session.flush()
    return UserOut.model_validate(user)


@router.get("/keys")
def list_keys(user: CurrentUser, session: SessionDep) -> list[ApiKeyOut]:
    """The caller's API keys that work (not deleted), oldest first: names and prefixes, never secrets."""
    return [_key(row) for row in active_api_keys(session, user)]


@router.post("/keys", status_code=201, responses=problems({
    TooManyKeys: "The caller already has as many API keys as it may have: delete one to make room.",
}))
def create_key(body: ApiKeyCreate, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> ApiKeyCreated:
    """Create an API key (up to the service's limit per user); the response holds its secret, which is shown this once
    and never again."""
    issued = issue_api_key(session, user, body.name, settings.max_api_keys)
    return ApiKeyCreated(**_key(issued.row).model_dump(), key=issued.plaintext)


@router.delete("/keys/{key_id}", status_code=204, responses=problems({
    NotFound: "No such key of the caller's (or it is already deleted).",
}))
def delete_key(key_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> None:
    """Delete one of the caller's API keys: from the next request on it answers 401 (it may be this one)."""
    row = owned_active_key(session, user, key_id)
    if row is None:
        raise NotFound(f"no API key {key_id}")
    revoke_api_key(row)
