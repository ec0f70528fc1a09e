"""`/datasets`: placeholder router, filled in by its owner."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/datasets", tags=["datasets"])
