"""Before / after figures of a compression: size in every form, compute, measured latency, accuracy."""

from __future__ import annotations

import gzip
from typing import Any

import numpy as np

from core import artifact, tree
from core.analysis import analyse
from core.reparam import Reparam
from core.spec import Spec
from synthesis.deliver import Delivered, deliver

GZIP_LEVEL = 6
"""gzip's own default, what ``gzip model.onnx`` gives: level 9 took 12.6 s per figure on an SMS Spam network's 35 MB
export (a 120 s job's compression spent 25 s of its 13.5 s on the two figures), level 6 about a tenth of that for
5 % more bytes."""


def nonzero_macs(spec: Spec, variables: dict[str, Any]) -> int:
    """Multiply-adds with pruned weights skipped: each layer's MACs times its kernel's density."""
    params = variables["params"]
    total = 0
    for cost in analyse(spec).nodes:
        node = params.get(cost.node, {})
        leaves = [np.asarray(a) for p, a in tree.flatten(node).items() if p.endswith(("kernel", "embedding"))
                  and np.ndim(a) >= 2] if isinstance(node, dict) else []
        size = sum(a.size for a in leaves)
        density = sum(np.count_nonzero(a) for a in leaves) / size if size else 1.0
        total += round(cost.macs * density)
    return total


def dense_bytes(spec: Spec) -> int:
    """The float32 bytes of every variable of ``spec`` (parameters and batch statistics)."""
    info = analyse(spec)
    return 4 * (info.params + info.state)


def figures(spec: Spec, variables: dict[str, Any], reparam: Reparam | None, accuracy: float, probe: np.ndarray,
            packed: bytes | None = None) -> tuple[dict[str, Any], Delivered]:
    """Return a variant's figures and its delivered form (ONNX export verified against the network on ``probe``).

    ``accuracy`` is the validation accuracy the caller measured (evaluating the validation rows again took 4 s
    of a 120 s MNIST job's 12 s of compression, twice); ``dense_bytes`` the float32 size of every variable;
    ``compressed_bytes`` the :mod:`core.artifact` size (``packed``, or encoded here); ``onnx_gzip_bytes`` the ONNX
    export gzip'd at :data:`GZIP_LEVEL`.
    """
    delivered = deliver(spec, variables, probe[:0], np.zeros((0,), np.int32), probe[:64])
    info = analyse(spec)
    flat = [np.asarray(a) for kind in ("params", "batch_stats") for a in tree.flatten(variables.get(kind, {})).values()]
    packed = packed if packed is not None else artifact.encode(spec, variables, reparam)
    m = delivered.metrics
    out = {"params": info.params, "nonzeros": int(sum(np.count_nonzero(a) for a in flat)),
           "dense_bytes": dense_bytes(spec), "compressed_bytes": len(packed),
           "onnx_bytes": m["onnx_bytes"], "onnx_gzip_bytes": len(gzip.compress(delivered.onnx, GZIP_LEVEL)),
           "macs": info.macs, "macs_nonzero": nonzero_macs(spec, variables), "latency_ms": m["latency_ms"],
           "accuracy": accuracy, "onnx_max_abs_diff": m["onnx_max_abs_diff"]}
    return out, delivered
