"""The native download of a trained model: its package (domain.package) as one zip."""

from __future__ import annotations

from collections.abc import Mapping

from domain.package import package_files, package_zip
from store.models import TrainedModel


def native_package(model: TrainedModel, report: Mapping[str, bytes] | None = None) -> bytes:
    """The zip of `model`: spec.json, its weights (weights.safetensors, or model.nsz for the compressed variant),
    model.onnx, preprocessing.json, labels.json, metrics.json, README.md and its explainability report's files
    (`report`, by name) under report/."""
    return package_zip(package_files(model.spec, bytes(model.weights), bytes(model.onnx), model.preprocessing,
                                     list(model.classes), model.metrics, model.variant or "dense", report))
