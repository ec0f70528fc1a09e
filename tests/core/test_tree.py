"""Flat parameter paths keep the order the artifact and checkpoint formats were written in."""

from __future__ import annotations

from flax.core import FrozenDict

from core import tree


def test_paths_are_ordered_level_by_level_and_round_trip() -> None:
    nested = {"a-b": {"y": 1}, "a": {"x": 2, "w": {"z": 3}}, "b": 4, "empty": {}}
    flat = tree.flatten(nested)
    assert list(flat) == ["a/w/z", "a/x", "a-b/y", "b"]  # not sorted as strings: "a-b/y" < "a/w/z" there
    assert tree.unflatten(flat) == {k: v for k, v in nested.items() if k != "empty"}


def test_a_frozen_dict_flattens_as_a_dict() -> None:
    assert tree.flatten(FrozenDict({"n": {"kernel": 1, "bias": 2}})) == {"n/bias": 2, "n/kernel": 1}
