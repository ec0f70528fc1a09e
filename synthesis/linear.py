"""The linear text floor: logistic regression over the bag of hashed n-gram features, fitted to convergence.

A text row's bag holds the distinct hashed ids of its word 1-2-grams and character 2-5-grams
(`domain.ingest.text.ngram_features`), the features of the classical TF-IDF + linear text classifier, in two blocks
of ids (words, then characters) where the encoder keeps them apart. Each feature is weighted by its smoothed
inverse document frequency on the training rows (scikit-learn's ``smooth_idf``), each block of a row divided by the
square root of its feature count (the core ``embedding_bag``'s ``"sqrt"`` norm), and multinomial logistic
regression (scikit-learn, L-BFGS) is fitted with its inverse regularisation C chosen from :data:`C_GRID` by
validation log-loss. Normalising the blocks apart, as a TF-IDF classifier over a union of a word and a character
vectoriser does, weighs a sentence's few word features as much as its many character n-grams together: with one
norm over both, the word features' share of the row shrinks about threefold on sentences, and the test error of
the floor rose by about a point on MR and CR at split seeds 0 / 1 / 2 (bench/README.md). The fitted model is the
core network of the genome ``{"kind": "text", "encoder": "linear"}`` (`synthesis.space.text`): one
``embedding_bag`` per block, of one column per class holding ``idf * coefficient``, summed, then a dense identity
layer holding the intercepts, so it exports to ONNX, predicts, compresses and ensembles as every other candidate
does.

The search trains it first, in seconds and to convergence, so no neural candidate ships that validates worse
than the linear baseline a user would otherwise fit (Wang and Manning, "Baselines and Bigrams", ACL 2012;
Joulin et al., "Bag of Tricks for Efficient Text Classification", 2017, show such models within a point or two of
neural text classifiers). scikit-learn does the fitting: its solvers converge on sparse data with millions of
non-zeros in seconds on a CPU, where a JAX training loop would take epochs to get as close.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
"""Inverse regularisation strengths tried, weakest regularisation last (warm-started along the path)."""
MAX_ITER = 500


@dataclass(frozen=True)
class Bag:
    """Where a token row's bag is: from position `start` on, ids in ``[1, vocab)``, the character block's from
    `words` on (0: one block)."""

    start: int
    vocab: int
    words: int = 0

    @property
    def blocks(self) -> list[tuple[int, int]]:
        """The ``[lowest, end)`` id range of each block."""
        return [(1, self.words), (self.words, self.vocab)] if self.words else [(1, self.vocab)]


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear floor: its bag, feature weights (idf), coefficients [classes, features], intercepts, C, and
    the validation (accuracy, log-loss) of every C tried."""

    bag: Bag
    idf: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    c: float
    tried: dict[float, tuple[float, float]]

    def variables(self) -> dict[str, Any]:
        """The weights of the linear genome's core network (`synthesis.space.text`)."""
        k = len(self.intercept)
        table = (self.idf[:, None] * self.coef.T).astype(np.float32)
        blocks = self.bag.blocks
        bags = {f"bag{i}" if len(blocks) > 1 else "bag": {"embedding": np.where(
            (np.arange(len(table)) >= lowest)[:, None], table, 0.0)[:end].astype(np.float32)}
            for i, (lowest, end) in enumerate(blocks)}
        return {"params": {**bags, "logits": {"kernel": np.eye(k, dtype=np.float32),
                                              "bias": self.intercept.astype(np.float32)}}}


def features(x: np.ndarray, bag: Bag, idf: np.ndarray | None = None) -> sp.csr_matrix:
    """The sparse [rows, bag.vocab] matrix of the bag ids of token rows `x` (0 is padding): each present
    feature's weight (`idf`, or 1) over the square root of the row's feature count in its block."""
    ids = x[:, bag.start:]
    rows, cols = np.nonzero(ids)
    ids = ids[rows, cols]
    keep = ids < bag.vocab
    rows, ids = rows[keep], ids[keep]
    values = np.ones(len(ids)) if idf is None else idf[ids]
    for lowest, end in bag.blocks:
        inside = (ids >= lowest) & (ids < end)
        counts = np.bincount(rows[inside], minlength=len(x))
        values[inside] /= np.sqrt(np.maximum(counts[rows[inside]], 1))
    return sp.csr_matrix((values, (rows, ids)), shape=(len(x), bag.vocab))


def inverse_document_frequency(x: np.ndarray, bag: Bag) -> np.ndarray:
    """``log((1 + n) / (1 + df)) + 1`` per bag id over the rows `x` (scikit-learn's smoothed idf); padding 0."""
    present = features(x, bag) > 0
    df = np.asarray(present.sum(axis=0)).ravel()
    idf = np.log((1 + len(x)) / (1 + df)) + 1.0
    idf[0] = 0.0
    return idf


def fit(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, num_classes: int,
        bag: Bag, deadline: float | None = None) -> LinearFit:
    """Fit the floor on the training rows for each C of :data:`C_GRID` (stopping at `deadline`, a
    ``time.monotonic()`` value, once one C is fitted) and keep the C of the lowest validation log-loss."""
    idf = inverse_document_frequency(x_train, bag)
    train, val = features(x_train, bag, idf), features(x_val, bag, idf)
    model = LogisticRegression(max_iter=MAX_ITER, warm_start=True)
    tried: dict[float, tuple[float, float]] = {}
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for c in C_GRID:
        model.set_params(C=c)
        _fit(model, train, y_train)
        coef, intercept = _full(model, num_classes)
        proba = _proba(val, coef, intercept)
        loss = float(-np.mean(np.log(np.maximum(proba[np.arange(len(y_val)), y_val], 1e-12)))) if len(y_val) else 0.0
        accuracy = float(np.mean(proba.argmax(axis=1) == y_val)) if len(y_val) else 0.0
        tried[c] = (accuracy, loss)
        if best is None or loss < tried[best[0]][1]:
            best = (c, coef, intercept)
        if deadline is not None and time.monotonic() > deadline:
            break
    assert best is not None
    return LinearFit(bag, idf, best[1], best[2], best[0], tried)


def refit(floor: LinearFit, x: np.ndarray, y: np.ndarray, num_classes: int) -> LinearFit:
    """The floor refitted with its chosen C on all of `x` (training and validation rows together), its idf
    recomputed on them: the validation rows chose C and then add a tenth more data to learn from."""
    idf = inverse_document_frequency(x, floor.bag)
    model = LogisticRegression(C=floor.c, max_iter=MAX_ITER)
    _fit(model, features(x, floor.bag, idf), y)
    coef, intercept = _full(model, num_classes)
    return LinearFit(floor.bag, idf, coef, intercept, floor.c, floor.tried)


def _fit(model: LogisticRegression, x: sp.csr_matrix, y: np.ndarray) -> None:
    with warnings.catch_warnings():  # an unconverged step of the C path still warm-starts the next
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, y)


def _full(model: LogisticRegression, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients [num_classes, features] and intercepts [num_classes] as logits: a binary model's one
    decision function split evenly between its two classes; a class absent from the training rows gets -inf-like
    logits (a large negative intercept)."""
    classes = np.asarray(model.classes_, dtype=np.int64)
    coef = np.zeros((num_classes, model.coef_.shape[1]), np.float64)
    intercept = np.full(num_classes, -30.0)
    if len(classes) == 2:
        coef[classes[0]], coef[classes[1]] = -model.coef_[0] / 2, model.coef_[0] / 2
        intercept[classes[0]], intercept[classes[1]] = -model.intercept_[0] / 2, model.intercept_[0] / 2
    else:
        coef[classes], intercept[classes] = model.coef_, model.intercept_
    return coef, intercept


def _proba(x: sp.csr_matrix, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    logits = np.asarray(x @ coef.T) + intercept
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return np.asarray(e / e.sum(axis=1, keepdims=True))
