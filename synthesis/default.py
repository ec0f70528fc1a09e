"""One sensible network per modality, trained on the uploaded data: the service's model until search lands.

Images: the hand-designed CNN a good engineer writes first (conv-BN-ReLU blocks 32-32 / pool / 64-64 / pool /
128, global average pooling, dropout). Text: token embeddings, a 1-D convolution over word trigrams and global
max pooling (Kim, "Convolutional Neural Networks for Sentence Classification", 2014).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core import checkpoint, onnx_export
from core.analysis import analyse
from core.data import Dataset
from core.evaluation import evaluate, predict_proba
from core.model import build
from core.onnx_run import OnnxClassifier
from core.spec import Spec
from core.train_config import Progress, TrainConfig
from core.training import train
from synthesis.progress import NullReporter, Reporter
from synthesis.split import stratified_split

TRAIN_SHARE = 0.8
"""Share of the budget that training may use; the rest covers evaluation, export and verification."""


@dataclass(frozen=True)
class Task:
    """What to learn: images (raw values [N, H, W, C]) or token ids ([N, L] int32) with class ids."""

    modality: str
    x: np.ndarray
    y: np.ndarray
    num_classes: int
    vocab_size: int = 0
    seed: int = 0


@dataclass(frozen=True)
class Result:
    """A trained network: its spec document, safetensors weights, verified ONNX export and metrics."""

    spec: dict[str, Any]
    weights: bytes
    onnx: bytes
    param_count: int
    metrics: dict[str, Any] = field(default_factory=dict)


def _node(node_id: str, op: str, source: str, **params: Any) -> dict[str, Any]:
    return {"id": node_id, "op": op, "inputs": [source], "params": params}


def _conv_block(nodes: list[dict[str, Any]], source: str, name: str, filters: int) -> str:
    nodes += [_node(f"{name}", "conv2d", source, filters=filters, use_bias=False),
              _node(f"{name}_bn", "batch_norm", name),
              _node(f"{name}_relu", "activation", f"{name}_bn", fn="relu")]
    return f"{name}_relu"


def image_spec(shape: tuple[int, int, int], num_classes: int, scale: float, offset: float) -> Spec:
    """The default CNN for images of `shape` (H, W, C); inputs are mapped to `x * scale + offset` in the graph."""
    nodes: list[dict[str, Any]] = []
    last, side = "input", min(shape[0], shape[1])
    while side > 64:  # large images: a strided stem brings them down to a size the blocks handle
        nodes.append(_node(f"stem{len(nodes)}", "conv2d", last, filters=32, kernel_size=[3, 3], strides=[2, 2]))
        last, side = f"stem{len(nodes) - 1}", (side + 1) // 2
    for stage, filters in enumerate((32, 64)):
        last = _conv_block(nodes, last, f"s{stage}a", filters)
        last = _conv_block(nodes, last, f"s{stage}b", filters)
        if side >= 4:
            nodes.append(_node(f"pool{stage}", "max_pool2d", last))
            last, side = f"pool{stage}", side // 2
    last = _conv_block(nodes, last, "s2a", 128)
    nodes += [_node("gap", "global_avg_pool", last), _node("drop", "dropout", "gap", rate=0.2),
              _node("logits", "dense", "drop", units=num_classes)]
    return Spec.from_dict({"format": "netsynth.spec", "version": 1, "name": "default-cnn",
                           "input": {"shape": list(shape), "dtype": "float32", "modality": "image",
                                     "scale": scale, "offset": offset},
                           "nodes": nodes, "output": {"node": "logits", "num_classes": num_classes}})


def text_spec(length: int, vocab_size: int, num_classes: int) -> Spec:
    """The default text CNN over `length` token ids from a vocabulary of `vocab_size`."""
    nodes = [_node("embed", "embedding", "input", vocab_size=vocab_size, dim=64),
             _node("conv", "conv1d", "embed", filters=128, kernel_size=3),
             _node("relu", "activation", "conv", fn="relu"),
             _node("gmp", "global_max_pool", "relu"),
             _node("drop", "dropout", "gmp", rate=0.3),
             _node("logits", "dense", "drop", units=num_classes)]
    return Spec.from_dict({"format": "netsynth.spec", "version": 1, "name": "default-text-cnn",
                           "input": {"shape": [length], "dtype": "int32", "modality": "text"},
                           "nodes": nodes, "output": {"node": "logits", "num_classes": num_classes}})


def spec_for(task: Task) -> Spec:
    """The default network for `task`'s modality and shapes; raw pixel ranges set the input scaling."""
    if task.modality == "text":
        return text_spec(int(task.x.shape[1]), task.vocab_size, task.num_classes)
    low, high = float(np.min(task.x)), float(np.max(task.x))
    if task.x.dtype == np.uint8 or (low >= 0 and high > 1):
        scale, offset = 1 / 255, 0.0
    else:
        scale, offset = 1 / max(high - low, 1e-6), -low / max(high - low, 1e-6)
    h, w, c = (int(d) for d in task.x.shape[1:])
    return image_spec((h, w, c), task.num_classes, scale, offset)


def train_default(task: Task, budget_s: float, reporter: Reporter | None = None) -> Result:
    """Split `task`'s data, train its default network within `budget_s` seconds, evaluate, export and verify."""
    reporter = reporter or NullReporter()
    start = time.perf_counter()
    split = stratified_split(task.y, task.seed)
    x = task.x if task.modality == "text" else task.x.astype(np.float32)
    data = Dataset(x[split.train], task.y[split.train], x[split.val], task.y[split.val])
    spec = spec_for(task)
    model = build(spec)
    train_s = max(budget_s * TRAIN_SHARE, 1.0)
    config = TrainConfig(epochs=40, batch_size=64 if len(split.train) < 5000 else 128, patience=8,
                         seed=task.seed, time_limit_s=train_s, progress_every=10)
    reporter.event("split", {"train": len(split.train), "val": len(split.val), "test": len(split.test),
                             "seed": split.seed})
    reporter.stage("training")

    def on_progress(p: Progress) -> None:
        fraction = min(max(p.epoch / config.epochs, p.elapsed_s / train_s), 1.0)
        reporter.progress(0.05 + 0.85 * fraction, p.metrics)
        if "val_accuracy" in p.metrics:
            reporter.event("epoch", {k: round(v, 6) for k, v in p.metrics.items()})

    result = train(model, data, config, on_progress=on_progress)
    reporter.stage("evaluating")
    test = evaluate(model, result.variables, x[split.test], task.y[split.test]) if len(split.test) else {}
    reporter.stage("exporting")
    onnx = onnx_export.to_onnx_bytes(spec, result.variables)
    probe = x[split.test[:64]] if len(split.test) else x[:64]
    gap = float(np.max(np.abs(OnnxClassifier(onnx).predict_proba(probe) - predict_proba(model, result.variables,
                                                                                        probe))))
    if gap > 1e-3:
        raise RuntimeError(f"the ONNX export disagrees with the trained network (max |dp| = {gap:.2e})")
    metrics = {"val_accuracy": result.best_metric, "test_accuracy": test.get("accuracy"),
               "test_loss": test.get("loss"), "best_epoch": result.best_epoch, "epochs": len(result.history),
               "stop_reason": result.stop_reason, "train_seconds": round(result.elapsed_s, 3),
               "seconds": round(time.perf_counter() - start, 3), "onnx_max_abs_diff": gap,
               "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test),
                         "seed": split.seed}}
    reporter.progress(1.0, {"val_accuracy": result.best_metric})
    return Result(spec=spec.to_dict(), weights=checkpoint.to_bytes(spec, result.variables),
                  onnx=onnx, param_count=analyse(spec).params, metrics=metrics)
