"""`GET /health`: unauthenticated liveness that checks the database answers."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from api.deps import SessionDep
from api.openapi import ProblemRoute, problems
from api.schemas import Health
from domain.errors import Unavailable

router = APIRouter(route_class=ProblemRoute, tags=["health"])
PATH = "/health"
"""The health probe's path under the API's prefix."""


@router.get(PATH, responses=problems({Unavailable: "The database does not answer."}))
def health(session: SessionDep) -> Health:
    """Report ok when the database answers a trivial query; 503 when it does not."""
    try:
        session.execute(text("SELECT 1")).scalar_one()
    except SQLAlchemyError as exc:
        raise Unavailable("the database does not answer") from exc
    return Health(status="ok", database="ok")
