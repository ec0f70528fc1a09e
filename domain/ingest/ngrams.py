"""The n-gram features of a text and the feature vocabulary a bag of n-grams is indexed by.

The features are those of the classical TF-IDF text classifier: words, word bigrams and the character 2- to 5-grams
of each word. The vocabulary keeps the features that at least `MIN_COUNT` training texts share, at most
`MAX_FEATURES` a block, each with an id of its own: the tables indexed by it hold a row for each feature the data
has, with no hash collision (a collision costs a linear model most) and no row for a feature seen once, whose
weight could only memorise its one text (scikit-learn's ``min_df``).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence

_WORD = re.compile(r"\w+|[^\w\s]")  # words, and each symbol or punctuation mark (£, !, ?) as a token
MIN_COUNT = 2
"""The fewest training texts a word or an n-gram feature must occur in to get an id of its own."""
MAX_FEATURES = 2**17
"""The most features a block (word features; character features) keeps: the most frequent."""


def tokenize(text: str) -> list[str]:
    """The lower-cased tokens of a text: words (Unicode word characters) and single symbols, which carry
    signal of their own (a '£' or '!' in a message)."""
    return _WORD.findall(text.lower())


def ngram_features(text: str) -> set[str]:
    """The n-gram features of a text, as TF-IDF text classifiers use them: its words, word bigrams and the
    character 2- to 5-grams of each word padded with spaces (scikit-learn's ``char_wb`` analyser); spelt
    ``w word``, ``b word word`` and ``c chars``."""
    words = tokenize(text)
    features = {f"w {w}" for w in words} | {f"b {a} {b}" for a, b in itertools.pairwise(words)}
    for word in words:
        padded = f" {word} "
        features.update(f"c {padded[i:i + n]}" for n in range(2, 6) for i in range(len(padded) - n + 1))
    return features


def is_word_feature(feature: str) -> bool:
    """Whether a feature is a word or word bigram (else a character n-gram)."""
    return feature[0] in "wb"


def frequent(counts: Counter[str], min_count: int, most: int) -> list[str]:
    """The items of `counts` counted at least `min_count` times, the `most` most frequent, most frequent first
    (ties alphabetical, so that the same texts give the same ids)."""
    kept = sorted(((-n, item) for item, n in counts.items() if n >= min_count))
    return [item for _, item in kept[:most]]


def fit_features(feature_sets: Iterable[set[str]], min_count: int = MIN_COUNT,
                 most: int = MAX_FEATURES) -> tuple[list[str], int]:
    """The vocabulary of the texts' feature sets: the word features, then the character features, each block's
    kept by `frequent`; and the word block's length."""
    counts: Counter[str] = Counter()
    for features in feature_sets:
        counts.update(features)
    words = frequent(Counter({f: n for f, n in counts.items() if is_word_feature(f)}), min_count, most)
    chars = frequent(Counter({f: n for f, n in counts.items() if not is_word_feature(f)}), min_count, most)
    return [*words, *chars], len(words)


def feature_ids(ids: dict[str, int], features: Sequence[str] | set[str]) -> list[int]:
    """The sorted distinct ids of the `features` the vocabulary `ids` knows (the others are dropped)."""
    return sorted({i for f in features if (i := ids.get(f)) is not None})
