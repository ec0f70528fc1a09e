"""netsynth's JAX core: network spec, layers, training, compression primitives and export.

The public API is flat, as in optax: ``core.build``, ``core.train``, ``core.export_onnx`` ...
Names load on first use, so that importing one module does not import them all. (The exports run with
``domain.onnx_run``, which needs no JAX.)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "analysis": ["Analysis", "NodeCost", "analyse", "architecture"],
    "checkpoint": ["Checkpoint", "from_bytes", "load", "save", "to_bytes"],
    "data": ["Dataset"],
    "errors": ["CheckpointError", "CoreError", "CycleError", "DanglingInputError",
               "HyperParameterError", "SchemaError", "ShapeError", "SpecError", "UnknownOpError"],
    "evaluation": ["evaluate", "predict_proba", "recalibrate"],
    "graph": ["Graph", "validate"],
    "model": ["Model", "build"],
    "onnx_export": ["export_onnx", "to_onnx_bytes"],
    "reparam": ["Reparam", "codebook_of", "constrain", "mask_top_n_incoming", "materialise",
                "quantise", "share", "trainable", "with_masks"],
    "schema": ["json_schema"],
    "spec": ["InputSpec", "Node", "Spec"],
    "surgery": ["filter_norms", "remove_units", "remove_units_many", "zero_units"],
    "temperature": ["logit_layers", "scale_logits"],
    "training": ["train"],
    "train_config": ["Progress", "TrainConfig", "TrainResult"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)

def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
