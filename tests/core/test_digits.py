"""End to end: a small CNN learns scikit-learn's bundled digits (8x8, 10 classes) to >= 95 %."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from core.data import Dataset
from core.model import build
from core.spec import Spec
from core.training import TrainConfig, evaluate, train


def digits_cnn() -> Spec:
    """conv 16 - conv 32 - pool - dense 64 - dense 10, on raw 0-16 pixels scaled by 1/16."""
    return Spec.from_dict({
        "name": "digits-cnn",
        "input": {"shape": [8, 8, 1], "dtype": "float32", "modality": "image", "scale": 1 / 16},
        "nodes": [
            {"id": "conv1", "op": "conv2d", "inputs": ["input"],
             "params": {"filters": 16, "padding": "same"}},
            {"id": "relu1", "op": "activation", "inputs": ["conv1"]},
            {"id": "conv2", "op": "conv2d", "inputs": ["relu1"],
             "params": {"filters": 32, "padding": "same"}},
            {"id": "relu2", "op": "activation", "inputs": ["conv2"]},
            {"id": "pool", "op": "max_pool2d", "inputs": ["relu2"]},
            {"id": "flat", "op": "flatten", "inputs": ["pool"]},
            {"id": "fc", "op": "dense", "inputs": ["flat"], "params": {"units": 64}},
            {"id": "relu3", "op": "activation", "inputs": ["fc"]},
            {"id": "logits", "op": "dense", "inputs": ["relu3"], "params": {"units": 10}},
        ],
        "output": {"node": "logits", "num_classes": 10},
    })


def test_small_cnn_learns_digits() -> None:
    digits = load_digits()
    x = digits.images[..., None].astype(np.float32)  # raw 0-16; the spec scales by 1/16
    y = digits.target.astype(np.int32)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=0.2, stratify=y,
                                                      random_state=0)
    x_train, x_val, y_train, y_val = train_test_split(x_rest, y_rest, test_size=0.2,
                                                      stratify=y_rest, random_state=0)
    model = build(digits_cnn())
    config = TrainConfig(epochs=15, batch_size=64, learning_rate=3e-3, patience=5, seed=0)
    result = train(model, Dataset(x_train, y_train, x_val, y_val), config)
    test = evaluate(model, result.variables, x_test, y_test)
    assert test["accuracy"] >= 0.95, (test, result.history[-1])
    assert result.best_metric >= 0.95
