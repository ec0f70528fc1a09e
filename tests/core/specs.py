"""Small specs shared by the core tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.spec import Spec


def reference_cnn_doc(num_classes: int = 10) -> dict[str, Any]:
    """The benchmark's reference CNN: conv 32 - pool - conv 64 - pool - dense 128 - dense 10."""
    return {
        "name": "reference-cnn",
        "input": {"shape": [28, 28, 1], "dtype": "float32", "modality": "image", "scale": 1 / 255},
        "nodes": [
            {"id": "conv1", "op": "conv2d", "inputs": ["input"], "params": {"filters": 32, "padding": "valid"}},
            {"id": "relu1", "op": "activation", "inputs": ["conv1"], "params": {"fn": "relu"}},
            {"id": "pool1", "op": "max_pool2d", "inputs": ["relu1"]},
            {"id": "conv2", "op": "conv2d", "inputs": ["pool1"], "params": {"filters": 64, "padding": "valid"}},
            {"id": "relu2", "op": "activation", "inputs": ["conv2"]},
            {"id": "pool2", "op": "max_pool2d", "inputs": ["relu2"]},
            {"id": "flat", "op": "flatten", "inputs": ["pool2"]},
            {"id": "fc1", "op": "dense", "inputs": ["flat"], "params": {"units": 128}},
            {"id": "relu3", "op": "activation", "inputs": ["fc1"]},
            {"id": "logits", "op": "dense", "inputs": ["relu3"], "params": {"units": num_classes}},
        ],
        "output": {"node": "logits", "num_classes": num_classes},
    }


def reference_cnn(num_classes: int = 10) -> Spec:
    """Return the reference CNN as a Spec."""
    return Spec.from_dict(reference_cnn_doc(num_classes))


def quadrant_data(n: int, seed: int, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """6x6x1 images whose class (0-3) is the bright quadrant, plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n).astype(np.int32)
    x = rng.normal(0.0, noise, (n, 6, 6, 1)).astype(np.float32)
    for cls, (r, c) in enumerate([(0, 0), (0, 3), (3, 0), (3, 3)]):
        x[y == cls, r : r + 3, c : c + 3, :] += 1.0
    return x, y


def tiny_spec(batch_norm: bool = True, dropout: bool = False) -> Spec:
    # No conv bias before batch norm: its gradient is exactly zero in theory, rounding noise in
    # practice, which Adam would scale up to full-size (and device-count dependent) updates.
    conv = {"filters": 4, "padding": "same", "use_bias": not batch_norm}
    nodes: list[dict[str, object]] = [
        {"id": "conv", "op": "conv2d", "inputs": ["input"], "params": conv},
    ]
    last = "conv"
    if batch_norm:
        nodes.append({"id": "bn", "op": "batch_norm", "inputs": [last]})
        last = "bn"
    nodes += [
        {"id": "relu", "op": "activation", "inputs": [last]},
        {"id": "flat", "op": "flatten", "inputs": ["relu"]},
    ]
    last = "flat"
    if dropout:
        nodes.append({"id": "drop", "op": "dropout", "inputs": [last], "params": {"rate": 0.3}})
        last = "drop"
    nodes.append({"id": "out", "op": "dense", "inputs": [last], "params": {"units": 4}})
    return Spec.from_dict({
        "input": {"shape": [6, 6, 1]}, "nodes": nodes, "output": {"node": "out", "num_classes": 4},
    })
