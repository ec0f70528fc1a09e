"""Knowledge distillation: a student network trained towards a teacher network's softened outputs.

References: Hinton, Vinyals and Dean, "Distilling the Knowledge in a Neural Network", 2015
(https://arxiv.org/abs/1503.02531); used to recover pruned and quantised networks by Polino et al., "Model
compression via distillation and quantization", ICLR 2018 (https://arxiv.org/abs/1802.05668).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from core.model import Model


@dataclass(frozen=True)
class Teacher:
    """The network a student learns from: its compiled model and variables, the share ``weight`` of the training
    loss that comes from matching it (the rest is the label loss; 1 = the teacher alone) and the softmax
    ``temperature`` both outputs are softened by."""

    model: Model
    variables: dict[str, Any]
    weight: float = 0.5
    temperature: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < self.weight <= 1:
            raise ValueError(f"Teacher.weight must be in (0, 1], got {self.weight}")
        if not self.temperature > 0:
            raise ValueError(f"Teacher.temperature must be positive, got {self.temperature}")


def distillation_loss(student_logits: jax.Array, teacher_logits: jax.Array, temperature: float) -> jax.Array:
    """Per-example ``temperature**2 * KL(softmax(teacher / T) || softmax(student / T))`` (Hinton et al., 2015:
    the square keeps the gradient's scale independent of ``T``); 0 where the two outputs agree. No gradient
    flows into the teacher."""
    t = jax.lax.stop_gradient(teacher_logits) / temperature
    log_p_teacher = jax.nn.log_softmax(t, axis=-1)
    log_p_student = jax.nn.log_softmax(student_logits / temperature, axis=-1)
    kl = jnp.sum(jnp.exp(log_p_teacher) * (log_p_teacher - log_p_student), axis=-1)
    return temperature**2 * kl
