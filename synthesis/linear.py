"""The linear text floor: logistic regression over the bag of n-gram features, its form and C chosen by k-fold CV.

A text row's bag holds the distinct ids of its word 1-2-grams and character 2-5-grams
(`domain.ingest.text.ngram_features`), the features of the classical TF-IDF + linear text classifier, in two blocks
of ids (words, then characters) where the encoder keeps them apart. Each feature is weighted by its smoothed
inverse document frequency (scikit-learn's ``smooth_idf``) and each block of a row divided by the square root of
its feature count (the core ``embedding_bag``'s ``"sqrt"`` norm): a union of a word and a character TF-IDF
vectoriser, each block normalised on its own. Two forms are tried (:data:`FORMS`): multinomial logistic
regression on those features, and, for two classes, the same with each feature scaled by its naive-Bayes
log-count ratio (NB-LR: Wang and Manning, "Baselines and Bigrams", ACL 2012); and, where both are tried, a blend of
the two, each at its own best C, their logits weighted by a share of :data:`SHARES` (Wang and Manning's
interpolation between NB and a discriminative model, here between the two fitted forms). The form and the inverse
regularisation C (:data:`C_GRID`) are chosen by stratified k-fold cross-validation on every row given (training and
validation rows): a tenth of the rows chooses C too noisily; the blend's share is chosen on k - 1 folds and scored
on the one left out, so its free parameter does not flatter it. The chosen model is then fitted on all of them,
and its out-of-fold log-probabilities are kept, so what is stacked or compared with it later is scored on rows the
model that scored them had not seen. A blend of linear models over one bag is one linear model: its
coefficients are the forms' coefficients times their feature weights, summed by share.

The fitted model is the core network of the genome ``{"kind": "text", "encoder": "linear"}``
(`synthesis.space.text`): one ``embedding_bag`` per block, of one column per class holding
``idf * ratio * coefficient``, summed, then a dense identity layer holding the intercepts, so it exports to ONNX,
predicts, compresses and ensembles as every other candidate does. scikit-learn does the fitting: its solvers
converge on sparse data with millions of non-zeros in seconds on a CPU, where a JAX training loop would take
epochs to get as close.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold

from synthesis import select

C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
"""Inverse regularisation strengths tried, weakest regularisation last (warm-started along the path)."""
FORMS = ("tfidf", "nb")
"""``"tfidf"``: logistic regression on the TF-IDF features; ``"nb"`` (two classes only): on the features scaled by
their naive-Bayes log-count ratio."""
SHARES = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""The tf-idf form's shares tried in a blend of the two forms (the NB form's is one minus it)."""
BLEND = "tfidf+nb"
"""The name (and `LinearFit.tried` key) of the blend of the two forms."""
FOLDS = 5
MAX_ITER = 500
NB_ALPHA = 1.0
"""The naive-Bayes ratio's additive smoothing (Wang and Manning's alpha)."""


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
class Part:
    """One form of a floor: logistic regression on the `form`'s features at inverse regularisation `c`, its logits
    weighted by `share`."""

    form: str
    c: float
    share: float = 1.0

    @property
    def key(self) -> str:
        """``"nb C=3"``: its `LinearFit.tried` key."""
        return f"{self.form} C={self.c:g}"


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear floor: its bag, per-feature weights (``idf * ratio``, ones for a blend), coefficients
    [classes, features], intercepts, and its parts (each form fitted, with its C and share of the logits); the
    out-of-fold (accuracy, log-loss) of every form and C tried (``"nb C=3"``, and :data:`BLEND`), and the
    out-of-fold log-probabilities [rows, classes] of the chosen one on the rows it was fitted on."""

    bag: Bag
    weight: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    parts: tuple[Part, ...]
    tried: dict[str, tuple[float, float]]
    held_out: np.ndarray

    @property
    def form(self) -> str:
        """``"tfidf"``, ``"nb"`` or :data:`BLEND`."""
        return "+".join(part.form for part in self.parts)

    @property
    def key(self) -> str:
        """Its `tried` key: ``"nb C=3"``, or :data:`BLEND`."""
        return BLEND if len(self.parts) > 1 else self.parts[0].key

    @property
    def description(self) -> str:
        """The form, C and share of each part: ``"nb C=3"``, ``"0.6 tfidf C=0.3 + 0.4 nb C=1"``."""
        return " + ".join(part.key if len(self.parts) == 1 else f"{part.share:g} {part.key}" for part in self.parts)

    def variables(self) -> dict[str, Any]:
        """The weights of the linear genome's core network (`synthesis.space.text`)."""
        k = len(self.intercept)
        table = (self.weight[:, None] * self.coef.T).astype(np.float32)
        blocks = self.bag.blocks
        bags = {f"bag{i}" if len(blocks) > 1 else "bag": {"embedding": np.where(
            (np.arange(len(table)) >= lowest)[:, None], table, 0.0)[:end].astype(np.float32)}
            for i, (lowest, end) in enumerate(blocks)}
        return {"params": {**bags, "logits": {"kernel": np.eye(k, dtype=np.float32),
                                              "bias": self.intercept.astype(np.float32)}}}

    def log_proba(self, x: np.ndarray) -> np.ndarray:
        """Its log-probabilities [rows, classes] on token rows `x`."""
        return _log_proba(features(x, self.bag, self.weight), self.coef, self.intercept)


def features(x: np.ndarray, bag: Bag, weight: np.ndarray | None = None) -> sp.csr_matrix:
    """The sparse [rows, bag.vocab] matrix of the bag ids of token rows `x` (0 is padding): each present
    feature's weight (`weight`, or 1) over the square root of the row's feature count in its block."""
    ids = x[:, bag.start:]
    rows, cols = np.nonzero(ids)
    ids = ids[rows, cols]
    keep = ids < bag.vocab
    rows, ids = rows[keep], ids[keep]
    values = np.ones(len(ids)) if weight is None else weight[ids]
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


def nb_ratio(x: np.ndarray, y: np.ndarray, bag: Bag) -> np.ndarray:
    """Each bag id's naive-Bayes log-count ratio between class 1 and class 0 over the rows `x`,
    ``log((p / |p|_1) / (q / |q|_1))`` with ``p``, ``q`` the classes' document counts plus :data:`NB_ALPHA`."""
    present = (features(x, bag) > 0).astype(np.float64)
    p = NB_ALPHA + np.asarray(present[y == 1].sum(axis=0)).ravel()
    q = NB_ALPHA + np.asarray(present[y == 0].sum(axis=0)).ravel()
    return np.asarray(np.log(p / p.sum()) - np.log(q / q.sum()))


def feature_weight(x: np.ndarray, y: np.ndarray, bag: Bag, form: str) -> np.ndarray:
    """The per-feature weight of `form` learned from the rows `x`: idf, times the NB ratio for ``"nb"``."""
    idf = inverse_document_frequency(x, bag)
    return idf * nb_ratio(x, y, bag) if form == "nb" else idf


def fit(x: np.ndarray, y: np.ndarray, num_classes: int, bag: Bag, seed: int = 0,
        deadline: float | None = None) -> LinearFit:
    """Choose the form and C of the lowest out-of-fold error (within its noise, log-loss: `synthesis.select`) by
    k-fold cross-validation on the rows `x`, `y`, walking :data:`C_GRID` until `deadline` (a ``time.monotonic()``
    value) once one C is scored, then fit that choice on all of them. With two forms, their blend (each at its
    best C) is a choice too, scored out of fold with its share chosen on the other folds."""
    forms = FORMS if num_classes == 2 and len(np.unique(y)) == 2 else FORMS[:1]
    splits = folds(y, seed)
    prepared = {(form, i): _prepared(x, y, train, test, bag, form) for form in forms for i, (train, test) in
                enumerate(splits)}
    models = {key: LogisticRegression(max_iter=MAX_ITER, warm_start=True) for key in prepared}
    tried: dict[str, tuple[float, float]] = {}
    held_out: dict[str, np.ndarray] = {}
    for c in C_GRID:
        for form in forms:
            log_p = np.zeros((len(y), num_classes))
            for i, (_, test) in enumerate(splits):
                train_x, train_y, test_x = prepared[form, i]
                model = models[form, i]
                model.set_params(C=c)
                _fit(model, train_x, train_y)
                log_p[test] = _log_proba(test_x, *_full(model, num_classes))
            key = Part(form, c).key
            held_out[key], tried[key] = log_p, scores(log_p, y)
        if deadline is not None and time.monotonic() > deadline:
            break
    best_of = {form: select.rank([k for k in tried if k.startswith(f"{form} ")], lambda k: tried[k], len(y))[0]
               for form in forms}
    members = held_out[best_of[forms[0]]], held_out[best_of[forms[-1]]]
    if len(forms) == 2:
        held_out[BLEND] = _normalised(blend_out_of_fold(*members, y, splits))
        tried[BLEND] = scores(held_out[BLEND], y)
    best = select.rank(list(tried), lambda k: tried[k], len(y))[0]
    parts: tuple[Part, ...]
    if best == BLEND:
        share = share_of(*members, y)
        tfidf, nb = (Part(form, _c_of(best_of[form])) for form in FORMS)
        parts = (replace(tfidf, share=share), replace(nb, share=round(1 - share, 1)))
    else:
        parts = (Part(best.split(" C=")[0], _c_of(best)),)
    chosen = refit_as(bag, parts, x, y, num_classes)
    return replace(chosen, tried=tried, held_out=held_out[best])


def share_of(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> float:
    """The share of :data:`SHARES` whose blend ``share * a + (1 - share) * b`` of log-probabilities has the lowest
    cross-entropy on labels `y`."""
    return min(SHARES, key=lambda s: scores(s * a + (1 - s) * b, y)[1])


def blend_out_of_fold(a: np.ndarray, b: np.ndarray, y: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]]
                      ) -> np.ndarray:
    """The blend's logits on every row, each held-out part of `splits` with the share :func:`share_of` chooses on
    the other rows."""
    logits = np.zeros_like(a)
    for train, test in splits:
        share = share_of(a[train], b[train], y[train])
        logits[test] = share * a[test] + (1 - share) * b[test]
    return logits


def refit(floor: LinearFit, x: np.ndarray, y: np.ndarray, num_classes: int) -> LinearFit:
    """The floor refitted with its parts (forms, Cs and shares) on all of `x` (training and validation rows
    together), its feature weights learned again from them."""
    return replace(refit_as(floor.bag, floor.parts, x, y, num_classes), tried=floor.tried, held_out=floor.held_out)


def refit_as(bag: Bag, parts: tuple[Part, ...], x: np.ndarray, y: np.ndarray, num_classes: int) -> LinearFit:
    """The floor of `parts` fitted on the rows `x`, `y` (nothing held out): one part's form as fitted, or the
    parts' coefficients times their feature weights, summed by share, on unit feature weights."""
    fitted = []
    for part in parts:
        weight = feature_weight(x, y, bag, part.form)
        model = LogisticRegression(C=part.c, max_iter=MAX_ITER)
        _fit(model, features(x, bag, weight), y)
        fitted.append((weight, *_full(model, num_classes)))
    empty = np.zeros((0, num_classes))
    if len(parts) == 1:
        weight, coef, intercept = fitted[0]
        return LinearFit(bag, weight, coef, intercept, parts, {}, empty)
    shares = np.asarray([part.share for part in parts])
    coef = np.einsum("p,pf,pkf->kf", shares, np.stack([w for w, _, _ in fitted]), np.stack([c for _, c, _ in fitted]))
    intercept = shares @ np.stack([i for _, _, i in fitted])
    unit = np.ones(bag.vocab)
    unit[0] = 0.0
    return LinearFit(bag, unit, coef, intercept, parts, {}, empty)


def folds(y: np.ndarray, seed: int, k: int = FOLDS) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified `k`-fold splits (train, held-out) of rows labelled `y`: fewer folds where the rarest class has
    fewer rows, plain k-fold where it has one, and the rows scored in-sample where there are fewer than two."""
    rarest = min((int(c) for c in np.bincount(y) if c), default=0)
    if len(y) < 2:
        return [(np.arange(len(y)), np.arange(len(y)))]
    splitter = (StratifiedKFold(min(k, rarest), shuffle=True, random_state=seed) if rarest >= 2
                else KFold(min(k, len(y)), shuffle=True, random_state=seed))
    return list(splitter.split(np.zeros(len(y)), y))


def _prepared(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, bag: Bag, form: str
              ) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    """A fold's training features, labels and held-out features, its feature weights learned from its training
    rows only."""
    weight = feature_weight(x[train], y[train], bag, form)
    return features(x[train], bag, weight), y[train], features(x[test], bag, weight)


def scores(log_p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of log-probabilities, or of logits, on labels `y`."""
    log_p = log_p - np.logaddexp.reduce(log_p, axis=1, keepdims=True)
    return float(np.mean(log_p.argmax(axis=1) == y)), float(-np.mean(log_p[np.arange(len(y)), y]))


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


def _c_of(key: str) -> float:
    return float(key.split(" C=")[1])


def _normalised(logits: np.ndarray) -> np.ndarray:
    return np.asarray(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))


def _log_proba(x: sp.csr_matrix, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    return _normalised(np.asarray(x @ coef.T) + intercept)
