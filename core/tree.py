"""Flat views of nested parameter dictionaries: ``{"conv1": {"kernel": a}}`` <-> ``{"conv1/kernel": a}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")
SEP = "/"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Return a nested mapping as ``{"a/b/c": leaf}``, keys sorted for stable order."""
    out: dict[str, Any] = {}
    for key in sorted(tree):
        value = tree[key]
        path = f"{prefix}{SEP}{key}" if prefix else key
        if isinstance(value, Mapping):
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def unflatten(flat: Mapping[str, T]) -> dict[str, Any]:
    """Return ``{"a/b": leaf}`` as nested dictionaries ``{"a": {"b": leaf}}``."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(SEP)
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out
