"""Gradients of a target class's logit with respect to a network's input, its embeddings' scale, or its inside,
as small jitted pure functions shared by the gradient methods."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.model import Model
from synthesis.explain.subject import Subject, word_scores


def _picked(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0]


@functools.partial(jax.jit, static_argnums=0)
def input_gradients(model: Model, variables: dict[str, Any], x: jax.Array, targets: jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
    """The gradient of each input's target logit with respect to that input, and the logits picked."""
    def total(inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        picked = _picked(model.apply(variables, inputs)[0], targets)
        return jnp.sum(picked), picked

    (_, picked), grads = jax.value_and_grad(total, has_aux=True)(x)
    return grads, picked


@functools.partial(jax.jit, static_argnums=0)
def scale_gradients(model: Model, variables: dict[str, Any], ids: jax.Array, scale: jax.Array, targets: jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
    """For int32 rows: the gradient of each row's target logit with respect to the scale ``[N, L]`` of each
    position's embedding vectors (at `scale`), and the logits picked."""
    def total(s: jax.Array) -> tuple[jax.Array, jax.Array]:
        picked = _picked(model.probe(variables, ids, token_scale=s)[0], targets)
        return jnp.sum(picked), picked

    (_, picked), grads = jax.value_and_grad(total, has_aux=True)(scale)
    return grads, picked


def layer_gradients(model: Model, variables: dict[str, Any], x: jax.Array, targets: jax.Array,
                    layers: tuple[str, ...]) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """The outputs of `layers` and the gradients of the target logits with respect to them."""
    acts, grads = _layer_gradients(model, layers, variables, x, targets)
    return acts, grads


@functools.partial(jax.jit, static_argnums=(0, 1))
def _layer_gradients(model: Model, layers: tuple[str, ...], variables: dict[str, Any], x: jax.Array,
                     targets: jax.Array) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    _, acts = model.probe(variables, x, capture=layers)

    def total(taps: dict[str, jax.Array]) -> jax.Array:
        return jnp.sum(_picked(model.probe(variables, x, taps=taps)[0], targets))

    return acts, jax.grad(total)({k: jnp.zeros_like(v) for k, v in acts.items()})


def text_position_scores(subject: Subject, texts: Sequence[str], targets: np.ndarray,
                         position_scores: Any) -> list[np.ndarray]:
    """Per-word scores of texts from a function of (rows, targets) giving per-position scores ``[N, L]``."""
    rows = subject.rows(texts)
    scores = np.asarray(position_scores(rows, targets))
    assert subject.codec is not None
    return [word_scores(subject.codec.word_positions(text), scores[i], len(text.split()))
            for i, text in enumerate(texts)]
