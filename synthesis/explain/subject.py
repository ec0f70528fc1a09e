"""What an explainer works on: a trained network, its inputs as the network takes them, and the words of texts.

A text model reads int32 ids made by an encoder that lives outside the engine (`domain.ingest.text`); explainers
reach it through :class:`TextCodec`, so that attributions come back per whitespace-separated word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jax.numpy as jnp
import numpy as np

from core.evaluation import predict_proba
from core.graph import Graph
from core.model import Model, build
from core.spec import INPUT, Spec

POOLING_OPS = frozenset({"global_avg_pool", "global_max_pool", "flatten"})
"""The ops that turn a spatial feature map into a vector: Grad-CAM's layer is what one of them reads."""
PASS_THROUGH_OPS = frozenset({"add", "activation", "dropout"})
"""Ops between a network's output layers and its output (an ensemble sums its members' logits)."""


class TextCodec(Protocol):
    """How texts become a text model's input rows, and which words produced each position of a row."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """int32 ``[N, L]`` rows of the texts."""
        ...

    def word_positions(self, text: str) -> list[list[int]]:
        """For each of the ``L`` positions of the text's row, the indices of the words (``text.split()``) that
        produced its id; empty for padding."""
        ...


@dataclass(frozen=True)
class Subject:
    """A trained network to explain and, for a text model, its codec."""

    model: Model
    variables: dict[str, Any]
    codec: TextCodec | None = None

    @classmethod
    def of(cls, spec: Spec | Graph, variables: dict[str, Any], codec: TextCodec | None = None) -> Subject:
        """The subject of `spec` with `variables` (float32 compute, so gradients are exact)."""
        return cls(build(spec, compute_dtype=jnp.float32), variables, codec)

    @property
    def graph(self) -> Graph:
        """The validated graph of the network."""
        return self.model.graph

    @property
    def modality(self) -> str:
        """'text' for int32 inputs, else 'image'."""
        return "text" if self.graph.spec.input.dtype == "int32" else "image"

    def with_variables(self, variables: dict[str, Any]) -> Subject:
        """The same network with other weights (the sanity check's randomised ones)."""
        return Subject(self.model, variables, self.codec)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities ``[N, classes]`` of network inputs."""
        return predict_proba(self.model, self.variables, x)

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """The network inputs of texts; ValueError for an image model."""
        if self.codec is None:
            raise ValueError("this model takes images, not texts")
        return self.codec.encode(texts)


MIN_CELLS = 16
"""Grad-CAM's map must have at least this many cells (4x4): upsampled from 2x2, a map covers the background around
a small object as much as the object, and removing those pixels first is no better than random (digits)."""


def spatial_layers(graph: Graph) -> list[str]:
    """Grad-CAM's layers: for each spatial feature map (``[H, W, C]``, H·W > 1) that a pooling or flattening node
    reads (the last one of each branch of a convolutional network), that map, or when it has fewer than `MIN_CELLS`
    cells the deepest map before it (along first inputs) that has as many; empty for a network without one."""
    by_id = {node.id: node for node in graph.order}
    found: list[str] = []
    for node in graph.order:
        if node.op not in POOLING_OPS:
            continue
        source = node.inputs[0]
        shape = graph.types[source].shape
        if source == INPUT or len(shape) != 3 or shape[0] * shape[1] <= 1:
            continue
        layer = source
        while shape[0] * shape[1] < MIN_CELLS and layer in by_id and by_id[layer].inputs[0] != INPUT:
            earlier = by_id[layer].inputs[0]
            if len(graph.types[earlier].shape) != 3:
                break
            layer, shape = earlier, graph.types[earlier].shape
        if shape[0] * shape[1] < MIN_CELLS:
            layer = source
        if layer not in found:
            found.append(layer)
    return found


def output_layers(graph: Graph) -> list[str]:
    """The layers with parameters nearest the output: the output node, or through sums and activations the
    nodes whose outputs make it (each member's logits layer of an ensemble). TracIn's gradients are theirs."""
    by_id = {node.id: node for node in graph.order}
    found: list[str] = []
    stack = [graph.spec.output]
    while stack:
        node = by_id.get(stack.pop())
        if node is None:
            continue
        if node.op in PASS_THROUGH_OPS:
            stack.extend(reversed(node.inputs))
        elif node.id not in found:
            found.append(node.id)
    return found


def word_scores(positions: list[list[int]], scores: np.ndarray, words: int) -> np.ndarray:
    """Per-word scores from per-position ones: a position's score is shared equally by the words that produced
    its id (a word bigram's by both; a position of padding by none)."""
    out = np.zeros(words, np.float64)
    for score, owners in zip(scores.tolist(), positions, strict=False):
        for w in owners:
            out[w] += score / len(owners)
    return out.astype(np.float32)
