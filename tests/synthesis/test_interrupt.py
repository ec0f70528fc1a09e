"""Interrupting a synthesis: a cancellation or its caller's time limit, wherever it lands, stops within a training
step and delivers the best model trained before it; with nothing trained, the interruption says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from synthesis.budget import Budget
from synthesis.engine import synthesize
from synthesis.interface import Options, Task
from synthesis.progress import Cancelled, OutOfTime, Stopped
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events


class Interrupting(Events):
    """Records events; raises `stop` at the first report `when` accepts — a report is ``"stage:NAME"``,
    ``"event:KIND"`` or ``"progress"`` — and at every report after it, as a cancelled job's monitor does."""

    def __init__(self, when: Callable[[str], bool], stop: type[Stopped] = Cancelled) -> None:
        super().__init__()
        self.when, self.stop = when, stop
        self.fired = False
        self.progress_calls = 0

    def _report(self, what: str) -> None:
        if self.fired or self.when(what):
            self.fired = True
            raise self.stop(f"interrupted at {what}")

    def stage(self, name: str) -> None:
        self._report(f"stage:{name}")

    def progress(self, fraction: float, metrics: Any) -> None:
        self.progress_calls += 1
        self._report("progress")

    def event(self, kind: str, payload: Any) -> None:
        super().event(kind, payload)
        self._report(f"event:{kind}")


def nth(what: str, n: int) -> Callable[[str], bool]:
    """A `when` that accepts the `n`-th report of `what`."""
    seen = [0]

    def when(report: str) -> bool:
        seen[0] += report == what
        return seen[0] == n

    return when


def _run(task: Task, monitor: Events, compress: bool = False) -> Any:
    return synthesize(task, Budget(epochs=10), Options(latency=LATENCY, compress=compress), monitor)


def test_the_search_reports_between_steps_not_only_at_epoch_ends(digits_task: Task) -> None:
    monitor = Interrupting(lambda _what: False)
    result = _run(digits_task, monitor)
    epochs = sum(len(entry["curve"]) for entry in result.log)
    assert monitor.progress_calls > 3 * epochs  # an epoch of 338 rows is 6 steps at batch 64


def test_a_cancel_before_any_candidate_trained_says_so(digits_task: Task) -> None:
    monitor = Interrupting(nth("progress", 3))  # within the first trial's first epoch
    with pytest.raises(Cancelled, match="before any candidate finished training"):
        _run(digits_task, monitor)
    assert all(not e["curve"] for e in monitor.of("candidate"))  # no epoch of any candidate ended


def test_a_time_limit_before_any_candidate_trained_is_not_a_cancellation(digits_task: Task) -> None:
    with pytest.raises(OutOfTime, match="time_limit before any candidate finished training"):
        _run(digits_task, Interrupting(nth("progress", 3), OutOfTime))


@pytest.mark.parametrize(("when", "stop", "reason"), [
    ("event:search_done", Cancelled, "cancelled"),  # between the search and the final training
    ("stage:final_training", OutOfTime, "time_limit"),
])
def test_an_interruption_after_the_search_delivers_its_best_network(digits_task: Task, when: str,
                                                                     stop: type[Stopped], reason: str) -> None:
    monitor = Interrupting(nth(when, 1), stop)
    result = _run(digits_task, monitor)
    assert result.stop_reason == reason and result.model.metrics["search_stop"] == reason
    trained = {e["id"]: max(e["curve"]) for e in result.log if e["curve"]}
    assert result.model.metrics["candidate"] in trained  # its validation accuracy as measured, not extrapolated
    assert result.model.metrics["val_accuracy"] == pytest.approx(trained[result.model.metrics["candidate"]], abs=1e-6)
    assert not monitor.of("final")  # no final training ran


def test_a_cancel_while_delivering_still_delivers_both_variants(digits_task: Task) -> None:
    result = _run(digits_task, Interrupting(nth("stage:delivering", 1)), compress=True)
    assert result.stop_reason == "cancelled" and result.model.metrics["search_stop"] == "cancelled"
    assert result.model.metrics["test_accuracy"] is not None and result.compressed is not None


def test_a_monitor_can_stop_the_search(digits_task: Task) -> None:
    with pytest.raises(Stopped):
        _run(digits_task, Interrupting(nth("progress", 3), Stopped))


def test_cancelling_still_delivers_the_best_model_so_far(digits_task: Task) -> None:
    monitor = Interrupting(nth("event:candidate", 2))  # the first trial proposed, then trained
    result = synthesize(digits_task, Budget(epochs=40), Options(latency=LATENCY), monitor)
    assert result.stop_reason == "cancelled"
    assert len(result.log) == 2  # no trial started after the cancellation
    assert result.model.metrics["test_accuracy"] is not None
    assert result.model.metrics["candidate"] in {e["id"] for e in result.log}
