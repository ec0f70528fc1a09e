"""Words of a text, and the vocabulary that turns texts into fixed-length id sequences."""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+|[^\w\s]")  # words, and each symbol or punctuation mark (£, !, ?) as a token
PAD, UNKNOWN = 0, 1
_RESERVED = 2
_JSON_VERSIONS = (1, 2)  # 1: words only; 2: words plus character-trigram buckets for unknown words
_MIN_LENGTH, _MAX_LENGTH = 8, 256
SUBWORD_BUCKETS = 2048
"""Hash buckets of character trigrams that stand in for words outside the vocabulary."""
_PIECES_PER_WORD = 4


def tokenize(text: str) -> list[str]:
    """The lower-cased tokens of a text: words (Unicode word characters) and single symbols, which carry
    signal of their own (a '£' or '!' in a message)."""
    return _WORD.findall(text.lower())


def trigrams(word: str) -> list[str]:
    """The character trigrams of `<word>` (with boundary marks), as fastText's subword units."""
    marked = f"<{word}>"
    return [marked[i:i + 3] for i in range(len(marked) - 2)]


class TextEncoder:
    """A word vocabulary learned from training texts, mapping texts to fixed-length int32 id sequences
    (0 = padding, 1 = unknown word).

    A word outside the vocabulary becomes up to four ids of hashed character trigrams (after the word ids),
    so unseen and rare words still carry signal (Bojanowski et al., "Enriching Word Vectors with Subword
    Information", 2017); with `subword_buckets=0` it becomes the unknown id.
    """

    def __init__(self, words: Sequence[str], max_length: int, subword_buckets: int = SUBWORD_BUCKETS) -> None:
        self._words = list(words)
        self._ids = {word: i + _RESERVED for i, word in enumerate(self._words)}
        self.max_length = max_length
        self.subword_buckets = subword_buckets

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

    @classmethod
    def fit(cls, texts: Sequence[str], max_vocab: int = 20000, max_length: int | None = None,
            subword_buckets: int = SUBWORD_BUCKETS) -> TextEncoder:
        """Learn the `max_vocab - 2` most frequent words; `max_length` defaults to the 95th percentile of
        the texts' id counts, clamped to [8, 256]."""
        if max_vocab < _RESERVED:
            raise ValueError(f"max_vocab must be at least {_RESERVED} (padding and unknown)")
        if max_length is not None and max_length < 1:
            raise ValueError("max_length must be positive")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        words = [word for word, _ in ranked[: max_vocab - _RESERVED]]
        encoder = cls(words, max_length or _MAX_LENGTH, subword_buckets)
        if max_length is None:
            lengths = [len(encoder.ids(text)) for text in texts]
            p95 = int(np.ceil(np.percentile(lengths, 95))) if lengths else _MIN_LENGTH
            encoder.max_length = min(max(p95, _MIN_LENGTH), _MAX_LENGTH)
        return encoder

    @property
    def vocab_size(self) -> int:
        """The number of ids: padding, unknown, the words and the subword buckets."""
        return len(self._words) + _RESERVED + self.subword_buckets

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """int32 [N, max_length]: each text's word ids, truncated or right-padded with 0."""
        out = np.zeros((len(texts), self.max_length), dtype=np.int32)
        for row, text in enumerate(texts):
            ids = self.ids(text)[: self.max_length]
            out[row, : len(ids)] = ids
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form that from_json reads back."""
        return {"version": 2, "max_length": self.max_length, "subword_buckets": self.subword_buckets,
                "words": list(self._words)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TextEncoder:
        """Rebuild an encoder from to_json's output; raise ValueError on malformed data."""
        if not isinstance(data, dict) or data.get("version") not in _JSON_VERSIONS:
            raise ValueError(f"a text encoder needs a JSON object with a version in {_JSON_VERSIONS}")
        buckets = data.get("subword_buckets", 0) if data["version"] == 2 else 0
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 0:
            raise ValueError("a text encoder's subword_buckets must be a non-negative integer")
        max_length, words = data.get("max_length"), data.get("words")
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError("a text encoder's max_length must be a positive integer")
        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            raise ValueError("a text encoder's words must be a list of non-empty strings")
        if len(set(words)) != len(words):
            raise ValueError("a text encoder's words must be unique")
        return cls(words, max_length, buckets)
