"""Request and response bodies of `/models`: a trained model's description, its downloads and its predictions."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ExportFormat(enum.StrEnum):
    """How a model is downloaded: the ONNX graph alone, or a zip with weights, spec and everything else."""

    ONNX = "onnx"
    NATIVE = "native"


class LayerOut(BaseModel):
    """One layer of a network."""

    name: str = Field(description="The layer's id in the network's spec.")
    op: str = Field(description="What it computes: conv2d, dense, batch_norm, activation, global_avg_pool, ...")
    output_shape: list[int] = Field(description="The shape of its output, without the batch axis.")
    params: int = Field(description="Its trainable parameters (a compressed model's pruned ones included).")
    inputs: list[str] = Field(description='The layers it reads; "input" is the network\'s input.')


class ArchitectureOut(BaseModel):
    """A network's layers in the order they compute, after its input."""

    input_shape: list[int] = Field(description="The shape of the network's input, without the batch axis.")
    layers: list[LayerOut]


class ModelOut(BaseModel):
    """A trained model: what it predicts, how well, how big, and what input it takes."""

    id: uuid.UUID
    job_id: uuid.UUID
    dataset_id: uuid.UUID | None = Field(description="The dataset the job trained on; null once it is deleted.")
    variant: str = Field(description='Which model of the job this is: "dense", or "compressed" (its weights are '
                                     'the compressed artifact, `model.nsz` in the native download).')
    created_at: datetime
    classes: list[str] = Field(description="Class names in the order of the model's outputs.")
    metrics: dict[str, Any]
    param_count: int
    weights_bytes: int = Field(description="Size of the weights as shipped: safetensors, or the compressed "
                                           "artifact (the compressed model's bytes).")
    onnx_bytes: int = Field(description="Size of the ONNX download.")
    input: dict[str, Any] = Field(description="The spec's input: shape (no batch axis), dtype, modality, scale.")
    preprocessing: Literal["image", "text"] = Field(
        description="What `/predict` takes: image files (multipart) or texts (JSON).")
    architecture: ArchitectureOut | None = Field(
        default=None, description="The network's layers with their output shapes, as the engine computed them when "
        "it trained the model; null for a model saved before netsynth recorded them.")
    compression: dict[str, Any] | None = Field(
        default=None, description="A compressed model's before / after figures: tolerance, validation accuracy "
        "before and after, ratio, and for both the dense and the compressed network parameters, non-zeros, bytes "
        "(dense float32, compressed, ONNX and its gzip), multiply-adds, measured latency and accuracy; null for a "
        "dense model.")


class TextsIn(BaseModel):
    """The texts a text model classifies."""

    model_config = ConfigDict(extra="forbid")

    texts: list[str] = Field(description="One text per prediction, at most 256.")


class Prediction(BaseModel):
    """One input's most probable class and every class's probability."""

    label: str
    probabilities: list[float] = Field(description="One per class, in the order of `classes`.")


class PredictOut(BaseModel):
    """The predictions for a request's inputs, in the order they were sent."""

    classes: list[str]
    predictions: list[Prediction]
