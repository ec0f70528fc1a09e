"""When the search has learned enough: a network far ahead of its challengers gets the rest of the search's time.

A search that keeps proposing candidates which all trail its leader spends time the leader's final training
could use. The rule here ends the search once the leading network has beaten
the last `AHEAD_AFTER` network candidates in a row, each at equal training time and beyond the validation noise
(:func:`synthesis.select.tied`). Equal time, because the final training has a fixed time to spend: a network that
learns more per epoch but costs five times as much per epoch (a ResNet beside the hand-written CNN on 32x32 photos)
is worth its time only if it is ahead per second; and a slow starter is held against the leader's own start, not
against its finish (the extrapolations ASHA uses cannot tell a slow start from a dead end). An epoch budget counts
epochs, not seconds, so there the comparison is at equal epochs and the search log stays a function of the seed.
Where candidates come within noise of the leader, as on small validation sets or between near-equal designs, the
search goes on. The final training starts when the search ends, so it gets the time the search leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from synthesis.select import tied

AHEAD_AFTER = 3
"""Network candidates in a row the leader must beat, at equal training time and beyond noise, to end the search."""


@dataclass(frozen=True)
class Run:
    """A trained candidate's validation accuracy after each epoch and the training seconds one epoch took
    (compilation excluded; 0: compare by epochs)."""

    curve: Sequence[float]
    epoch_s: float = 0.0

    def best_within(self, seconds: float | None, epochs: int) -> float:
        """The best accuracy within `seconds` of training (None: within `epochs` epochs); at least the first
        epoch's."""
        if seconds is not None:
            epochs = int(seconds / self.epoch_s + 1e-9)
        return max(self.curve[:max(min(epochs, len(self.curve)), 1)])


def beaten(leader: Run, challenger: Run, rows: int) -> bool:
    """Whether `leader` beats `challenger` (validated on the same `rows` rows) over the training both had: the best
    accuracy of each within the shorter of their training times (their epochs, when either time is unknown), higher
    for the leader beyond noise."""
    if not leader.curve or not challenger.curve:
        return False
    timed = leader.epoch_s > 0 and challenger.epoch_s > 0
    both = min(len(leader.curve) * leader.epoch_s, len(challenger.curve) * challenger.epoch_s) if timed else None
    epochs = min(len(leader.curve), len(challenger.curve))
    lead, chal = leader.best_within(both, epochs), challenger.best_within(both, epochs)
    return lead > chal and not tied(lead, chal, rows)


def leader_ahead(runs: Sequence[Run], rows: int, after: int = AHEAD_AFTER) -> int | None:
    """The index in `runs` (the network candidates trained so far, in the order they trained) of the leader — the
    best measured accuracy — when it beat each of the last `after` others (:func:`beaten`); None otherwise."""
    trained = [i for i, run in enumerate(runs) if run.curve]
    if len(trained) <= after:
        return None
    leader = max(trained, key=lambda i: (max(runs[i].curve), -i))
    challengers = [i for i in trained if i != leader][-after:]
    if not all(i > leader for i in challengers):
        return None  # the leader must be older than its challengers: it beat them, not they it
    return leader if all(beaten(runs[leader], runs[i], rows) for i in challengers) else None
