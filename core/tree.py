"""Flat views of nested parameter dictionaries: ``{"conv1": {"kernel": a}}`` <-> ``{"conv1/kernel": a}``, with
Flax's ``flax.traverse_util`` (https://flax.readthedocs.io/en/latest/api_reference/flax.traverse_util.html); what
this adds is the one path order every format of ours relies on (the artifact's, the checkpoint's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from flax import traverse_util

T = TypeVar("T")
SEP = "/"


def flatten(tree: Mapping[str, Any]) -> dict[str, Any]:
    """Return a nested mapping as ``{"a/b/c": leaf}``, ordered by the path's keys, level by level (so a node's
    leaves come before those of a sibling whose name extends its name: ``a/x`` before ``a-b/y``)."""
    flat = traverse_util.flatten_dict(tree)  # type: ignore[no-untyped-call]  # (Flax leaves it unannotated)
    return {SEP.join(path): flat[path] for path in sorted(flat)}


def unflatten(flat: Mapping[str, T]) -> dict[str, Any]:
    """Return ``{"a/b": leaf}`` as nested dictionaries ``{"a": {"b": leaf}}``."""
    paths = {tuple(path.split(SEP)): v for path, v in flat.items()}
    nested: dict[str, Any] = traverse_util.unflatten_dict(paths)  # type: ignore[no-untyped-call]
    return nested
