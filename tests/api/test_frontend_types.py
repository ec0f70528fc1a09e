"""The dashboard's API types are generated from a committed copy of the OpenAPI document (`frontend/openapi.json`,
by `npm run gen:api`); the dashboard's own test checks the types against that copy, and this one checks the copy
against the document the app serves, so a route or schema change that was not regenerated fails here."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings

COMMITTED = Path(__file__).resolve().parents[2] / "frontend" / "openapi.json"


def test_committed_openapi_document_is_the_live_one(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'openapi.db'}", blob_dir=tmp_path / "blobs")
    with TestClient(create_app(settings)) as client:
        live = client.get("/api/v1/openapi.json").json()
    committed = json.loads(COMMITTED.read_text())
    changed = sorted(set(live["paths"]) ^ set(committed["paths"])) or sorted(
        name for name in set(live["components"]["schemas"]) | set(committed["components"]["schemas"])
        if live["components"]["schemas"].get(name) != committed["components"]["schemas"].get(name))
    assert live == committed, f"frontend/openapi.json is stale (differs at {changed[:10]}): run `npm run gen:api` " \
                              "in frontend/ and commit openapi.json with src/api/schema.d.ts"
