"""The broker's configuration: Redis never redelivers a running job's task while its worker lives."""

from __future__ import annotations

from domain.rules import MAX_BUDGET_SECONDS
from infra.broker import celery_config, time_limits
from infra.settings import Settings

REDIS = "redis://127.0.0.1:6379/0"


def test_the_visibility_timeout_outlasts_the_hard_time_limit_of_the_largest_budget() -> None:
    settings = Settings(broker_url=REDIS)
    timeout = celery_config(settings)["broker_transport_options"]["visibility_timeout"]
    for budget in (settings.tier_high_seconds, MAX_BUDGET_SECONDS):  # 16 h, and the largest bare budget
        assert timeout > time_limits(budget)[1]


def test_a_larger_tier_raises_the_visibility_timeout_with_it() -> None:
    settings = Settings(broker_url=REDIS, tier_high_seconds=2 * MAX_BUDGET_SECONDS)
    timeout = celery_config(settings)["broker_transport_options"]["visibility_timeout"]
    assert timeout > time_limits(2 * MAX_BUDGET_SECONDS)[1]
