"""The client's response types are written out by hand (the client may not import the server); this holds each to
the schema the API's OpenAPI document gives the same body, so a field added, renamed or dropped on either side
fails here rather than in a user's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from infra.settings import Settings
from netsynth import types

SCHEMA_OF = {
    types.Dataset: "DatasetOut",
    types.JobModel: "JobModel",
    types.Job: "JobOut",
    types.Model: "ModelOut",
    types.Prediction: "Prediction",
    types.Predictions: "PredictOut",
    types.Report: "ReportOut",
    types.Explanation: "ExplanationOut",
}


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder: Path = tmp_path_factory.mktemp("openapi")
    app = create_app(Settings(database_url=f"sqlite:///{folder / 'db.sqlite'}", blob_dir=folder / "blobs"))
    found: dict[str, Any] = app.openapi()["components"]["schemas"]
    app.state.engine.dispose()
    return found


@pytest.mark.parametrize("typed", list(SCHEMA_OF), ids=lambda t: t.__name__)
def test_client_type_has_the_fields_of_the_api_body(typed: type, schemas: dict[str, Any]) -> None:
    schema = schemas[SCHEMA_OF[typed]]
    assert set(typed.__annotations__) == set(schema["properties"]), SCHEMA_OF[typed]
