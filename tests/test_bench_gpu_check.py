"""The prepared GPU check (bench/gpu_check.sh) has not run on a GPU yet: its dry run here keeps it from rotting
silently (its syntax, its options and the command lines it would run, checked against the parsers they reach)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts import their siblings as top-level modules


def _dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, check=False,
                          cwd=tmp_path)


def _command(stdout: str, marker: str) -> list[str]:
    (line,) = [line for line in stdout.splitlines() if line.startswith("+ ") and marker in line]
    return shlex.split(line[2:].split("  > ")[0])


def test_syntax_and_shellcheck() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed here")
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_dry_run_prints_every_step_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    result = _dry_run(tmp_path, str(out), "digits")
    assert result.returncode == 0, result.stderr
    for expected in ("nvidia-smi -L", "jax.devices()", "bench/core_families.py", "netsynth synthesize", "== summary"):
        assert expected in result.stdout, expected
    assert not out.exists()  # a dry run writes nothing


def test_the_commands_it_would_run_are_accepted_by_their_parsers(tmp_path: Path) -> None:
    import core_families

    from workers.synthesize_cli import build_parser

    out = tmp_path / "gpu"
    stdout = _dry_run(tmp_path, "--busy", "--budget", "300", str(out), "/data/mnist.npz").stdout
    bench = _command(stdout, "bench/core_families.py")
    args = core_families.parse_args(bench[bench.index("bench/core_families.py") + 1:])
    assert args.busy and args.out == out / "core_families.json" and args.batches == "128"
    synth = _command(stdout, "synthesize /data/mnist.npz")
    parsed = build_parser().parse_args(synth[synth.index("synthesize") + 1:])
    assert parsed.budget == "300" and parsed.out == out / "synthesis" and str(parsed.data) == "/data/mnist.npz"


def test_usage_errors_exit_non_zero(tmp_path: Path) -> None:
    assert _dry_run(tmp_path).returncode == 2
    assert _dry_run(tmp_path, "--nope", "a", "b").returncode == 2
