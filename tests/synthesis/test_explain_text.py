"""Attribution checks that can fail, on texts whose answer is known (issue 26): the keyword that decides the class
gets the highest word score, attributions are per whitespace word, and deleting words in attribution order
lowers the probability faster than at random."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from domain.ingest.text import TextEncoder
from synthesis.explain import METHODS, Subject, checks, integrated
from synthesis.explain.grads import text_position_scores
from tests.synthesis.explain_sets import bag_model, keyword_texts, on_keyword, trained, word_model

TEST = 100


@pytest.fixture(scope="module")
def keywords() -> dict[str, Any]:
    """A bag-of-n-grams model trained on the keyword set, and its correctly classified held-out texts."""
    texts, y, where = keyword_texts(1000 + TEST, seed=0)
    encoder = TextEncoder.fit(texts[:1000])
    rows = encoder.encode(texts)
    spec = bag_model(encoder.layout(), rows.shape[1], 2)
    subject = Subject.of(spec, trained(spec, rows[:1000], y[:1000], epochs=10, learning_rate=1e-2), encoder)
    right = subject.probabilities(rows[1000:]).argmax(axis=1) == y[1000:]
    assert right.mean() > 0.9
    keep = np.where(right)[0] + 1000
    return {"subject": subject, "texts": [texts[i] for i in keep], "y": y[keep], "where": where[keep]}


@pytest.mark.parametrize("name", ["integrated-gradients", "occlusion", "smoothgrad"])
def test_the_keyword_gets_the_highest_score(keywords: dict[str, Any], name: str) -> None:
    """In at least 90 % of the correctly classified test texts, the deciding keyword scores highest."""
    scores = METHODS[name].texts(keywords["subject"], keywords["texts"], keywords["y"])
    assert [len(s) for s in scores] == [len(t.split()) for t in keywords["texts"]]
    assert on_keyword(scores, keywords["where"]) >= 0.9


def test_integrated_gradients_over_the_embeddings_are_complete(keywords: dict[str, Any]) -> None:
    """Per position, the attributions sum to the logit's difference from zero embeddings within 5 %; mapped to words
    they keep that sum (every position of these texts belongs to a word)."""
    subject, texts, y = keywords["subject"], keywords["texts"][:20], keywords["y"][:20]
    rows = subject.rows(texts)
    positions, error, _ = integrated.position_attributions(subject, rows, y)
    assert error.max() < integrated.COMPLETENESS
    words = text_position_scores(subject, texts, y, lambda r, t: integrated.position_attributions(subject, r, t)[0])
    assert np.allclose([w.sum() for w in words], positions.sum(axis=1), rtol=1e-3, atol=1e-4)


def test_padding_gets_no_attribution_and_the_words_alone_are_complete() -> None:
    """A word CNN averages over every position, padding included: padding keeps its embedding along the path, so
    its positions get nothing and the words' scores sum to the logit difference within 5 %."""
    texts, y, _ = keyword_texts(600, seed=2)
    encoder = TextEncoder.fit(texts[:500])
    rows = encoder.encode(texts)
    spec = word_model(encoder.layout(), rows.shape[1], 2)
    subject = Subject.of(spec, trained(spec, rows[:500], y[:500], epochs=6, learning_rate=1e-2), encoder)
    held, targets = texts[500:530], y[500:530]
    encoded = subject.rows(held)
    assert (encoded[:, :encoder.layout()["bag_start"]] == 0).any()  # texts shorter than the rows: padding counts
    positions, _, _ = integrated.position_attributions(subject, encoded, targets)
    assert np.all(positions[encoded == 0] == 0)
    words, error, steps = integrated.text_attributions(subject, held, targets)
    assert [len(w) for w in words] == [len(t.split()) for t in held]
    assert error.max() < integrated.COMPLETENESS and steps >= integrated.STEPS


@pytest.mark.parametrize("name", ["integrated-gradients", "occlusion"])
def test_words_in_attribution_order_lower_the_probability_faster_than_at_random_and_restore_it_faster(
        keywords: dict[str, Any], name: str) -> None:
    subject, texts, y = keywords["subject"], keywords["texts"][:30], keywords["y"][:30]
    scores = METHODS[name].texts(subject, texts, y)
    verdict = checks.faithfulness(lambda mode, order: checks.text_curve(subject, texts, y, scores, mode, order))
    assert verdict["deletion_auc"] < verdict["random_deletion_auc"]
    assert verdict["insertion_auc"] > verdict["random_insertion_auc"] and verdict["better_than_random"]


def test_gradcam_refuses_text_models(keywords: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="image models only"):
        METHODS["gradcam"].texts(keywords["subject"], keywords["texts"][:1], keywords["y"][:1])
