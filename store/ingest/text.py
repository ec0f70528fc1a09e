"""Words of a text, and the vocabulary that turns texts into fixed-length id sequences."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+")
PAD, UNKNOWN = 0, 1
_RESERVED = 2
_JSON_VERSION = 1
_MIN_LENGTH, _MAX_LENGTH = 8, 256


def tokenize(text: str) -> list[str]:
    """The lower-cased words of a text (Unicode word characters)."""
    return _WORD.findall(text.lower())


class TextEncoder:
    """A word vocabulary learned from training texts, mapping texts to fixed-length int32 id sequences
    (0 = padding, 1 = unknown word)."""

    def __init__(self, words: Sequence[str], max_length: int) -> None:
        self._words = list(words)
        self._ids = {word: i + _RESERVED for i, word in enumerate(self._words)}
        self.max_length = max_length

    @classmethod
    def fit(cls, texts: Sequence[str], max_vocab: int = 20000, max_length: int | None = None) -> TextEncoder:
        """Learn the `max_vocab - 2` most frequent words; `max_length` defaults to the 95th percentile of
        the texts' word counts, clamped to [8, 256]."""
        if max_vocab < _RESERVED:
            raise ValueError(f"max_vocab must be at least {_RESERVED} (padding and unknown)")
        if max_length is not None and max_length < 1:
            raise ValueError("max_length must be positive")
        counts: Counter[str] = Counter()
        lengths = []
        for text in texts:
            words = tokenize(text)
            counts.update(words)
            lengths.append(len(words))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        words = [word for word, _ in ranked[: max_vocab - _RESERVED]]
        if max_length is None:
            p95 = int(np.ceil(np.percentile(lengths, 95))) if lengths else _MIN_LENGTH
            max_length = min(max(p95, _MIN_LENGTH), _MAX_LENGTH)
        return cls(words, max_length)

    @property
    def vocab_size(self) -> int:
        """The number of ids, padding and unknown included."""
        return len(self._words) + _RESERVED

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """int32 [N, max_length]: each text's word ids, truncated or right-padded with 0."""
        out = np.zeros((len(texts), self.max_length), dtype=np.int32)
        for row, text in enumerate(texts):
            ids = [self._ids.get(word, UNKNOWN) for word in tokenize(text)[: self.max_length]]
            out[row, : len(ids)] = ids
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form that from_json reads back."""
        return {"version": _JSON_VERSION, "max_length": self.max_length, "words": list(self._words)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TextEncoder:
        """Rebuild an encoder from to_json's output; raise ValueError on malformed data."""
        if not isinstance(data, dict) or data.get("version") != _JSON_VERSION:
            raise ValueError(f"a text encoder needs a JSON object with version {_JSON_VERSION}")
        max_length, words = data.get("max_length"), data.get("words")
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError("a text encoder's max_length must be a positive integer")
        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            raise ValueError("a text encoder's words must be a list of non-empty strings")
        if len(set(words)) != len(words):
            raise ValueError("a text encoder's words must be unique")
        return cls(words, max_length)
