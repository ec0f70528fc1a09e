"""`/me`: the user the request's API key belongs to."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentUser, SessionDep
from api.openapi import ProblemRoute
from api.schemas import UserOut, UserUpdate

router = APIRouter(route_class=ProblemRoute, prefix="/me", tags=["users"])


@router.get("")
def read_me(user: CurrentUser) -> UserOut:
    """Return the authenticated user."""
    return UserOut.model_validate(user)


@router.patch("")
def update_me(body: UserUpdate, user: CurrentUser, session: SessionDep) -> UserOut:
    """Change the authenticated user's display name."""
    user.display_name = body.display_name
    session.flush()
    return UserOut.model_validate(user)
