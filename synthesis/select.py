"""Which trained network wins: validation accuracy first, but within its noise the lower validation loss.

A few hundred validation rows measure accuracy in whole rows: two networks at 99 % on 413 rows must differ by
about six rows to differ at the conventional 5 % level (two standard errors), so the candidate that validates
best by a row or two is often not the one that tests best. Model selection on a noisy hold-out estimate
over-fits it (Cawley and Talbot, "On Over-fitting in Model Selection and Subsequent Selection Bias in Performance
Evaluation", JMLR 2010); the remedy here is to rank near-ties by a continuous, lower-variance score: the loss.
On SMS Spam at split seed 2 the word CNN validated 412 / 413 and the wide text CNN 410 / 413 (excess losses
0.039 and 0.024); by accuracy the word CNN shipped and erred on 10-11 of the 1,035 test texts.

The loss compared is each candidate's own training objective in excess of its floor (:func:`excess_loss`): the
cross-entropy against the targets label-smoothed as that candidate was trained, minus their entropy — the KL
divergence from the smoothed targets. The plain cross-entropy would favour whichever candidate was trained with
the least smoothing (at 0.1 every sure answer still costs about 0.1 nats; at 0 almost nothing). Measured on SMS
Spam (413 validation rows, split seeds 0 / 1 / 2; the wide text CNN, the word CNN, the n-gram bag and Kim's CNN,
each trained 12 epochs at label smoothing 0, 0.05 and 0.1: twelve networks a seed), the Spearman correlation with
the test errors was 0.47 / 0.80 / 0.45 for this excess loss, 0.29 / 0.12 / -0.08 for the plain cross-entropy and
0.69 / 0.77 / -0.66 for the validation errors; the network each picked erred on 8 / 9 / 6, 7 / 9 / 16 and
9 / 6 / 12 test texts (the fewest possible: 7 / 6 / 6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")

LOSS_MARGIN = 0.01
"""The relative difference within which two validation losses count as the same: a difference of a tenth of a per
cent in a loss decides nothing, and ranking by it can put a less accurate candidate first."""

Z = 2.0
"""Standard errors a difference in accuracy must exceed to count: about the conventional 5 % level."""


def excess_loss(metrics: Mapping[str, float], smoothing: float, num_classes: int) -> float:
    """The validation loss of a network trained against targets label-smoothed by `smoothing`, above the least
    it can be: ``(1 - s) * loss + s * uniform_loss`` (`metrics` as :func:`core.evaluation.evaluate` returns
    them) minus the smoothed targets' entropy."""
    s, k = smoothing, max(num_classes, 1)
    top, rest = 1.0 - s + s / k, s / k
    entropy = -top * math.log(top) - ((k - 1) * rest * math.log(rest) if rest > 0 else 0.0)
    uniform = s * metrics["uniform_loss"] if s > 0 else 0.0  # unsmoothed: the plain loss alone
    return (1.0 - s) * metrics["loss"] + uniform - entropy


def noise(a: float, b: float, rows: int) -> float:
    """The margin within which accuracies `a` and `b`, both measured on the same `rows` validation rows, count
    as tied: `Z` standard errors of their difference as if they were independent,
    ``Z sqrt((a (1 - a) + b (1 - b)) / rows)``, and at least one row."""
    rows = max(rows, 1)
    spread = max(a * (1.0 - a), 0.0) + max(b * (1.0 - b), 0.0)
    return max(Z * math.sqrt(spread / rows), 1.0 / rows)


def tied(a: float, b: float, rows: int) -> bool:
    """Whether accuracies `a` and `b` on the same `rows` rows are within :func:`noise` of each other (exactly one
    row apart is within a one-row margin)."""
    return abs(a - b) <= noise(a, b, rows) + 1e-9


def beats(a: tuple[float, float | None], b: tuple[float, float | None], rows: int) -> bool:
    """Whether a network scoring `a` = (validation accuracy, loss) beats one scoring `b` on `rows` validation
    rows: a higher accuracy beyond the noise (:func:`noise`), or, within it, a lower loss (an unknown loss,
    None, never wins a tie; two unknown losses: the higher accuracy)."""
    (acc_a, loss_a), (acc_b, loss_b) = a, b
    if not tied(acc_a, acc_b, rows) or (same_loss(loss_a, loss_b) and acc_a != acc_b):
        return acc_a > acc_b
    return (_loss(loss_a), -acc_a) < (_loss(loss_b), -acc_b)


def same_loss(a: float | None, b: float | None) -> bool:
    """Whether two known losses are within :data:`LOSS_MARGIN` of each other (relative to the lower): then they
    cannot rank two networks, and the accuracy does, even within its noise."""
    return a is not None and b is not None and abs(a - b) <= LOSS_MARGIN * min(a, b) + 1e-12


def rank(items: Sequence[T], score: Callable[[T], tuple[float, float | None]], rows: int) -> list[T]:
    """`items` best first: those within noise of the best accuracy by loss (unknown losses last; runs of the same
    loss, :func:`same_loss`, by accuracy), then the rest by accuracy; ties keep the given order."""
    if not items:
        return []
    scores = [score(item) for item in items]
    top = max(acc for acc, _ in scores)
    level = [tied(top, acc, rows) for acc, _ in scores]
    by_loss = sorted((i for i in range(len(items)) if level[i]), key=lambda i: _loss(scores[i][1]))
    groups: list[list[int]] = []  # runs of the same loss (within the margin of the run's least), by accuracy
    for i in by_loss:
        if groups and same_loss(scores[groups[-1][0]][1], scores[i][1]):
            groups[-1].append(i)
        else:
            groups.append([i])
    order = [i for group in groups for i in sorted(group, key=lambda i: -scores[i][0])]
    order += sorted((i for i in range(len(items)) if not level[i]), key=lambda i: -scores[i][0])
    return [items[i] for i in order]


def _loss(loss: float | None) -> float:
    return math.inf if loss is None else loss


def chance_level_warning(val_accuracy: float, y_val: np.ndarray) -> str | None:
    """What to tell the user when the delivered network validates no better than always answering the
    commonest class (the budget ran out before any candidate learned); None when it does better."""
    if len(y_val) == 0:
        return None
    chance = float(np.bincount(y_val).max() / len(y_val))
    if val_accuracy > chance:
        return None
    return (f"the budget ran out before any network learned more than the commonest class: validation accuracy "
            f"{val_accuracy:.1%}, the commonest class alone {chance:.1%}; give the job a larger budget")
