"""Spec-building helpers shared by the spaces: a node list that grows block by block, and the head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.spec import Spec

POOL_IDS = {"max": ("gmp", "global_max_pool"), "avg": ("gap", "global_avg_pool")}
POOLINGS = ("max", "avg", "both")
"""Global pooling genes: max, average, or both concatenated."""
HIDDEN = (0, 64, 128, 256)
"""Head genes: units of the optional hidden dense layer (0 = none)."""
DROPOUTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
"""Head genes: dropout rate before the classifier."""


class Net:
    """A network under construction: spec nodes (as JSON dicts) appended in order, each named by its id."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []

    def add(self, node_id: str, op: str, inputs: str | Sequence[str], **params: Any) -> str:
        """Append a node reading ``inputs`` and return its id."""
        sources = [inputs] if isinstance(inputs, str) else list(inputs)
        node: dict[str, Any] = {"id": node_id, "op": op, "inputs": sources}
        if params:
            node["params"] = params
        self.nodes.append(node)
        return node_id

    def conv(self, x: str, name: str, filters: int, kernel: int, *, norm: bool, act: str | None = "relu",
             strides: int = 1, op: str = "conv2d") -> str:
        """Append a convolution (``conv2d`` or ``depthwise_conv2d``), then batch_norm when ``norm``, then
        the activation ``act`` (none when ``None``); return the last id."""
        params: dict[str, Any] = {"kernel_size": [kernel, kernel], "use_bias": not norm}
        if op == "conv2d":
            params["filters"] = filters
        if strides != 1:
            params["strides"] = [strides, strides]
        x = self.add(name, op, x, **params)
        if norm:
            x = self.add(f"{name}_bn", "batch_norm", x)
        if act is not None:
            x = self.add(f"{name}_{act}", "activation", x, fn=act)
        return x

    def join(self, node_id: str, op: str, inputs: Sequence[str]) -> str:
        """Return the single input itself, or a new ``add``/``concat`` node over several."""
        return inputs[0] if len(inputs) == 1 else self.add(node_id, op, inputs)

    def global_pools(self, x: str, pooling: str, suffix: str = "") -> list[str]:
        """Append the global pooling(s) of ``pooling`` (max, avg or both) over ``x``; return their ids."""
        kinds = ("max", "avg") if pooling == "both" else (pooling,)
        return [self.add(POOL_IDS[k][0] + suffix, POOL_IDS[k][1], x) for k in kinds]

    def head(self, x: str, hidden: int, dropout: float, num_classes: int) -> str:
        """Append the classifier: [dense(hidden) -> relu] -> [dropout] -> dense(num_classes) named ``logits``."""
        if hidden:
            x = self.add("hidden_relu", "activation", self.add("hidden", "dense", x, units=hidden), fn="relu")
        if dropout > 0:
            x = self.add("drop", "dropout", x, rate=dropout)
        return self.add("logits", "dense", x, units=num_classes)

    def spec(self, name: str, inputs: dict[str, Any], num_classes: int) -> Spec:
        """Return the finished spec whose output is the ``logits`` node."""
        return Spec.from_dict({"format": "netsynth.spec", "version": 1, "name": name, "input": inputs,
                               "nodes": self.nodes, "output": {"node": "logits", "num_classes": num_classes}})
