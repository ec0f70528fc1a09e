"""The benchmark protocol (bench/protocol.py): no figure is written from a busy machine unless marked busy, and
every result file carries what is needed to trust it. The load average is injected: no benchmark runs here."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))  # bench scripts import their siblings as top-level modules

import protocol  # noqa: E402


def _load(one_minute: float):
    return lambda: (one_minute, 0.5, 0.25)


def test_refuses_above_the_busy_load_without_busy(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        protocol.start(busy=False, load=_load(protocol.BUSY_LOAD + 0.01))
    assert exit_.value.code == protocol.REFUSED != 0
    assert "--busy" in capsys.readouterr().err


def test_runs_at_or_below_the_busy_load() -> None:
    assert protocol.BUSY_LOAD == 1.5
    assert protocol.start(busy=False, load=_load(1.5))["busy"] is False


def test_busy_writes_the_file_marked_busy(tmp_path: Path) -> None:
    run = protocol.start(busy=True, load=_load(3.0))
    out = tmp_path / "r.json"
    protocol.write(out, {"rows": [1]}, run, load=_load(2.0))
    doc = json.loads(out.read_text())
    assert doc["busy"] is True and doc["rows"] == [1]
    assert doc["load_average_before"] == [3.0, 0.5, 0.25] and doc["load_average_after"] == [2.0, 0.5, 0.25]


def test_records_the_machine_versions_and_xla_flags(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_test_flag=1")
    run = protocol.start(busy=False, load=_load(0.1))
    # a script's own keys never replace the protocol's
    doc = protocol.stamp({"busy": "no", "load_average_after": [0.0], "xla_flags": "x", "rows": []}, run, _load(0.2))
    assert doc["busy"] is False and doc["load_average_after"] == [0.2, 0.5, 0.25]
    assert doc["xla_flags"] == "--xla_test_flag=1"
    assert isinstance(doc["cpu_model"], str) and doc["cpu_model"]
    assert isinstance(doc["cpu_count"], int) and doc["cpu_count"] >= 1
    assert re.fullmatch(r"3\.\d+\.\d+.*", doc["python"])
    assert set(protocol.LIBRARIES) == set(doc["versions"]) and doc["versions"]["numpy"]


def test_cpu_model_is_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n")
    assert protocol.cpu_model(cpuinfo) == "AMD EPYC 7B13"


def test_a_script_refuses_before_it_writes_and_writes_busy_with_the_flag(tmp_path: Path, monkeypatch) -> None:
    """End to end through one cheap script (the scaling simulation), the load average replaced."""
    import simulate_scale

    monkeypatch.setattr(os, "getloadavg", _load(9.0))  # protocol reads it at each call
    out = tmp_path / "sim.json"
    args = ["--workers", "8", "--hours", "0.01", "--out", str(out)]
    with pytest.raises(SystemExit):
        simulate_scale.main(args)
    assert not out.exists()
    simulate_scale.main([*args, "--busy"])
    assert json.loads(out.read_text())["busy"] is True


def _writers() -> list[Path]:
    """The bench scripts that write a result file under bench/results/."""
    return sorted(p for p in BENCH.glob("*.py") if p.name != "protocol.py"
                  and re.search(r'"results"|results/', p.read_text()) and "__main__" in p.read_text())


def test_every_script_that_writes_results_follows_the_protocol() -> None:
    writers = _writers()
    assert {"xai.py", "suspects_bound.py", "core_families.py", "synthesis_quality.py"} <= {p.name for p in writers}
    for path in writers:
        text = path.read_text()
        if "conv_ops import arguments" in text:  # transformer_ops.py shares conv_ops.py's command line and writer
            continue
        assert "protocol.run_rows(" in text or ("protocol.add_busy(" in text and "protocol.start(" in text), path.name
