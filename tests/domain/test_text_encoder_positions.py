"""Which words produced each position of an encoded text row (`TextEncoder.word_positions`): what explanations
map attributions back to words with."""

from __future__ import annotations

from domain.ingest.text import TextEncoder

TEXTS = ["Free prize! Call now", "hello there friend", "win a free prize today", "zzzunknownword here"]


def test_every_id_of_a_row_has_the_words_that_made_it_and_padding_has_none() -> None:
    encoder = TextEncoder.fit(TEXTS[:3])
    for text in TEXTS:
        row, owners = encoder.encode([text])[0], encoder.word_positions(text)
        assert len(owners) == len(row)
        assert [bool(o) for o in owners] == [i != 0 for i in row.tolist()]
        assert all(0 <= w < len(text.split()) for o in owners for w in o)


def test_a_symbol_belongs_to_the_word_it_is_written_in_and_a_bigram_to_both_words() -> None:
    encoder = TextEncoder.fit(TEXTS[:3], ngram_buckets=1 << 16, min_count=1)
    owners = encoder.word_positions("Free prize! Call now")
    sequence = owners[: encoder.max_length]
    assert [o for o in sequence if o] == [[0], [1], [1], [2], [3]]  # free, prize, !, call, now
    bag = [o for o in owners[encoder.max_length:] if o]
    assert [1, 2] in bag  # the bigram "! call" spans "prize!" and "Call"
    assert [0, 1] in bag  # "free prize"


def test_an_unknown_word_owns_each_of_its_subword_ids() -> None:
    encoder = TextEncoder.fit(TEXTS[:3], ngram_buckets=0)
    owners = encoder.word_positions("zzzunknownword here")
    assert [o for o in owners if o] == [[0]] * 4 + [[1]] * len(encoder.ids("here"))
