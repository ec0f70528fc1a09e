"""Words of a text, and the vocabulary that turns texts into fixed-length id sequences."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np

from domain.ingest.ngrams import (
    MIN_COUNT,
    feature_ids,
    fit_features,
    frequent,
    is_word_feature,
    ngram_features,
    tokenize,
)

__all__ = ["PAD", "SUBWORD_BUCKETS", "UNKNOWN", "Layout", "TextEncoder", "ngram_features", "tokenize", "trigrams"]

PAD, UNKNOWN = 0, 1
_RESERVED = 2
_JSON_VERSIONS = (1, 2, 3, 4, 5)
"""1: words only; 2: + trigram buckets for unknown words; 3: + a hashed bag; 4: in two blocks; 5: a learned feature
vocabulary in place of hashing."""
_MIN_LENGTH, _MAX_LENGTH = 8, 256
_MAX_BAG = 1024
SUBWORD_BUCKETS = 2048
"""Hash buckets of character trigrams that stand in for words outside the vocabulary."""
_PIECES_PER_WORD = 4


def trigrams(word: str) -> list[str]:
    """The character trigrams of `<word>` (with boundary marks), as fastText's subword units."""
    marked = f"<{word}>"
    return [marked[i:i + 3] for i in range(len(marked) - 2)]


class Layout(TypedDict):
    """Where the parts of an encoded row are (:meth:`TextEncoder.layout`)."""

    vocab_size: int
    bag_start: int
    bag_vocab: int
    bag_words: int


class TextEncoder:
    """A word vocabulary learned from training texts, mapping texts to fixed-length int32 id sequences
    (0 = padding, 1 = unknown word).

    A word outside the vocabulary becomes up to four ids of hashed character trigrams (after the word ids),
    so unseen and rare words still carry signal (Bojanowski et al., "Enriching Word Vectors with Subword
    Information", 2017); with `subword_buckets=0` it becomes the unknown id.

    With `ngram_buckets`, each row goes on with a bag of `bag_length` positions: the ids ``1..ngram_buckets`` of
    the text's distinct n-gram features (:func:`ngram_features`; sorted, 0 = padding), the features of a linear
    TF-IDF classifier, for a bag-of-n-grams network (Joulin et al., "Bag of Tricks for Efficient Text
    Classification", 2017). Their ids are their own: the bag has its own table. With `features` (version 5, what
    `fit` learns) a feature's id is its place in that vocabulary and unknown features are dropped; without, features
    are hashed. With `word_buckets` (versions 4, 5), word features take ids ``1..word_buckets`` and character
    features the ids above, so a model can weigh the two blocks apart, as a TF-IDF classifier that normalises each
    block does (`synthesis.linear`); without, both share one range.
    """

    def __init__(self, words: Sequence[str], max_length: int, subword_buckets: int = SUBWORD_BUCKETS,
                 ngram_buckets: int = 0, bag_length: int = 0, word_buckets: int = 0,
                 features: Sequence[str] | None = None) -> None:
        if (ngram_buckets > 0) != (bag_length > 0):
            raise ValueError("ngram_buckets and bag_length must both be positive, or both 0 (no bag)")
        if word_buckets and not 0 < word_buckets < ngram_buckets:
            raise ValueError("word_buckets must be 0 (one block) or between 0 and ngram_buckets")
        if features is not None and len(features) != ngram_buckets:
            raise ValueError("a feature vocabulary must have ngram_buckets features")
        self._features = None if features is None else list(features)
        self._feature_ids = {f: i + 1 for i, f in enumerate(self._features or ())}
        self._words = list(words)
        self._ids = {word: i + _RESERVED for i, word in enumerate(self._words)}
        self.max_length = max_length
        self.subword_buckets = subword_buckets
        self.ngram_buckets = ngram_buckets
        self.bag_length = bag_length
        self.word_buckets = word_buckets

    def _word_ids(self, word: str) -> list[int]:
        known = self._ids.get(word)
        if known is not None:
            return [known]
        if not self.subword_buckets:
            return [UNKNOWN]
        pieces = trigrams(word)
        if len(pieces) > _PIECES_PER_WORD:  # the first, last and evenly spaced ones between
            pieces = [pieces[round(i * (len(pieces) - 1) / (_PIECES_PER_WORD - 1))] for i in range(_PIECES_PER_WORD)]
        base = _RESERVED + len(self._words)
        return [base + zlib.crc32(p.encode("utf-8")) % self.subword_buckets for p in pieces]

    def ids(self, text: str) -> list[int]:
        """The ids of a text, untruncated."""
        return [i for word in tokenize(text) for i in self._word_ids(word)]

    def bag_ids(self, text: str) -> list[int]:
        """The sorted distinct bag ids of a text's n-gram features, untruncated (empty without a bag)."""
        return self._bag(ngram_features(text)) if self.ngram_buckets else []

    def _bag(self, features: set[str]) -> list[int]:
        """The sorted distinct bag ids of `features`."""
        if self._features is not None:
            return feature_ids(self._feature_ids, features)
        if not self.word_buckets:
            return sorted({1 + zlib.crc32(f.encode("utf-8")) % self.ngram_buckets for f in features})
        chars = self.ngram_buckets - self.word_buckets
        return sorted({1 + zlib.crc32(f.encode("utf-8")) % self.word_buckets if is_word_feature(f)
                       else 1 + self.word_buckets + zlib.crc32(f.encode("utf-8")) % chars for f in features})

    @classmethod
    def fit(cls, texts: Sequence[str], max_vocab: int = 20000, max_length: int | None = None,
            subword_buckets: int = SUBWORD_BUCKETS, ngram_buckets: int | None = None,
            min_count: int = MIN_COUNT) -> TextEncoder:
        """Learn the `max_vocab - 2` most frequent words that occur at least `min_count` times; `max_length`
        defaults to the 95th percentile of the texts' id counts, clamped to [8, 256]. The bag's vocabulary is the
        n-gram features at least `min_count` texts share (`domain.ingest.ngrams.fit_features`; `ngram_buckets`
        given: that many hash buckets in one block; 0: no bag); its length is the 99th percentile of the texts'
        bag id counts, clamped to [8, 1024]."""
        if max_vocab < _RESERVED:
            raise ValueError(f"max_vocab must be at least {_RESERVED} (padding and unknown)")
        if max_length is not None and max_length < 1:
            raise ValueError("max_length must be positive")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text))
        words = frequent(counts, min_count, max_vocab - _RESERVED)
        features = [ngram_features(text) for text in texts] if ngram_buckets != 0 else []
        vocabulary, word_buckets = None, 0
        if ngram_buckets is None:
            vocabulary, word_buckets = fit_features(features, min_count)
            ngram_buckets = len(vocabulary)
            word_buckets = word_buckets if 0 < word_buckets < ngram_buckets else 0  # an empty block: one block
        bag = _MAX_BAG if ngram_buckets else 0
        encoder = cls(words, max_length or _MAX_LENGTH, subword_buckets, ngram_buckets, bag, word_buckets,
                      vocabulary if ngram_buckets else None)
        if max_length is None:
            encoder.max_length = _percentile([len(encoder.ids(text)) for text in texts], 95, _MAX_LENGTH)
        if ngram_buckets:
            encoder.bag_length = _percentile([len(encoder._bag(f)) for f in features], 99, _MAX_BAG)
        return encoder

    @property
    def vocab_size(self) -> int:
        """The number of ids of the word sequence: padding, unknown, the words and the subword buckets."""
        return len(self._words) + _RESERVED + self.subword_buckets

    def layout(self) -> Layout:
        """Where the parts of an encoded row are: the word sequence's `vocab_size`; the bag's first position
        `bag_start` and its number of ids `bag_vocab` (both 0 without a bag); `bag_words`, the first id of its
        character block (0: one block)."""
        bag = self.ngram_buckets > 0
        return Layout(vocab_size=self.vocab_size, bag_start=self.max_length if bag else 0,
                      bag_vocab=self.ngram_buckets + 1 if bag else 0,
                      bag_words=self.word_buckets + 1 if bag and self.word_buckets else 0)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """int32 [N, max_length + bag_length]: each text's word ids, truncated or right-padded with 0, then its
        bag ids, the same."""
        out = np.zeros((len(texts), self.max_length + self.bag_length), dtype=np.int32)
        for row, text in enumerate(texts):
            ids = self.ids(text)[: self.max_length]
            out[row, : len(ids)] = ids
            bag = self.bag_ids(text)[: self.bag_length]
            out[row, self.max_length: self.max_length + len(bag)] = bag
        return out

    def word_positions(self, text: str) -> list[list[int]]:
        """For each position of the text's encoded row (`encode`), the indices of the words of ``text.split()``
        that produced its id: a word's own ids, and in the bag each feature's words (a bigram's two), every
        feature hashed to that id; empty for padding. Explanations map attributions back to words with it."""
        tokens: list[tuple[str, int]] = [(token, w) for w, word in enumerate(text.split()) for token in tokenize(word)]
        out: list[list[int]] = [[] for _ in range(self.max_length + self.bag_length)]
        position = 0
        for token, w in tokens:
            for _ in self._word_ids(token):
                if position < self.max_length:
                    out[position].append(w)
                position += 1
        if not self.ngram_buckets:
            return out
        owners: dict[int, set[int]] = {}
        for i, (token, w) in enumerate(tokens):
            features = [(f"w {token}", {w})]
            if i + 1 < len(tokens):
                features.append((f"b {token} {tokens[i + 1][0]}", {w, tokens[i + 1][1]}))
            padded = f" {token} "
            features += [(f"c {padded[j:j + n]}", {w}) for n in range(2, 6) for j in range(len(padded) - n + 1)]
            for feature, words in features:
                for bag_id in self._bag({feature}):  # none for a feature outside the vocabulary
                    owners.setdefault(bag_id, set()).update(words)
        for k, bag_id in enumerate(sorted(owners)[: self.bag_length]):
            out[self.max_length + k] = sorted(owners[bag_id])
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form that from_json reads back."""
        return {"version": 4 if self._features is None else 5, "max_length": self.max_length,
                "subword_buckets": self.subword_buckets, "ngram_buckets": self.ngram_buckets,
                "bag_length": self.bag_length, "word_buckets": self.word_buckets, "words": list(self._words),
                **({} if self._features is None else {"features": list(self._features)})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TextEncoder:
        """Rebuild an encoder from to_json's output; raise ValueError on malformed data."""
        if not isinstance(data, dict) or data.get("version") not in _JSON_VERSIONS:
            raise ValueError(f"a text encoder needs a JSON object with a version in {_JSON_VERSIONS}")
        sizes = {k: data.get(k, 0) if data["version"] >= since else 0
                 for k, since in (("subword_buckets", 2), ("ngram_buckets", 3), ("bag_length", 3),
                                  ("word_buckets", 4))}
        for key, value in sizes.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"a text encoder's {key} must be a non-negative integer")
        if (sizes["ngram_buckets"] > 0) != (sizes["bag_length"] > 0):
            raise ValueError("a text encoder's ngram_buckets and bag_length must both be positive, or both 0")
        if sizes["word_buckets"] and sizes["word_buckets"] >= sizes["ngram_buckets"]:
            raise ValueError("a text encoder's word_buckets must be below its ngram_buckets")
        max_length, words = data.get("max_length"), data.get("words")
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError("a text encoder's max_length must be a positive integer")
        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            raise ValueError("a text encoder's words must be a list of non-empty strings")
        if len(set(words)) != len(words):
            raise ValueError("a text encoder's words must be unique")
        features = data.get("features") if data["version"] >= 5 else None
        if data["version"] >= 5 and not (isinstance(features, list) and len(features) == sizes["ngram_buckets"]
                                         and all(isinstance(f, str) and f for f in features)
                                         and len(set(features)) == len(features)):
            raise ValueError("a text encoder's features must be ngram_buckets distinct non-empty strings")
        if features and sizes["word_buckets"] and not all(
                is_word_feature(f) == (i < sizes["word_buckets"]) for i, f in enumerate(features)):
            raise ValueError("a text encoder's features must list the word_buckets word features first")
        return cls(words, max_length, sizes["subword_buckets"], sizes["ngram_buckets"], sizes["bag_length"],
                   sizes["word_buckets"], features)


def _percentile(counts: list[int], q: int, most: int) -> int:
    """The q-th percentile of `counts` rounded up, clamped to [8, most]."""
    value = int(np.ceil(np.percentile(counts, q))) if counts else _MIN_LENGTH
    return min(max(value, _MIN_LENGTH), most)
