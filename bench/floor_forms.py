"""The linear floor's forms on two-class text sets: each form's best out-of-fold score and their blend's, by the
floor's own 5-fold cross-validation on a set's training part (never its test part).

Rows: per set and split seed, the out-of-fold accuracy and log-loss of ``tfidf`` and ``nb`` at their best C and of
the blend ``tfidf+nb`` (its share chosen on the other folds: `synthesis.linear.blend_out_of_fold`), and what the
floor chose. This is what the blend rule was designed on.

Usage: ``python bench/floor_forms.py [--datasets mr,cr,mpqa] [--seeds 0,1] [--data ../shared/data]
[--out bench/results/floor_forms.json]``. Run it alone on the machine: the load average is recorded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def run(dataset: str, seed: int, data_dir: Path) -> dict[str, Any]:
    """The floor's forms scored out of fold on `dataset`'s training part at split `seed`."""
    import numpy as np
    from peers import datasets

    from domain.ingest.text import TextEncoder
    from synthesis import linear, select

    split = datasets.load(dataset, seed, data_dir=data_dir)
    texts = [str(t) for t in split.x_train]
    y = np.asarray(split.y_train)
    start = time.monotonic()
    encoder = TextEncoder.fit(texts)
    layout = encoder.layout()
    floor = linear.fit(encoder.encode(texts), y, len(split.classes),
                       linear.Bag(layout["bag_start"], layout["bag_vocab"], layout["bag_words"]), seed)
    best = {form: select.rank([k for k in floor.tried if k.startswith(f"{form} ")], lambda k: floor.tried[k],
                              len(y))[0] for form in linear.FORMS}
    keys = {**best, linear.BLEND: linear.BLEND}
    return {"dataset": dataset, "seed": seed, "rows": len(y), "choice": floor.description,
            **{form: {"key": key, "cv_accuracy": round(floor.tried[key][0], 5),
                      "cv_log_loss": round(floor.tried[key][1], 5)} for form, key in keys.items()},
            "seconds": round(time.monotonic() - start, 1)}


def main() -> None:
    """Score every (dataset, seed) pair one after another; print and write the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="mr,cr,mpqa")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "floor_forms.json")
    import protocol

    protocol.add_busy(p)
    args = p.parse_args()

    protocol.run_rows(args.out, [lambda d=d, s=int(s): run(d, s, args.data)  # type: ignore[misc]
                                 for d in args.datasets.split(",") for s in args.seeds.split(",")], args.busy)


if __name__ == "__main__":
    main()
