"""Which n-gram vocabulary the text encoder learns: each rule is scored by the linear floor's 5-fold
cross-validation on a text set's training part (never its test part), beside the bag's size.

Rules: ``hashed`` (each block hashed into a power of two at least 4 times its distinct features, at most 2^17),
``min1`` (every feature seen in the training texts, an id each) and ``min2`` (the features at least two training
texts share: the encoder's rule, `domain.ingest.ngrams.MIN_COUNT`).

Usage: ``python bench/text_vocabulary.py [--datasets sms,mr,cr,mpqa] [--seed 0] [--data ../shared/data]
[--out bench/results/text_vocabulary.json]``. Run it alone on the machine: the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def hashed(texts: list[str]) -> Any:
    """The encoder of the earlier rule: both blocks hashed, a power of two at least 4 times each block's features."""
    from domain.ingest.ngrams import is_word_feature, ngram_features
    from domain.ingest.text import TextEncoder

    words = TextEncoder.fit(texts, ngram_buckets=64, min_count=1)
    distinct = set().union(*(ngram_features(t) for t in texts))
    word = sum(1 for f in distinct if is_word_feature(f))

    def buckets(n: int) -> int:
        return min(max(1 << (4 * n - 1).bit_length(), 2**7), 2**17)

    data = words.to_json() | {"ngram_buckets": buckets(word) + buckets(len(distinct) - word),
                              "word_buckets": buckets(word), "bag_length": 1024}
    return TextEncoder.from_json(data)


def run(dataset: str, rule: str, seed: int, data_dir: Path) -> dict[str, Any]:
    """The floor's cross-validated error on `dataset`'s training part with the vocabulary `rule`."""
    import numpy as np
    from peers import datasets

    from domain.ingest.text import TextEncoder
    from synthesis import linear

    split = datasets.load(dataset, seed, data_dir=data_dir)
    texts = [str(t) for t in split.x_train]
    start = time.monotonic()
    encoder = hashed(texts) if rule == "hashed" else TextEncoder.fit(texts, min_count=1 if rule == "min1" else 2)
    layout = encoder.layout()
    x = encoder.encode(texts)
    floor = linear.fit(x, np.asarray(split.y_train), len(split.classes),
                       linear.Bag(layout["bag_start"], layout["bag_vocab"], layout["bag_words"]), seed)
    error, loss = floor.tried[floor.key]
    return {"dataset": dataset, "rule": rule, "seed": seed, "cv_error": round(1 - error, 5), "cv_log_loss": loss,
            "choice": floor.description, "bag_ids": layout["bag_vocab"], "words": encoder.vocab_size,
            "floor_params": layout["bag_vocab"] * len(split.classes), "seconds": round(time.monotonic() - start, 1)}


def main() -> None:
    """Score every (dataset, rule) pair one after another; print and write the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="sms,mr,cr,mpqa")
    p.add_argument("--rules", default="hashed,min1,min2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "text_vocabulary.json")
    import protocol

    protocol.add_busy(p)
    args = p.parse_args()
    run_record = protocol.start(args.busy)
    rows = []
    for dataset in args.datasets.split(","):
        for rule in args.rules.split(","):
            row = run(dataset, rule, args.seed, args.data)
            print(json.dumps(row), flush=True)
            rows.append(row)
    protocol.write(args.out, {"rows": rows}, run_record, indent=1)


if __name__ == "__main__":
    main()
