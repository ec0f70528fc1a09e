"""Grad-CAM: the last spatial feature map of each branch, weighted per channel by the target logit's mean gradient.

Selvaraju et al., "Grad-CAM: Visual Explanations from Deep Networks via Gradient-based Localization", ICCV 2017.
The layer is found from the spec (`synthesis.explain.subject.spatial_layers`), so every block family the search
can pick has one; maps of several branches are summed, each upsampled bilinearly to the input's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from synthesis.explain.base import register
from synthesis.explain.grads import layer_gradients
from synthesis.explain.subject import Subject, spatial_layers


def gradcam(subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` Grad-CAM maps (ReLU of the gradient-weighted channel sum, so never negative)."""
    layers = tuple(spatial_layers(subject.graph))
    if not layers:
        raise ValueError("Grad-CAM needs a spatial feature map, and this network has none")
    acts, grads = layer_gradients(subject.model, subject.variables, jnp.asarray(x, jnp.float32),
                                  jnp.asarray(targets, jnp.int32), layers)
    n, height, width = x.shape[:3]
    total = jnp.zeros((n, height, width), jnp.float32)
    for layer in layers:
        weights = jnp.mean(grads[layer], axis=(1, 2))
        cam = jax.nn.relu(jnp.einsum("nhwc,nc->nhw", acts[layer], weights))
        total = total + jax.image.resize(cam, (n, height, width), "bilinear")
    return np.asarray(total, np.float32)


class GradCam:
    """Grad-CAM, for image models."""

    name = "gradcam"
    modalities = frozenset({"image"})

    def images(self, subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Grad-CAM maps at the input's size."""
        return gradcam(subject, x, targets)

    def texts(self, subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
        """Not defined for text: a text network has no spatial feature map."""
        raise ValueError("Grad-CAM explains image models only")


register(GradCam())
