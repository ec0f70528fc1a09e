"""How the architecture search spends its share of the budget (`synthesis.search`), and where its trials are
compared."""

from __future__ import annotations

import math
from dataclasses import dataclass

from synthesis.curves import DEFAULT_RULE, RULES


@dataclass(frozen=True)
class SearchConfig:
    """How the search spends its share of the budget."""

    horizon: int
    eta: int = 3
    population: int = 12
    tournament: int = 3
    random_fraction: float = 0.2
    converged_after: int = 16  # trials in a row without a better predicted accuracy end the search ...
    converged_not_before: float = 0.5  # ... once at least this share of the search's budget is spent
    max_trial_share: float = 0.25  # the most of the search's time (or epochs) one trial may take
    memory_limit: int | None = None
    seed: int = 0
    rung_rule: str = DEFAULT_RULE  # what ASHA ranks trials by at a rung: a name in synthesis.curves.RULES

    def __post_init__(self) -> None:
        if self.rung_rule not in RULES:
            raise ValueError(f"unknown stop rule {self.rung_rule!r}; one of {sorted(RULES)}")


def rungs(eta: int, horizon: int) -> list[int]:
    """The epochs at which trials are compared: 1, eta, eta^2, ... below the horizon."""
    return [eta**k for k in range(int(math.log(max(horizon - 1, 1), eta)) + 1) if eta**k < horizon]
