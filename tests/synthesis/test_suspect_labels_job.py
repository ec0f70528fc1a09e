"""Suspect labels as a job lists them: a text job's come from its linear floor's out-of-fold probabilities, over the
training and validation rows, and name the flipped rows."""

from __future__ import annotations

import numpy as np

from synthesis.budget import Budget
from synthesis.engine import split_task, synthesize
from synthesis.floor import out_of_fold
from synthesis.interface import Options
from synthesis.split import Split
from tests.synthesis.explain_sets import keyword_texts
from workers.data import text_task


def test_a_text_jobs_suspects_are_its_flipped_rows() -> None:
    texts, y, _ = keyword_texts(600, seed=3)
    rng = np.random.default_rng(0)
    flipped = rng.choice(len(y), 30, replace=False)
    noisy = y.copy()
    noisy[flipped] = 1 - y[flipped]
    task, _ = text_task(texts, noisy, 2, seed=0)
    result = synthesize(task, Budget(epochs=4), Options(seed=0, compress=False))
    content = result.model.report.content if result.model.report is not None else {}
    assert "linear floor" in content["suspects"]["method"]
    split = split_task(task, 0, Options().test_fraction)[0]
    checked = set(np.concatenate([split.train, split.val]).tolist())
    assert content["suspects"]["rows_checked"] == len(checked)
    listed = {s["row"] for s in content["suspect_labels"]}
    flips = set(flipped.tolist()) & checked
    assert listed <= checked  # the test rows are never judged
    assert len(listed & flips) >= 0.8 * len(flips) and len(listed & flips) >= 0.5 * len(listed)
    assert all(s["given"] != s["suggested"] for s in content["suspect_labels"])


def test_the_floors_out_of_fold_rows_are_the_training_then_validation_rows() -> None:
    split = Split(np.array([5, 1, 3]), np.array([0, 4]), np.array([2]), 0)
    floor = type("Floor", (), {"held_out": np.log(np.full((5, 2), 0.5))})()
    rows, proba = out_of_fold(floor, split)  # type: ignore[arg-type, misc]
    assert rows.tolist() == [5, 1, 3, 0, 4] and np.allclose(proba, 0.5)
    floor.held_out = floor.held_out[:4]  # fitted on a sample of the rows: their order is unknown here
    assert out_of_fold(floor, split) is None  # type: ignore[arg-type]
    assert out_of_fold(None, split) is None
