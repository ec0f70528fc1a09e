"""TextEncoder: vocabulary fitting, fixed-length encoding, and its JSON form."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.ingest import TextEncoder
from domain.ingest.text import SUBWORD_BUCKETS, ngram_features, trigrams

CORPUS = ["The cat sat on the mat.", "The dog ate the cat's food!", "Ünïcödé wörds, café; the END"]


def test_fit_ranks_words_by_frequency_and_encodes_with_padding_and_unknown() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=6, subword_buckets=0, ngram_buckets=0)
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
    encoder = TextEncoder.fit(CORPUS, max_vocab=5, subword_buckets=0, min_count=1)
    assert encoder.vocab_size == 5
    assert int(encoder.encode(CORPUS)[:, :encoder.max_length].max()) == 4


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
    [{}, {"version": 5, "max_length": 8, "words": []},
     {"version": 3, "max_length": 8, "words": [], "ngram_buckets": 16},
     {"version": 3, "max_length": 8, "words": [], "ngram_buckets": 16, "bag_length": -1},
     {"version": 3, "max_length": 8, "words": [], "ngram_buckets": 0, "bag_length": 8},
     {"version": 4, "max_length": 8, "words": [], "ngram_buckets": 16, "bag_length": 8, "word_buckets": 16},
     {"version": 4, "max_length": 8, "words": [], "ngram_buckets": 16, "bag_length": 8, "word_buckets": -1},
     {"version": 2, "max_length": 8, "words": [], "subword_buckets": -1},
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
    encoder = TextEncoder.fit(train, max_vocab=max_vocab, ngram_buckets=64)
    ids = encoder.encode(texts)
    words, bag = ids[:, :encoder.max_length], ids[:, encoder.max_length:]
    assert ids.shape == (len(texts), encoder.max_length + encoder.bag_length)
    assert 8 <= encoder.max_length <= 256 and encoder.vocab_size <= max_vocab + SUBWORD_BUCKETS
    assert 8 <= encoder.bag_length <= 1024 and encoder.layout()["bag_vocab"] == 65
    assert words.size == 0 or (words.min() >= 0 and words.max() < encoder.vocab_size)
    assert bag.size == 0 or (bag.min() >= 0 and bag.max() <= 64)


def test_unknown_words_become_character_trigram_buckets() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=12, ngram_buckets=0)
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


def test_the_bag_holds_each_texts_distinct_hashed_ngram_features_after_the_words() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=4, ngram_buckets=1 << 20)
    assert encoder.layout() == {"vocab_size": encoder.vocab_size, "bag_start": 4, "bag_vocab": (1 << 20) + 1,
                                "bag_words": 0}  # a given bucket count: one block
    (row,) = encoder.encode(["Cat sat, cat!"])
    words, bag = row[:4], row[4:]
    np.testing.assert_array_equal(words, encoder.encode(["cat sat , cat !"])[0, :4])  # the words as before
    kept = bag[bag > 0]
    features = ngram_features("Cat sat, cat!")
    assert {"w cat", "b cat sat", "b sat ,", "c  c", "c cat ", "c  cat ", "c at"} <= features
    assert "c cats" not in features and "b cat cat" not in features
    assert len(kept) == len(set(kept)) == len(features) and list(kept) == sorted(kept)  # 2^20 buckets: no clash
    assert np.all(bag[len(kept):] == 0)
    (similar,) = encoder.encode(["cats"])
    assert set(similar[similar > 0]) & set(kept)  # an unseen word shares character n-grams with a seen one


def test_the_bag_length_is_the_99th_percentile_of_feature_counts_and_cuts_longer_texts() -> None:
    encoder = TextEncoder.fit(["a"] * 200 + [" ".join(f"w{i}" for i in range(300))], min_count=1)
    assert encoder.bag_length == 8  # "a": 1 word + 2 character bigrams; the one long text is past the 99th
    row = encoder.encode([" ".join(f"w{i}" for i in range(300))])[0, encoder.max_length:]
    assert np.all(row > 0) and len(row) == 8


def test_the_learned_bag_gives_each_feature_two_texts_share_an_id_of_its_own_words_first() -> None:
    texts = [f"w{i} v{i % 50}" for i in range(1000)]  # w0..w999 once each; v0..v49 in 20 texts each
    encoder = TextEncoder.fit(texts)
    vocabulary = encoder.to_json()["features"]
    counts = {f: sum(f in ngram_features(t) for t in texts) for f in set().union(*map(ngram_features, texts))}
    assert set(vocabulary) == {f for f, n in counts.items() if n >= 2}
    assert "w v7" in vocabulary and "w w7" not in vocabulary and "b w7 v7" not in vocabulary  # w7: one text
    words = [f for f in vocabulary if f[0] in "wb"]
    assert vocabulary[:len(words)] == words and encoder.word_buckets == len(words) == 50  # words, then characters
    assert encoder.layout()["bag_vocab"] == len(vocabulary) + 1 and encoder.layout()["bag_words"] == 51
    ids = encoder.bag_ids("v7 unseen")
    assert ids == sorted(1 + vocabulary.index(f) for f in ngram_features("v7 unseen") if f in vocabulary)
    assert encoder.bag_ids("qqq") == []  # no known feature: an empty bag
    rare = TextEncoder.fit([f"x{i}" for i in range(10)] + ["v v"])  # two texts share "x" n-grams, none a word
    assert rare.word_buckets == 0 and rare.ngram_buckets == len(rare.to_json()["features"]) > 0  # one block
    assert TextEncoder.fit(texts, ngram_buckets=0).layout()["bag_vocab"] == 0


def test_version_5_json_keeps_the_feature_vocabulary() -> None:
    encoder = TextEncoder.fit(CORPUS * 2, max_length=4)
    data = json.loads(json.dumps(encoder.to_json()))
    assert data["version"] == 5 and len(data["features"]) == data["ngram_buckets"]
    again = TextEncoder.from_json(data)
    texts = [*CORPUS, "a cat sat on a dog"]
    np.testing.assert_array_equal(again.encode(texts), encoder.encode(texts))
    for broken in ({**data, "features": data["features"][1:]}, {**data, "features": data["features"][::-1]},
                   {**data, "features": [*data["features"][:-1], data["features"][0]]}):
        with pytest.raises(ValueError):
            TextEncoder.from_json(broken)


def test_word_features_hash_below_the_character_block_and_character_features_into_it() -> None:
    encoder = TextEncoder.from_json(TextEncoder.fit(CORPUS, max_length=4, ngram_buckets=64).to_json()
                                    | {"ngram_buckets": 256, "word_buckets": 128})  # version 4: two hashed blocks
    layout = encoder.layout()
    assert layout["bag_words"] == encoder.word_buckets + 1 and layout["bag_vocab"] == encoder.ngram_buckets + 1
    for text in CORPUS:
        features = ngram_features(text)
        words = {f for f in features if f[0] in "wb"}
        ids = encoder.bag_ids(text)
        assert sum(1 for i in ids if i < layout["bag_words"]) <= len(words)  # collisions may merge, never spill
        assert all(1 <= i < layout["bag_vocab"] for i in ids)
        assert encoder._bag(words) == [i for i in ids if i < layout["bag_words"]]
        assert all(i >= layout["bag_words"] for i in encoder._bag(features - words))
    again = TextEncoder.from_json(encoder.to_json())
    assert again.word_buckets == encoder.word_buckets
    np.testing.assert_array_equal(again.encode(CORPUS), encoder.encode(CORPUS))


def test_version_3_json_keeps_its_one_block_bag() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=6, ngram_buckets=64)
    old = encoder.to_json() | {"version": 3}
    del old["word_buckets"]
    again = TextEncoder.from_json(old)
    assert again.layout()["bag_words"] == 0
    np.testing.assert_array_equal(again.encode(CORPUS), encoder.encode(CORPUS))


def test_version_2_json_still_loads_without_a_bag() -> None:
    encoder = TextEncoder.fit(CORPUS, max_length=6)
    old = encoder.to_json() | {"version": 2}
    del old["ngram_buckets"], old["bag_length"]
    again = TextEncoder.from_json(old)
    assert again.layout()["bag_vocab"] == 0
    np.testing.assert_array_equal(again.encode(CORPUS), encoder.encode(CORPUS)[:, :6])
