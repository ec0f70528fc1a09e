"""Scoring recorded learning curves: how well each early-stopping rule ranks candidates by their final accuracy.

A rule sees the first ``seen`` epochs of a curve (validation accuracy per epoch) and returns a score; the figure of
merit is Spearman's rank correlation (``scipy.stats.spearmanr``) between the scores and the final accuracy (the best
validation accuracy by the last epoch, what training keeps). The rules are those of ``synthesis.curves.RULES``
(the search's choices) and, for comparison, the curve-family extrapolation fitted against plain epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr

EXTRA_FRACTIONS = (0.1, 0.2, 0.3, 0.5)
"""Prefix fractions also reported (from the same curves) to show how ranking quality grows with cost."""
RUN_SETTINGS = ("epochs", "train_size", "val_size", "max_macs", "max_seconds", "skipped", "seconds", "seed",
                "rows", "fresh")
"""Per-dataset settings and counts a result keeps when its curves are re-scored."""

Rule = Callable[[Sequence[float], int, float], float]  # (prefix, horizon, warm-up fraction) -> score


def rules() -> dict[str, Rule]:
    """The rules scored, by name: the search's (``synthesis.curves.RULES``) and the curve families fitted
    against epochs (``extrapolate_epochs``)."""
    from synthesis.curves import RULES, predict_final

    scored: dict[str, Rule] = {name: rule for name, rule in RULES.items()}
    scored["extrapolate_epochs"] = lambda c, h, _w: predict_final(c, h)
    return scored


def rho(scores: Sequence[float], truth: Sequence[float]) -> float:
    """Spearman's rank correlation (0 when either side is constant)."""
    if len(set(scores)) < 2 or len(set(truth)) < 2:
        return 0.0
    return float(spearmanr(scores, truth).statistic)


def evaluate(rows: list[dict[str, Any]], epochs: int, fraction: float) -> dict[str, Any]:
    """Each rule's Spearman rho (``rho``), its rho over the better half by final accuracy (``rho_top_half``) and
    mean absolute error as a prediction (``mae``), and the cost, when ``fraction`` of the ``epochs`` is seen."""
    from core.train_config import TrainConfig

    seen = max(1, round(fraction * epochs))
    truth = [max(r["curve"]) for r in rows]
    warmup = [float(r.get("warmup_fraction", TrainConfig.warmup_fraction)) for r in rows]
    top = [i for i in range(len(rows)) if truth[i] >= float(np.median(truth))]
    scores = {name: [rule(r["curve"][:seen], epochs, w) for r, w in zip(rows, warmup, strict=True)]
              for name, rule in rules().items()}
    prefix = sum(r["elapsed_s"][seen - 1] for r in rows)
    full = sum(r["elapsed_s"][-1] for r in rows)
    compile_s = sum(r["compile_s"] for r in rows)
    return {"epochs_seen": seen,
            "rho": {n: rho(s, truth) for n, s in scores.items()},
            "rho_top_half": {n: rho([s[i] for i in top], [truth[i] for i in top]) for n, s in scores.items()},
            "mae": {n: float(np.mean(np.abs(np.subtract(s, truth)))) for n, s in scores.items()},
            "cost_fraction_epochs": seen / epochs, "cost_fraction_wall": prefix / full,
            "cost_fraction_wall_after_compile": (prefix - compile_s) / max(full - compile_s, 1e-9),
            "scores": scores}


def rescore(run: dict[str, Any], fraction: float) -> dict[str, Any]:
    """Evaluate the rules on one dataset's recorded curves (``run["candidates"]``, trained for ``run["epochs"]``
    epochs): figures at ``fraction`` and at EXTRA_FRACTIONS; each row keeps its scores at ``fraction``."""
    rows, epochs = run["candidates"], run["epochs"]
    result = evaluate(rows, epochs, fraction)
    scores = result.pop("scores")
    for i, row in enumerate(rows):
        for stale in ("predicted", "last_value"):  # the fields of earlier versions of this benchmark
            row.pop(stale, None)
        row |= {"scores": {n: s[i] for n, s in scores.items()}, "final": max(row["curve"])}
    finals = [r["final"] for r in rows]
    by_fraction = {}
    for f in EXTRA_FRACTIONS:
        e = evaluate(rows, epochs, f)
        by_fraction[str(f)] = {k: v for k, v in e.items() if k != "scores"}
    kept = {k: v for k, v in run.items() if k in RUN_SETTINGS}
    from synthesis.curves import RULES

    result["replay"] = {rule: replay(rows, epochs, rule) for rule in RULES}
    return {**result, **kept, "final_accuracy_range": [min(finals), max(finals)],
            "final_accuracy_std": float(np.std(finals)), "by_fraction": by_fraction, "candidates": rows}


def replay(rows: list[dict[str, Any]], epochs: int, rule: str, eta: int = 3) -> dict[str, Any]:
    """Asynchronous successive halving replayed on recorded curves (no training): the candidates arrive in their
    recorded order, each is scored by ``rule`` at rungs 1, eta, eta^2, ... below ``epochs`` and stops unless in the
    top 1/eta of the scores seen at that rung (``synthesis.executor.promotes``, as the search does). Returns the final
    accuracy of the candidate that validated best over the epochs it trained, its regret against the best final of
    all, and the epochs spent."""
    from synthesis.curves import RULES
    from synthesis.executor import promotes
    from synthesis.search_config import rungs

    scores: dict[int, list[float]] = {r: [] for r in rungs(eta, epochs)}
    trained = []
    for row in rows:
        curve = row["curve"]
        length = epochs
        for rung, seen in scores.items():
            score = RULES[rule](curve[:rung], epochs, None)
            seen.append(score)
            if not promotes(seen, score, eta):
                length = rung
                break
        trained.append(length)
    chosen = max(range(len(rows)), key=lambda i: (max(rows[i]["curve"][:trained[i]]), -i))
    finals = [max(r["curve"]) for r in rows]
    return {"chosen_final": finals[chosen], "regret": max(finals) - finals[chosen], "epochs_spent": sum(trained),
            "fully_trained": sum(t == epochs for t in trained)}
