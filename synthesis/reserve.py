"""The seconds the stages after final training need, estimated from the leading network's measured pace.

Compression, delivery and the explainability reports each make forward passes over whole splits (compression
over the validation rows; delivery and the reports over the test rows; the suspect labels over their reference rows)
and compile a few programs, whatever their share of the budget. On a large dataset under a short budget those
fixed costs exceed fixed shares (a 120 s MNIST job spent 33 s compressing and 14 s delivering with 12 s left for
both, and had no time for its reports), so the final training ends early enough for them (`Budget.reserve`).
A row's forward pass takes what the leading trial's fastest validation pass took per row, and a compilation what its
own did (the programs after training are forward or small gradient programs of the same network).
"""

from __future__ import annotations

import math

from synthesis.budget import Budget, Reserve
from synthesis.explain.suspects import REFERENCE_ROWS
from synthesis.trial import TrialResult

FORWARD_SHARE = 0.5
"""A row's forward pass in eval mode, as a share of a training step's seconds per row, where the trial timed no
validation pass of its own (`TrialResult.eval_s`, the measure used first)."""
COMPRESSION = (8.0, 2.0)
"""(forward passes over the validation rows, compilations) of compression at its shortest: measuring the original
network and the compressed one, sharing without retraining, and matching the compressed network's probabilities."""
DELIVERY = (2.0, 1.0)
"""(passes over the test rows, compilations) of delivery: the dense network's test figures and the compressed
variant's through ONNX; plus one pass over the validation rows (the chance-level check)."""
COMPRESSION_ROOM = 2.0
"""Compression runs only when its estimated fixed costs are at most this many times its share of the budget."""
REPORTS = (3.0, 6.0)
"""(passes over the test rows, compilations) of the two reports without influence (global figures, the attribution
methods and their checks); plus one pass over the suspect labels' reference rows (more rows are judged only in
the reports' own time: `synthesis.reports.SUSPECTS_TIME`)."""


def after_training(trial: TrialResult, batch_size: int, rows: tuple[int, int, int], budget: Budget, compress: bool,
                   explain: bool) -> Reserve:
    """What the stages after final training of `budget` need for a network whose trial measured its validation pass
    (`trial.eval_s`, else `trial.step_s` per step of `batch_size` rows) and `trial.compile_s` of compilation, on
    (train, validation, test) `rows`; nothing when the pace was not measured (a fitted floor). Compression is left
    out (`Reserve.compress` false) when its fixed costs exceed `COMPRESSION_ROOM` times its share: the time goes to
    training the network that ships, whose accuracy matters more than a smaller copy of it."""
    train, val, test = rows
    if trial.eval_s > 0 and val > 0:
        row_s = trial.eval_s / val
    elif trial.step_s > 0 and batch_size > 0:
        row_s = FORWARD_SHARE * trial.step_s / batch_size
    else:
        return Reserve()
    compile_s = trial.compile_s
    compression = COMPRESSION[0] * val * row_s + COMPRESSION[1] * compile_s if compress else 0.0
    if compression > COMPRESSION_ROOM * budget.shares.fine * (budget.seconds or math.inf):
        compress, compression = False, 0.0
    delivery = (DELIVERY[0] * test + val) * row_s + DELIVERY[1] * compile_s
    reports = (REPORTS[0] * test + min(train, REFERENCE_ROWS)) * row_s + REPORTS[1] * compile_s \
        if explain and test else 0.0
    return Reserve(compression_s=round(compression, 1), delivery_s=round(delivery + reports, 1), compress=compress)
