"""TF-IDF word and character n-grams with logistic regression (scikit-learn): the strong simple text baseline.

Word 1-2-grams and character 2-5-grams (within word boundaries), sublinear term frequencies, each block
L2-normalised; logistic regression (liblinear) whose inverse regularisation C is chosen from C_GRID by
5-fold stratified cross-validation on the training texts, then refit on all of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import sklearn
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import FeatureUnion, Pipeline

C_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)


def pipeline() -> Pipeline:
    """The unfitted features-plus-classifier pipeline."""
    features = FeatureUnion([
        ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True)),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
    ])
    return Pipeline([("features", features), ("classifier", LogisticRegression(solver="liblinear", max_iter=1000))])


def train_and_score(texts_train: Sequence[str], y_train: np.ndarray, texts_test: Sequence[str],
                    y_test: np.ndarray, seed: int) -> dict[str, Any]:
    """Fit on the training texts (C by cross-validation), then return the test error and figures."""
    start = time.monotonic()
    search = GridSearchCV(pipeline(), {"classifier__C": list(C_GRID)}, scoring="accuracy",
                          cv=StratifiedKFold(5, shuffle=True, random_state=seed), n_jobs=1)
    search.fit(list(texts_train), y_train)
    predicted = search.predict(list(texts_test))
    classifier = search.best_estimator_.named_steps["classifier"]
    params = int(classifier.coef_.size + classifier.intercept_.size)
    features = int(classifier.coef_.shape[1])
    return {"test_error": float(np.mean(predicted != y_test)), "params": params, "wall_s": time.monotonic() - start,
            "details": {"C": search.best_params_["classifier__C"], "cv_accuracy": round(float(search.best_score_), 5),
                        "features": features, "sklearn": sklearn.__version__}}
