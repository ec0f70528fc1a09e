"""Suspect labels: training rows whose label out-of-sample class probabilities contradict.

A network trained long enough fits a wrong label too (its own prediction on a memorised row agrees with the given
label), so the evidence must come from rows that did not decide the row's place: each training row is judged by its
`NEIGHBOURS` nearest other training rows (leave-one-out k-NN, cosine distance) in the features the output layers
read, taken from the earliest kept weights of the final training (`judge`): early in training a network has learnt
the classes but not yet memorised the exceptions (Arpit et al., "A Closer Look at Memorization in Deep Networks",
ICML 2017). The neighbours' label shares are out-of-sample class probabilities, as confident learning (Northcutt et
al., JAIR 2021) asks for; where a model was cross-validated on the rows (the text floor), its out-of-fold
probabilities serve instead. A row is listed when its label has under `SHARE` of the probability and another label
leads, which is then its suggested label. The rule is hand-written rather than cleanlab's per-class thresholds
because on vote shares (steps of 1/k) those thresholds miss about a third of the flipped rows this rule finds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import normalize

from synthesis.explain.subject import Subject, output_layers

NEIGHBOURS = 20
"""Neighbours that judge a row (fewer when the smallest class has fewer other rows)."""
SHARE = 0.1
"""A row is suspect when under this share of its neighbours carry its label."""
REFERENCE_ROWS = 10_000
"""The most rows neighbours are sought among."""
WIDEST_FEATURES = 4096
"""Feature vectors wider than this (a linear floor's bag of n-grams) are left out of the distance."""
CHUNK = 512
"""Rows whose features are taken at once (the last chunk padded: one compiled program)."""


@dataclass(frozen=True)
class Suspect:
    """A row whose label out-of-sample evidence contradicts: its position in the upload, given and suggested label,
    and the probability of each."""

    row: int
    given: int
    suggested: int
    given_share: float
    suggested_share: float


def features(judge: Subject, x: np.ndarray, check: Callable[[], None] | None = None,
             until: float = math.inf, rows: np.ndarray | None = None) -> np.ndarray:
    """``[N, D]`` float32: what the judge's output layers read for each row of `x` (or each of `x`'s `rows`, read a
    chunk at a time), concatenated over an ensemble's members, leaving out those wider than `WIDEST_FEATURES`; the
    logits when none is narrow enough. Past `REFERENCE_ROWS` rows the pass stops at ``time.perf_counter()``
    `until`, with the features of the rows before (fewer rows)."""
    graph = judge.graph
    by_id = {node.id: node for node in graph.order}
    feeds = [by_id[layer].inputs[0] for layer in output_layers(graph)]
    feeds = [f for f in feeds if int(np.prod(graph.types[f].shape)) <= WIDEST_FEATURES]
    probe = jax.jit(lambda variables, xb: judge.model.probe(variables, xb, capture=tuple(feeds)))  # one program
    out = []
    total = len(x) if rows is None else len(rows)
    for start in range(0, total, CHUNK):
        if check is not None:
            check()
        if start >= REFERENCE_ROWS and time.perf_counter() >= until:
            break
        chunk = x[start:start + CHUNK] if rows is None else x[rows[start:start + CHUNK]]
        padded = np.concatenate([chunk, np.zeros((CHUNK - len(chunk), *chunk.shape[1:]), chunk.dtype)])  # one shape
        logits, captured = probe(judge.variables, jnp.asarray(padded))
        parts = [np.asarray(captured[f]).reshape(CHUNK, -1) for f in feeds] or [np.asarray(logits)]
        out.append(np.concatenate(parts, axis=1)[:len(chunk)].astype(np.float32))
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def checking_order(rows: int, seed: int = 0) -> np.ndarray:
    """The order in which training rows are judged: a seeded permutation, so that the rows judged when time runs out
    (`features`' `until`) are a uniform sample, and its first `REFERENCE_ROWS` the neighbours' reference."""
    return np.random.default_rng(seed).permutation(rows)


def neighbour_shares(feats: np.ndarray, y: np.ndarray, classes: int, seed: int = 0) -> np.ndarray:
    """``[N, classes]``: for each row, the share of its nearest other rows (cosine) carrying each label; the
    neighbours are sought among at most `REFERENCE_ROWS` rows (a seeded sample of a larger set), so the cost grows
    linearly with the rows."""
    reference = (np.arange(len(y)) if len(y) <= REFERENCE_ROWS else
                 np.sort(np.random.default_rng(seed).choice(len(y), REFERENCE_ROWS, replace=False)))
    counts = np.bincount(y[reference], minlength=classes)
    k = int(min(NEIGHBOURS, max(1, counts[counts > 0].min() - 1), len(reference) - 1))
    if k < 1:
        return np.asarray(np.eye(classes, dtype=np.float64)[y])
    unit = normalize(feats.astype(np.float64))
    near = reference[NearestNeighbors(n_neighbors=k + 1).fit(unit[reference]).kneighbors(unit,
                                                                                      return_distance=False)]
    others = np.array([row[row != i][:k] for i, row in enumerate(near)])  # the row itself left out, even on a tie
    shares = np.zeros((len(y), classes), np.float64)
    np.add.at(shares, (np.repeat(np.arange(len(y)), k), y[others].ravel()), 1.0 / k)
    return shares


def suspect_labels(shares: np.ndarray, given: np.ndarray, rows: np.ndarray) -> list[Suspect]:
    """The rows whose label has under `SHARE` of their out-of-sample probability `shares` ``[N, classes]`` while
    another label leads, most contradicted first (the leading label's lead over the given one; ties: the lower row)."""
    at = np.arange(len(given))
    suggested = shares.argmax(axis=1)
    given_share, lead = shares[at, given], shares[at, suggested]
    listed = np.where((given_share < SHARE) & (suggested != given))[0]
    order = listed[np.lexsort((rows[listed], -(lead[listed] - given_share[listed])))]
    return [Suspect(int(rows[i]), int(given[i]), int(suggested[i]), round(float(given_share[i]), 4),
                    round(float(lead[i]), 4)) for i in order]
