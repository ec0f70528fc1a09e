"""CI cannot pass by running nothing: a real service's tests fail instead of skipping when `CI` is set, and the
test run fails when pytest collects no test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = '''
from tests.store.conftest import *  # noqa: F403  (the database fixtures)

def test_uses_postgres(pg_url: str) -> None:
    assert pg_url
'''


def _probe(tmp_path: Path, ci: bool) -> str:
    """The outcome line of a test that needs PostgreSQL, run where PostgreSQL does not answer."""
    test = tmp_path / "test_probe.py"
    test.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {
        "NETSYNTH_TEST_PG": "postgresql://postgres@127.0.0.1:9/postgres", "PYTHONPATH": str(ROOT)}
    if ci:
        env["CI"] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(tmp_path), str(test)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    return done.stdout.strip().splitlines()[-1]


def test_a_postgres_test_skips_without_ci_and_fails_with_it(tmp_path: Path) -> None:
    assert "1 skipped" in _probe(tmp_path, ci=False)
    outcome = _probe(tmp_path, ci=True)
    assert "skipped" not in outcome and ("1 error" in outcome or "1 failed" in outcome)


def test_a_test_run_that_collects_nothing_fails() -> None:
    done = subprocess.run(["make", "--no-print-directory", "pytest",
                           "PYTEST_ARGS=tests/test_ci_rules.py -k no_test_has_this_name -p no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no tests ran" in done.stdout + done.stderr
