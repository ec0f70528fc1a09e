"""The persistent compilation cache at a worker's and `netsynth synthesize`'s start: NETSYNTH_COMPILE_CACHE."""

from __future__ import annotations

from pathlib import Path

import pytest

import core.compilation
from infra.settings import Settings
from workers.app import use_compile_cache


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[Path | None]:
    """The folders `core.compilation.use_cache` was given (the process's own cache is left as it is)."""
    calls: list[Path | None] = []
    monkeypatch.setattr(core.compilation, "use_cache", calls.append)
    return calls


def test_the_default_applies_unless_jax_has_a_folder_of_its_own(monkeypatch: pytest.MonkeyPatch,
                                                                  applied: list[Path | None]) -> None:
    monkeypatch.delenv("NETSYNTH_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    assert use_compile_cache(Settings()) == Path("var/jax-cache") and applied == [Path("var/jax-cache")]
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/elsewhere")
    assert use_compile_cache(Settings()) is None and len(applied) == 1


def test_a_setting_given_wins_and_off_turns_the_cache_off(monkeypatch: pytest.MonkeyPatch,
                                                         applied: list[Path | None]) -> None:
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/elsewhere")
    monkeypatch.setenv("NETSYNTH_COMPILE_CACHE", "/srv/jax")
    assert use_compile_cache() == Path("/srv/jax")
    monkeypatch.setenv("NETSYNTH_COMPILE_CACHE", "off")
    assert use_compile_cache() is None
    assert applied == [Path("/srv/jax"), None]
