"""Knowledge distillation: the loss, its checks, and a student that learns what its teacher answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.data import Dataset
from core.distill import Teacher, distillation_loss
from core.evaluation import predict_proba
from core.model import build
from core.training import TrainConfig, train
from tests.core.specs import quadrant_data, tiny_spec


def test_the_loss_is_zero_where_student_and_teacher_agree_and_grows_with_disagreement() -> None:
    teacher = jnp.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    np.testing.assert_allclose(distillation_loss(teacher, teacher, 4.0), [0.0, 0.0], atol=1e-6)
    near = distillation_loss(teacher + jnp.array([[0.0, 0.3, 0.0], [0.0, 0.0, 0.0]]), teacher, 4.0)
    far = distillation_loss(teacher + jnp.array([[0.0, 3.0, 0.0], [0.0, 0.0, 0.0]]), teacher, 4.0)
    assert 0 < float(near[0]) < float(far[0]) and float(near[1]) == pytest.approx(0.0, abs=1e-6)
    assert distillation_loss(teacher[:1], teacher[:1] * 2, 1.0).shape == (1,)


def test_no_gradient_flows_into_the_teacher() -> None:
    student, teacher = jnp.array([[1.0, -1.0]]), jnp.array([[-1.0, 1.0]])
    g_student, g_teacher = jax.grad(lambda s, t: distillation_loss(s, t, 2.0).sum(), argnums=(0, 1))(student, teacher)
    assert float(jnp.abs(g_student).sum()) > 0
    np.testing.assert_array_equal(g_teacher, jnp.zeros_like(teacher))


def test_a_teacher_needs_a_weight_in_0_1_and_a_positive_temperature() -> None:
    model = build(tiny_spec())
    variables = model.init(jax.random.key(0))
    for bad in ({"weight": 0.0}, {"weight": 1.5}, {"temperature": 0.0}):
        with pytest.raises(ValueError, match="weight|temperature"):
            Teacher(model, variables, **bad)  # type: ignore[arg-type]


def test_a_student_taught_by_the_teacher_alone_answers_as_the_teacher_does() -> None:
    """The teacher learned shifted labels (class c answers c + 1); a student trained on the true labels with the
    teacher's weight at 1 learns the teacher's answers, not the labels; without a teacher it learns the labels."""
    x, y = quadrant_data(240, seed=0)
    xv, yv = quadrant_data(80, seed=1)
    model = build(tiny_spec())
    config = TrainConfig(epochs=15, batch_size=32, learning_rate=0.02, patience=None, max_shift=0, seed=0)
    shifted = train(model, Dataset(x, (y + 1) % 4, xv, (yv + 1) % 4), config)
    teacher_says = predict_proba(model, shifted.variables, xv).argmax(axis=1)
    assert np.mean(teacher_says == (yv + 1) % 4) > 0.9
    data = Dataset(x, y, xv, teacher_says.astype(np.int32))  # validation picks the epoch closest to the teacher
    taught = train(model, data, config, teacher=Teacher(model, shifted.variables, weight=1.0, temperature=2.0))
    alone = train(model, Dataset(x, y, xv, yv), config)
    assert np.mean(predict_proba(model, taught.variables, xv).argmax(axis=1) == teacher_says) > 0.9
    assert np.mean(predict_proba(model, alone.variables, xv).argmax(axis=1) == yv) > 0.9
