"""Errors raised by netsynth's core.

Every problem with a network spec raises a :class:`SpecError` subclass whose message names the
node at fault, so that a user editing a spec by hand knows where to look.
"""

from __future__ import annotations


class CoreError(Exception):
    """Base class of every error the core raises on purpose."""


class SpecError(CoreError, ValueError):
    """A network spec is invalid; ``node`` names the node at fault (``None`` for the document)."""

    def __init__(self, message: str, node: str | None = None) -> None:
        self.node = node
        self.detail = message
        super().__init__(f"node '{node}': {message}" if node is not None else message)


class SchemaError(SpecError):
    """The document is not a spec at all: a missing key, a wrong type, an unknown version."""


class UnknownOpError(SpecError):
    """A node names an operation the core does not know."""


class HyperParameterError(SpecError):
    """A node's hyper-parameter is missing, unknown, of the wrong type or out of range."""


class ShapeError(SpecError):
    """A node's input shapes do not fit the operation (found by shape inference)."""


class CycleError(SpecError):
    """The node graph has a cycle."""


class DanglingInputError(SpecError):
    """A node reads from a node that does not exist, or a node's output is never used."""


class CheckpointError(CoreError, ValueError):
    """A saved model is unreadable, incomplete or does not match its spec."""
