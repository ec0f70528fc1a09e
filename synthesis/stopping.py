"""When the search has learned enough: a network far ahead of its challengers gets the rest of the search's time.

A search that keeps proposing candidates which all trail its leader spends time the leader's final training
could use: on a 10-class photo set at 1,200 s the search trained 3 candidates in 330 s and shipped its first seed,
whose final training then got 568 s (issue 24). The rule here ends the search once the leading network has beaten
the last `AHEAD_AFTER` network candidates in a row, each epoch for epoch and beyond the validation noise
(:func:`synthesis.select.tied`): comparing at equal epochs judges a slow starter against the leader's own start,
not against its finish (the extrapolations ASHA uses cannot tell a slow start from a dead end). Where candidates
come within noise of the leader, as on small validation sets or between near-equal designs, the search goes on.
The final training starts when the search ends, so it gets the time the search leaves (`synthesis.budget`).
"""

from __future__ import annotations

from collections.abc import Sequence

from synthesis.select import tied

AHEAD_AFTER = 3
"""Network candidates in a row the leader must beat, epoch for epoch and beyond noise, to end the search."""


def beaten(leader: Sequence[float], challenger: Sequence[float], rows: int) -> bool:
    """Whether validation curve `leader` beats `challenger` (accuracy per epoch on the same `rows` rows) at equal
    epochs: the best accuracy of each over the epochs both trained, higher for the leader beyond noise."""
    epochs = min(len(leader), len(challenger))
    if epochs == 0:
        return False
    lead, chal = max(leader[:epochs]), max(challenger[:epochs])
    return lead > chal and not tied(lead, chal, rows)


def leader_ahead(curves: Sequence[Sequence[float]], rows: int, after: int = AHEAD_AFTER) -> int | None:
    """The index in `curves` (the validation curves of the network candidates trained so far, in the order they
    trained) of the leader — the best measured accuracy — when it beat each of the last `after` other curves
    (:func:`beaten`); None otherwise."""
    trained = [i for i, curve in enumerate(curves) if curve]
    if len(trained) <= after:
        return None
    leader = max(trained, key=lambda i: (max(curves[i]), -i))
    challengers = [i for i in trained if i != leader][-after:]
    if not all(i > leader for i in challengers) or len(challengers) < after:
        return None  # the leader must be older than its challengers: it beat them, not they it
    return leader if all(beaten(curves[leader], curves[i], rows) for i in challengers) else None
