"""The PyTorch twin of a netsynth spec: the same layers, shapes and parameter count, in PyTorch's idiom.

Images run NCHW (channels-last in memory where the caller asks), token sequences ``[N, L, C]``; a text
n-gram bag is ``nn.EmbeddingBag`` (sum, padding id 0) over the count's square root, as the ``embedding_bag``
op. Only the ops the search spaces emit are supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.graph import Graph, validate
from core.spec import INPUT, Spec

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "relu6": F.relu6, "gelu": F.gelu}


def same_params(ours: int, theirs: nn.Module) -> int:
    """The parameter count of both sides (``ours`` netsynth's); ``AssertionError`` when they differ."""
    peer = sum(p.numel() for p in theirs.parameters())
    assert ours == peer, f"netsynth has {ours:,} parameters, PyTorch {peer:,}"
    return ours


class TorchNet(nn.Module):
    """A spec's graph run node by node, with one PyTorch layer per node that has weights."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.graph: Graph = validate(spec)
        self.layers = nn.ModuleDict({n.id: layer for n in self.graph.order
                                     if (layer := _layer(n.op, n.params, self.graph.input_types(n)[0].shape))})
        self.scale = float(spec.input.scale) if not isinstance(spec.input.scale, tuple) else 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the logits of a batch (NCHW images, or int64 ids)."""
        values: dict[str, torch.Tensor] = {INPUT: x * self.scale if x.is_floating_point() else x}
        for node in self.graph.order:
            values[node.id] = self._node(node.id, node.op, node.params, [values[i] for i in node.inputs])
        out: torch.Tensor = values[self.graph.spec.output]
        return out

    def _node(self, name: str, op: str, p: dict[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0]
        if name in self.layers:
            layer: nn.Module = self.layers[name]
            if op == "embedding":
                x = x[:, :p["length"]]
            elif op == "embedding_bag":
                ids = x[:, p["start"]:]
                total: torch.Tensor = layer(ids)
                return total / (ids >= p["lowest"]).sum(1, keepdim=True).clamp(min=1).to(total.dtype).sqrt()
            elif op == "conv1d":
                seq: torch.Tensor = layer(x.transpose(1, 2))
                return seq.transpose(1, 2)
            out: torch.Tensor = layer(x)
            return out
        if op == "activation":
            return ACTIVATIONS[p["fn"]](x)
        if op in ("global_avg_pool", "global_max_pool"):
            dims = (2, 3) if x.ndim == 4 else (1,)
            return x.mean(dims) if op == "global_avg_pool" else x.amax(dims)
        if op == "add":
            return torch.stack(xs).sum(0) if len(xs) > 2 else xs[0] + xs[1]
        if op == "concat":
            return torch.cat(xs, dim=1 if x.ndim == 4 else -1)
        if op == "flatten":
            return x.flatten(1)
        raise NotImplementedError(f"no PyTorch twin for op {op!r}")


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.inner = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x, x, x, need_weights=False)[0]
        return out


class _Position(nn.Module):
    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(shape) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table


def _layer(op: str, p: dict[str, Any], shape: tuple[int, ...]) -> nn.Module | None:
    """The PyTorch layer of a node with weights or state (or dropout / pooling), None for the others."""
    cin = shape[-1]
    if op in ("conv2d", "depthwise_conv2d"):
        kernel, strides = tuple(p["kernel_size"]), tuple(p["strides"])
        pad = tuple(k // 2 for k in kernel) if p["padding"] == "same" else 0
        depthwise = op == "depthwise_conv2d"
        cout = cin * p["depth_multiplier"] if depthwise else p["filters"]
        return nn.Conv2d(cin, cout, kernel, strides, pad, groups=cin if depthwise else 1, bias=p["use_bias"])
    if op == "conv1d":
        pad = p["kernel_size"] // 2 if p["padding"] == "same" else 0
        return nn.Conv1d(cin, p["filters"], p["kernel_size"], p["strides"], pad, bias=p["use_bias"])
    if op == "dense":
        return nn.Linear(cin, p["units"], bias=p["use_bias"])
    if op == "batch_norm":
        return nn.BatchNorm2d(cin, p["epsilon"], 1 - p["momentum"])
    if op == "layer_norm":
        return nn.LayerNorm(cin, p["epsilon"])
    if op == "max_pool2d":
        return nn.MaxPool2d(tuple(p["pool_size"]), tuple(p["strides"] or p["pool_size"]))
    if op == "dropout":
        return nn.Dropout(p["rate"])
    if op == "embedding":
        return nn.Embedding(p["vocab_size"], p["dim"])
    if op == "embedding_bag":
        assert p["lowest"] == 1, "the twin's bag leaves out id 0 only"
        return nn.EmbeddingBag(p["vocab_size"], p["dim"], mode="sum", padding_idx=0)
    if op == "self_attention":
        return _Attention(cin, p["num_heads"])
    if op == "position_embedding":
        return _Position(shape)
    return None
