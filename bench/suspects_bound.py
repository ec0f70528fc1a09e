"""How many flipped labels out-of-fold evidence can find at all on a text set, whatever the threshold.

The suspects rule of ``synthesis.explain.suspects`` lists a row when out-of-sample probabilities contradict its
label. A row the model gets wrong with its clean label looks the same as a flipped one, so on a set a model is wrong
about a fifth of the time the evidence itself bounds what any rule finds. This measures that bound with the usual
setting of confident learning (cleanlab's examples): a TF-IDF (words and bigrams) + logistic regression's 5-fold
out-of-fold probabilities on each set's training part with ``bench/xai.py``'s uniform flips, the rows ranked by the
probability of their given label. Printed per set: the out-of-fold accuracy on the given labels, the best recall
at precision >= 0.5 over every cut of that ranking, and the precision at recall 0.8. CPU only, about a minute.

Usage: ``python bench/suspects_bound.py [--datasets mr,sms] [--seed 1] [--data DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import protocol
from peers import datasets
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_predict
from xai import flip_labels

HERE = Path(__file__).resolve().parent


def bound(name: str, seed: int, data_dir: Path) -> dict[str, Any]:
    """The set's out-of-fold accuracy, best recall at precision >= 0.5 and precision at recall 0.8."""
    split = datasets.load(name, seed, data_dir=data_dir)
    noisy, flipped = flip_labels(split.y_train, len(split.classes), seed, "uniform")
    x = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit_transform(list(split.x_train))
    proba = cross_val_predict(LogisticRegression(C=10, max_iter=2000), x, noisy, cv=5, method="predict_proba")
    order = np.argsort(proba[np.arange(len(noisy)), noisy], kind="stable")
    is_flip = np.isin(order, flipped)
    hits = np.cumsum(is_flip)
    precision, recall = hits / np.arange(1, len(order) + 1), hits / len(flipped)
    return {"dataset": name, "rows": len(noisy), "flipped": len(flipped),
            "oof_accuracy": round(float(np.mean(proba.argmax(axis=1) == noisy)), 4),
            "best_recall_at_precision_0_5": round(float(recall[precision >= 0.5].max(initial=0.0)), 3),
            "precision_at_recall_0_8": round(float(precision[np.searchsorted(recall, 0.8)]), 3)}


def main(argv: list[str] | None = None) -> int:
    """Measure each set's bound, print it and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="mr,sms")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", type=Path, default=datasets.SHARED_DATA)
    p.add_argument("--out", type=Path, default=HERE / "results" / "suspects_bound.json")
    protocol.add_busy(p)
    args = p.parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    rows = [bound(name, args.seed, args.data) for name in args.datasets.split(",")]
    for row in rows:
        print(row)
    protocol.write(args.out, {"seed": args.seed, "datasets": rows}, run_record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
