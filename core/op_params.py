"""The declarations of an op's own parameters (a convolution's kernel size, a dense layer's units): type, default and
range of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import HyperParameterError

REQUIRED: Any = object()
"""Marks a hyper-parameter that has no default."""


@dataclass(frozen=True)
class HP:
    """One hyper-parameter: its kind, default and allowed range.

    Kinds: ``int``, ``float``, ``bool``, ``choice`` (one of ``choices``), ``pair`` (an int or a list of
    two ints, normalised to a list of two), ``int_or_none`` (an int, or null for "same as another").
    """

    kind: str
    default: Any = REQUIRED
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    hi_open: bool = False
    doc: str = ""

    def check(self, node: str, name: str, value: Any) -> Any:
        """Return ``value`` normalised, or raise :class:`HyperParameterError` naming the node."""
        if self.kind == "choice":
            if value not in self.choices:
                raise HyperParameterError(f"'{name}' must be one of {list(self.choices)}, got {value!r}", node)
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise HyperParameterError(f"'{name}' must be true or false, got {value!r}", node)
            return value
        if self.kind == "int_or_none" and value is None:
            return None
        if self.kind == "pair":
            items = value if isinstance(value, list | tuple) else [value, value]
            if len(items) != 2:
                raise HyperParameterError(f"'{name}' must be an int or a list of two ints", node)
            return [self._number(node, name, v, integer=True) for v in items]
        return self._number(node, name, value, integer=self.kind != "float")

    def _number(self, node: str, name: str, value: Any, integer: bool) -> Any:
        ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok:
            want = "an int" if integer else "a number"
            raise HyperParameterError(f"'{name}' must be {want}, got {value!r}", node)
        if self.lo is not None and value < self.lo:
            raise HyperParameterError(f"'{name}' must be >= {self.lo}, got {value!r}", node)
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            bound = f"< {self.hi}" if self.hi_open else f"<= {self.hi}"
            raise HyperParameterError(f"'{name}' must be {bound}, got {value!r}", node)
        return float(value) if not integer else value

    def json_schema(self) -> dict[str, Any]:
        """Return the JSON Schema fragment that describes this hyper-parameter."""
        if self.kind == "choice":
            return {"enum": list(self.choices)}
        if self.kind == "bool":
            return {"type": "boolean"}
        num: dict[str, Any] = {"type": "number" if self.kind == "float" else "integer"}
        if self.lo is not None:
            num["minimum"] = self.lo
        if self.hi is not None:
            num["exclusiveMaximum" if self.hi_open else "maximum"] = self.hi
        if self.kind == "pair":
            return {"oneOf": [num, {"type": "array", "items": num, "minItems": 2, "maxItems": 2}]}
        if self.kind == "int_or_none":
            return {"oneOf": [num, {"type": "null"}]}
        return num


def normalise(node: str, schema: dict[str, HP], params: dict[str, Any]) -> dict[str, Any]:
    """Return ``params`` checked against ``schema`` with defaults filled in."""
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise HyperParameterError(f"unknown hyper-parameter(s) {unknown}; known: {sorted(schema)}", node)
    out: dict[str, Any] = {}
    for name, hp in schema.items():
        if name in params:
            out[name] = hp.check(node, name, params[name])
        elif hp.default is REQUIRED:
            raise HyperParameterError(f"missing required hyper-parameter '{name}'", node)
        else:
            out[name] = None if hp.default is None else hp.check(node, name, hp.default)
    return out
