"""The linear text floor: logistic regression over the bag of hashed n-gram features, fitted to convergence.

A text row's bag holds the distinct hashed ids of its word 1-2-grams and character 2-5-grams
(`store.ingest.text.ngram_features`), the features of the classical TF-IDF + linear text classifier. Each
feature is weighted by its smoothed inverse document frequency on the training rows (scikit-learn's
``smooth_idf``), the row divided by the square root of its feature count (the core ``embedding_bag``'s
``"sqrt"`` norm), and multinomial logistic regression (scikit-learn, L-BFGS) is fitted with its inverse
regularisation C chosen from :data:`C_GRID` by validation log-loss. The fitted model is the core network of the
genome ``{"kind": "text", "encoder": "linear"}`` (`synthesis.space.text`): an ``embedding_bag`` of one column per
class holding ``idf * coefficient``, then a dense identity layer holding the intercepts, so it exports to ONNX,
predicts, compresses and ensembles as every other candidate does.

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

C_GRID = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
"""Inverse regularisation strengths tried, weakest regularisation last (warm-started along the path)."""
MAX_ITER = 500


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear floor: its feature weights (idf), coefficients [classes, features], intercepts, C, and
    the validation (accuracy, log-loss) of every C tried."""

    idf: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    c: float
    tried: dict[float, tuple[float, float]]

    def variables(self) -> dict[str, Any]:
        """The weights of the linear genome's core network (`synthesis.space.text`)."""
        k = len(self.intercept)
        table = (self.idf[:, None] * self.coef.T).astype(np.float32)
        return {"params": {"bag": {"embedding": table},
                           "logits": {"kernel": np.eye(k, dtype=np.float32),
                                      "bias": self.intercept.astype(np.float32)}}}


def features(x: np.ndarray, bag_start: int, bag_vocab: int, idf: np.ndarray | None = None) -> sp.csr_matrix:
    """The sparse [rows, bag_vocab] matrix of the bag ids of token rows `x` (ids from `bag_start` on; 0 is
    padding): each present feature's weight (`idf`, or 1) over the square root of the row's feature count."""
    bag = x[:, bag_start:]
    rows, cols = np.nonzero(bag)
    ids = bag[rows, cols]
    keep = ids < bag_vocab
    rows, ids = rows[keep], ids[keep]
    values = np.ones(len(ids)) if idf is None else idf[ids]
    counts = np.bincount(rows, minlength=len(x))
    values = values / np.sqrt(np.maximum(counts[rows], 1))
    return sp.csr_matrix((values, (rows, ids)), shape=(len(x), bag_vocab))


def inverse_document_frequency(x: np.ndarray, bag_start: int, bag_vocab: int) -> np.ndarray:
    """``log((1 + n) / (1 + df)) + 1`` per bag id over the rows `x` (scikit-learn's smoothed idf); padding 0."""
    present = features(x, bag_start, bag_vocab) > 0
    df = np.asarray(present.sum(axis=0)).ravel()
    idf = np.log((1 + len(x)) / (1 + df)) + 1.0
    idf[0] = 0.0
    return idf


def fit(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, num_classes: int,
        bag_start: int, bag_vocab: int, deadline: float | None = None) -> LinearFit:
    """Fit the floor on the training rows for each C of :data:`C_GRID` (stopping at `deadline`, a
    ``time.monotonic()`` value, once one C is fitted) and keep the C of the lowest validation log-loss."""
    idf = inverse_document_frequency(x_train, bag_start, bag_vocab)
    train, val = features(x_train, bag_start, bag_vocab, idf), features(x_val, bag_start, bag_vocab, idf)
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
    return LinearFit(idf, best[1], best[2], best[0], tried)


def refit(floor: LinearFit, x: np.ndarray, y: np.ndarray, num_classes: int, bag_start: int,
          bag_vocab: int) -> LinearFit:
    """The floor refitted with its chosen C on all of `x` (training and validation rows together), its idf
    recomputed on them: the validation rows chose C and then add a tenth more data to learn from."""
    idf = inverse_document_frequency(x, bag_start, bag_vocab)
    model = LogisticRegression(C=floor.c, max_iter=MAX_ITER)
    _fit(model, features(x, bag_start, bag_vocab, idf), y)
    coef, intercept = _full(model, num_classes)
    return LinearFit(idf, coef, intercept, floor.c, floor.tried)


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
