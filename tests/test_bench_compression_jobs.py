"""bench/compression.py's job mode keeps one row per dataset, seed and budget, and prints every row it has."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import each other by their file names


def test_a_rerun_replaces_only_its_own_dataset_seed_and_budget() -> None:
    import compression

    keys = ("dataset", "seed", "budget_s")
    old = [{"dataset": "digits", "seed": 0, "budget_s": 120.0, "ratio": 5.0},
           {"dataset": "digits", "seed": 0, "budget_s": 1200.0, "ratio": 40.0},
           {"dataset": "sms", "seed": 0, "budget_s": 120.0, "ratio": 9.0}]
    new = {"dataset": "digits", "seed": 0, "budget_s": 120.0, "ratio": 8.1}
    merged = compression.merge_rows(old, new, keys)
    assert [r["ratio"] for r in merged] == [40.0, 9.0, 8.1]
    epoch_rows = [{"dataset": "digits", "ratio": 45.0}]  # the epoch mode's rows had no seed: seed 0
    assert compression.merge_rows(epoch_rows, {"dataset": "digits", "seed": 0, "ratio": 46.0}) == [
        {"dataset": "digits", "seed": 0, "ratio": 46.0}]


def test_the_table_shows_ratios_and_a_job_without_a_compressed_variant() -> None:
    import compression_jobs

    rows = [{"dataset": "digits", "budget_s": 120.0, "ratio": 8.08, "accuracy_dense": 0.99,
             "accuracy_compressed": 0.9878, "accuracy_change_pt": -0.22, "compress_s": 13.5,
             "compress_share": 0.1125, "epochs_used": 5},
            {"dataset": "mnist", "budget_s": 120.0, "ratio": None, "note": "no compressed variant"}]
    lines = compression_jobs.table(rows).splitlines()
    assert len(lines) == 3 and "8.1x" in lines[1] and "-0.22" in lines[1] and "11.2%" in lines[1]
    assert lines[2].startswith("mnist") and "no compressed variant" in lines[2]
