"""TextEncoder: vocabulary fitting, fixed-length encoding, and its JSON form."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.ingest import TextEncoder
from store.ingest.text import SUBWORD_BUCKETS, trigrams

CORPUS = ["The cat sat on the mat.", "The dog ate the cat's food!", "Ünïcödé wörds, café; the END"]


def test_fit_ranks_words_by_frequency_and_encodes_with_padding_and_unknown() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=6, subword_buckets=0)
    assert encoder.max_length == 6
    ids = encoder.encode(["the cat", "THE zebra cat on the mat mat mat", ""])
    assert ids.dtype == np.int32 and ids.shape == (3, 6)
    the, cat = ids[0, 0], ids[0, 1]
    assert (the, cat) == (2, 3)  # the most frequent words get the first ids after padding and unknown
    np.testing.assert_array_equal(ids[0], [the, cat, 0, 0, 0, 0])
    assert ids[1, 1] == 1 and ids[1, 0] == the  # unknown word; truncated to max_length
    np.testing.assert_array_equal(ids[2], np.zeros(6))


def test_words_are_lower_cased_unicode_words() -> None:
    encoder = TextEncoder.fit(["Café CAFÉ café"], subword_buckets=0)
    assert encoder.vocab_size == 3
    assert encoder.encode(["cAfÉ"])[0, 0] == 2


def test_max_vocab_caps_the_vocabulary_including_padding_and_unknown() -> None:
    encoder = TextEncoder.fit(CORPUS, max_vocab=5, subword_buckets=0)
    assert encoder.vocab_size == 5
    assert int(encoder.encode(CORPUS).max()) == 4


def test_the_default_length_is_the_95th_percentile_clamped() -> None:
    assert TextEncoder.fit(["a b"] * 10).max_length == 8
    assert TextEncoder.fit([" ".join(["w"] * 500)] * 3).max_length == 256
    assert TextEncoder.fit([" ".join(["w"] * n) for n in range(1, 21)]).max_length == 20


def test_json_round_trip_encodes_the_same() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=9)
    again = TextEncoder.from_json(json.loads(json.dumps(encoder.to_json())))
    assert (again.vocab_size, again.max_length) == (encoder.vocab_size, encoder.max_length)
    texts = [*CORPUS, "new words"]
    np.testing.assert_array_equal(again.encode(texts), encoder.encode(texts))


@pytest.mark.parametrize(
    "data",
    [{}, {"version": 3, "max_length": 8, "words": []}, {"version": 2, "max_length": 8, "words": [],
                                                        "subword_buckets": -1},
     {"version": 1, "max_length": 0, "words": []},
     {"version": 1, "max_length": True, "words": []}, {"version": 1, "max_length": 8, "words": "abc"},
     {"version": 1, "max_length": 8, "words": ["a", "a"]}, {"version": 1, "max_length": 8, "words": ["a", 3]}],
)
def test_malformed_json_is_a_value_error(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TextEncoder.from_json(data)


@given(
    train=st.lists(st.text(max_size=60), max_size=20),
    texts=st.lists(st.text(max_size=80), max_size=10),
    max_vocab=st.integers(2, 50),
)
def test_encode_stays_within_the_vocabulary_and_length(train: list[str], texts: list[str], max_vocab: int) -> None:
    encoder = TextEncoder.fit(train, max_vocab=max_vocab)
    ids = encoder.encode(texts)
    assert ids.shape == (len(texts), encoder.max_length)
    assert 8 <= encoder.max_length <= 256 and encoder.vocab_size <= max_vocab + SUBWORD_BUCKETS
    assert ids.size == 0 or (ids.min() >= 0 and ids.max() < encoder.vocab_size)


def test_unknown_words_become_character_trigram_buckets() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=12)
    words = 2 + len(encoder.to_json()["words"])
    assert encoder.vocab_size == words + SUBWORD_BUCKETS
    (zebra,) = encoder.encode(["zebra"])
    pieces = zebra[zebra > 0]
    assert len(pieces) == 4 and all(words <= i < encoder.vocab_size for i in pieces)  # <ze, zeb.., ra>
    (again,) = encoder.encode(["zebras"])
    assert set(pieces) & set(again[again > 0])  # a related unseen word shares subwords: it still carries signal
    assert trigrams("cat") == ["<ca", "cat", "at>"]


def test_version_1_json_still_loads_without_subwords() -> None:
    old = TextEncoder.from_json({"version": 1, "max_length": 4, "words": ["cat"]})
    np.testing.assert_array_equal(old.encode(["cat zebra"]), [[2, 1, 0, 0]])
