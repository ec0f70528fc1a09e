"""A small trained network on scikit-learn's digits for the compression tests, and a monitor that records."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.datasets import load_digits

from core.data import Dataset
from core.model import build
from core.reparam import Reparam
from core.spec import Spec
from core.train_config import TrainConfig
from core.training import train
from synthesis.budget import Budget
from synthesis.compress.context import Context, Options, State


def mlp(hidden: int = 32, batch_norm: bool = False) -> Spec:
    """One hidden layer of ``hidden`` units on the 8x8 digits (a batch norm after it when ``batch_norm``)."""
    norm = [{"id": "bn", "op": "batch_norm", "inputs": ["h"]}] if batch_norm else []
    return Spec.from_dict({"name": "mlp", "input": {"shape": [8, 8, 1], "scale": 1 / 16},
                           "output": {"node": "logits", "num_classes": 10}, "nodes": [
        {"id": "flat", "op": "flatten", "inputs": ["input"]},
        {"id": "h", "op": "dense", "inputs": ["flat"], "params": {"units": hidden}}, *norm,
        {"id": "relu", "op": "activation", "inputs": ["bn" if batch_norm else "h"], "params": {"fn": "relu"}},
        {"id": "logits", "op": "dense", "inputs": ["relu"], "params": {"units": 10}}]})


CONFIG = TrainConfig(epochs=30, learning_rate=1e-2, patience=None, batch_size=64, max_shift=0)
"""An MLP is not translation invariant: no shifted copies of the 8x8 digits."""


@functools.cache
def digits() -> Dataset:
    d = load_digits()
    x, y = d.images.astype(np.float32)[..., None], d.target.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(x))
    return Dataset(x[perm[:1400]], y[perm[:1400]], x[perm[1400:]], y[perm[1400:]])


@functools.cache
def trained() -> tuple[Spec, dict[str, Any]]:
    spec = mlp()
    result = train(build(spec), digits(), CONFIG)
    return spec, result.variables


class Recorder:
    """Keeps every event; raises ``error`` at the ``fail_at``-th progress call."""

    def __init__(self, fail_at: int = 0, error: Exception | None = None) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.calls, self.fail_at, self.error = 0, fail_at, error

    def stage(self, name: str) -> None:
        self.events.append(("stage", {"name": name}))

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        self.calls += 1
        if self.error is not None and self.calls == self.fail_at:
            raise self.error

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        self.events.append((kind, dict(payload)))


def context(epochs: int = 6, monitor: Recorder | None = None, **options: Any) -> Context:
    return Context(digits(), Budget(epochs=epochs), Options(**options), CONFIG,
                   monitor or Recorder())


def start(ctx: Context, spec: Spec | None = None, variables: dict[str, Any] | None = None) -> State:
    if spec is None or variables is None:
        spec, variables = trained()
    state = ctx.state(spec, variables, Reparam())
    ctx.floor = state.accuracy - 0.005
    return state
