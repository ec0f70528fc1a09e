"""The product's rules: budget tiers and their limits, the compression tolerance's default and range.

Each is defined here once; the API's request schemas, the offline `netsynth synthesize` command, the engine and the
job table read them from here.
"""

from __future__ import annotations

TIERS = ("low", "medium", "high")
"""The named budget tiers (NeuNetS); their device-seconds are settings (`NETSYNTH_TIER_*_SECONDS`)."""

TIER_MAX_SAMPLES: tuple[tuple[int, str], ...] = ((10_000, "low"), (100_000, "medium"))
"""The tier a dataset of up to that many samples gets when the user picks none; larger ones get 'high'."""

MIN_BUDGET_SECONDS = 10
"""The smallest budget in seconds a job submitted through the API may be given."""

MAX_BUDGET_SECONDS = 16 * 3600 * 4
"""The largest budget a job may be given in seconds: four times the default high tier."""

MAX_ATTEMPTS = 3
"""How many attempts a job gets by default (`NETSYNTH_MAX_ATTEMPTS`): each begins when a worker claims it."""

DEFAULT_TOLERANCE = 0.005
"""Validation accuracy a compressed model may lose when the user sets none: 0.5 percentage points (where one
validation row is worth more, one row if the validation loss does not rise:
`synthesis.compress.context.Context.below_resolution`)."""

MAX_TOLERANCE = 0.2
"""The largest compression tolerance a user may set (a fraction: 20 percentage points)."""


def tier_for(samples: int) -> str:
    """The budget tier for a dataset of `samples` samples (NeuNetS: datasets up to 10k samples fit 'low')."""
    for most, tier in TIER_MAX_SAMPLES:
        if samples <= most:
            return tier
    return "high"
