"""The layout's import arrows hold: core imports no other package of ours, the API imports no engine package
(that serving requests never loads JAX is tests/api/test_app.py's), the Python client nothing of the server."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "domain", "synthesis", "infra", "store", "workers", "api", "netsynth")
ALLOWED = {
    "core": set(),
    "domain": set(),  # the product's rules and formats, beneath everything but the engine's core
    "synthesis": {"core", "domain"},
    "infra": {"domain"},  # settings, logging, the broker's configuration, rate limits: shared by the service
    "store": {"domain", "infra"},
    "workers": {"core", "domain", "synthesis", "infra", "store"},
    "api": {"domain", "infra", "store", "netsynth"},  # the `netsynth` command hands its remote commands to the client
    "netsynth": set(),  # the Python client: nothing of the server
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_the_layout_allows(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path) & set(PACKAGES):
            if name != package and name not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, bad


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is a dev dependency"
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_reads_no_environment() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "core").rglob("*.py")
                 if "os.environ" in p.read_text(encoding="utf-8") or "getenv" in p.read_text(encoding="utf-8")]
    assert not offenders

