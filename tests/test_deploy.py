"""The production compose file: the four services, health checks, migrations at start, a GPU worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def test_services_and_health_checks() -> None:
    services = _compose()["services"]
    assert {"postgres", "redis", "api", "worker"} <= set(services)
    for name in ("postgres", "redis", "api"):
        assert "healthcheck" in services[name], name
    assert services["api"]["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                             "redis": {"condition": "service_healthy"}}
    assert services["worker"]["depends_on"]["api"]["condition"] == "service_healthy"


def test_api_migrates_before_serving_and_workers_share_the_blob_volume() -> None:
    services = _compose()["services"]
    command = " ".join(services["api"]["command"])
    assert command.index("netsynth migrate") < command.index("netsynth serve")
    for name in ("api", "worker"):
        assert "blobs:/data" in services[name]["volumes"]
        env = services[name]["environment"]
        assert env["NETSYNTH_BROKER_URL"].startswith("redis://redis:")
        assert env["NETSYNTH_DATABASE_URL"].startswith("postgresql+psycopg://")


def test_worker_reserves_gpus_and_serves_the_gpu_queue() -> None:
    worker = _compose()["services"]["worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    assert worker["command"] == ["netsynth", "worker", "--queues", "gpu"]
    assert worker["build"]["args"]["EXTRAS"] == "gpu"


def test_dockerfile_installs_every_package_the_services_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for folder in ("core", "synthesis", "store", "workers", "api", "migrations"):
        assert f"COPY {folder} ./{folder}" in dockerfile
    assert "alembic.ini" in dockerfile


def test_dockerfile_builds_the_dashboard_the_api_serves() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "npm ci" in dockerfile and "npm run build" in dockerfile
    assert "COPY --from=dashboard /frontend/dist ./frontend/dist" in dockerfile  # api/dashboard.py's default folder
