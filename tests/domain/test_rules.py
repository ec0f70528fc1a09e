"""The product's rules, each defined once in `domain.rules`, are what every entry point applies."""

from __future__ import annotations

import uuid

import pytest

from domain.rules import MAX_BUDGET_SECONDS, MAX_TOLERANCE, TIER_MAX_SAMPLES, TIERS, tier_for


@pytest.mark.parametrize(("samples", "tier"), [
    (0, "low"), (10_000, "low"), (10_001, "medium"), (100_000, "medium"), (100_001, "high"), (5_000_000, "high"),
])
def test_a_dataset_gets_the_tier_its_size_calls_for(samples: int, tier: str) -> None:
    assert tier_for(samples) == tier


def test_the_size_limits_rise_with_the_tiers_and_name_tiers() -> None:
    limits = [most for most, _ in TIER_MAX_SAMPLES]
    assert limits == sorted(limits)
    assert [tier for _, tier in TIER_MAX_SAMPLES] + ["high"] == list(TIERS)


def test_the_api_and_the_cli_refuse_the_same_largest_budget_and_tolerance() -> None:
    """Both read the rule (the CLI's messages name it): one past it is refused by each."""
    from pydantic import TypeAdapter, ValidationError

    from api.schemas.jobs import BudgetSeconds, JobCreate
    from workers.synthesize_cli import CliError, _budget_seconds

    assert _budget_seconds(str(MAX_BUDGET_SECONDS), 0) == MAX_BUDGET_SECONDS
    with pytest.raises(CliError, match=str(MAX_BUDGET_SECONDS)):
        _budget_seconds(str(MAX_BUDGET_SECONDS + 1), 0)
    assert TypeAdapter(BudgetSeconds).validate_python(MAX_BUDGET_SECONDS) == MAX_BUDGET_SECONDS
    with pytest.raises(ValidationError):
        TypeAdapter(BudgetSeconds).validate_python(MAX_BUDGET_SECONDS + 1)
    dataset = str(uuid.uuid4())
    assert JobCreate.model_validate({"dataset_id": dataset, "tolerance": MAX_TOLERANCE}).tolerance == MAX_TOLERANCE
    with pytest.raises(ValidationError):
        JobCreate.model_validate({"dataset_id": dataset, "tolerance": MAX_TOLERANCE + 0.001})
