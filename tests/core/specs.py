"""Small specs shared by the core tests."""

from __future__ import annotations

from typing import Any

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
