"""`GET /health`: unauthenticated liveness that checks the database answers."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from api.deps import SessionDep
from api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health")
def health(session: SessionDep) -> Health:
    """Report ok when the database answers a trivial query; 503 when it does not."""
    try:
        session.execute(text("SELECT 1")).scalar_one()
    except SQLAlchemyError as exc:
        raise HTTPException(status_code=503, detail="the database does not answer") from exc
    return Health(status="ok", database="ok")
