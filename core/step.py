"""One optimisation step of a compiled network: the optimiser, the jitted step and the train state it carries.

:func:`make_train_step` builds the step that :func:`core.training.train` loops over: augmentation (images),
label-smoothed cross-entropy, AdamW or Nesterov SGD on a warm-up + cosine schedule, and the reparam's
constraint. :class:`TrainStep` keeps the schedule's lengths as an argument of the compiled program, so a run's
length can change between steps without compiling again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import parallel, programs
from core import reparam as rp
from core.data import augment
from core.model import Model
from core.schedule import schedule_steps, warmup_cosine
from core.train_config import TrainConfig, shift_for

__all__ = ["TrainState", "TrainStep", "init_state", "make_optimizer", "make_train_step"]


class TrainState(NamedTuple):
    """What a train step carries: step count, trainable params, batch stats, optimiser state."""

    step: jax.Array
    params: Any
    batch_stats: Any
    opt_state: Any


def make_optimizer(config: TrainConfig, total_steps: int, steps: jax.Array | None = None
                   ) -> optax.GradientTransformation:
    """Return ``config.optimizer`` on a linear warm-up + cosine decay schedule over ``total_steps`` steps (or, inside
    a traced step, over the traced ``[warmup, total]`` pair ``steps`` of :func:`core.schedule.schedule_steps`).

    ``"adamw"``: AdamW (Loshchilov & Hutter, 2019). ``"sgd"``: SGD with Nesterov momentum (Sutskever et al.,
    ICML 2013), weight decay added to the gradient before the momentum, as PyTorch's ``SGD`` does; on small
    CNNs it often generalises better than adaptive methods (Wilson et al., NeurIPS 2017). Weight decay applies
    to matrices and kernels (rank >= 2) only, not to biases, norm scales or codebooks.
    """
    if steps is None:
        warmup, total = (int(v) for v in schedule_steps(config.warmup_fraction, total_steps))
        schedule = optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, warmup, total)
    else:
        schedule = warmup_cosine(config.learning_rate, steps)

    def kernels(params: Any) -> Any:
        return jax.tree.map(lambda a: jnp.ndim(a) >= 2, params)

    if config.optimizer == "sgd":
        base = optax.chain(optax.add_decayed_weights(config.weight_decay, mask=kernels),
                           optax.sgd(schedule, momentum=config.momentum, nesterov=True))
    else:
        base = optax.adamw(schedule, weight_decay=config.weight_decay, mask=kernels)
    if config.clip_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), base)


def make_train_step(
    model: Model,
    optimizer: optax.GradientTransformation,
    config: TrainConfig,
    reparam: rp.Reparam | None = None,
    mesh: jax.sharding.Mesh | None = None,
    total_steps: int | None = None,
) -> TrainStep:
    """Return the jitted ``step(state, x, y, key) -> (state, {"loss", "accuracy"})``.

    With ``total_steps``, the step applies ``make_optimizer(config, total_steps)`` with the schedule's lengths as
    an argument of the compiled program instead of ``optimizer``: the same program then serves runs of any length.

    The step augments the batch (images only), computes the label-smoothed cross-entropy of
    ``model.apply(train=True)``, applies the optimiser (then ``constrain`` under a reparam) and
    donates ``state``. Its randomness is ``fold_in(key, state.step)``. With ``mesh``, ``state`` and
    ``key`` are replicated and ``x``/``y`` split over the mesh's ``"data"`` axis.
    """
    num_classes, smoothing = model.spec.num_classes, config.label_smoothing
    inp = model.spec.input
    max_shift = shift_for(config, inp.modality, inp.shape)
    do_augment = inp.modality == "image" and (max_shift > 0 or config.flip)

    def step(state: TrainState, x: jax.Array, y: jax.Array, key: jax.Array,
             r: rp.Reparam | None, steps: jax.Array | None) -> tuple[TrainState, dict[str, Any]]:
        opt = optimizer if steps is None else make_optimizer(config, 0, steps)
        k_aug, k_drop = jax.random.split(jax.random.fold_in(key, state.step))
        if do_augment:
            x = augment(x, k_aug, max_shift=max_shift, flip=config.flip)

        def loss_fn(trainable: Any) -> tuple[jax.Array, tuple[jax.Array, Any]]:
            params = trainable if r is None else rp.materialise(trainable, r)
            variables = {"params": params, "batch_stats": state.batch_stats}
            logits, stats = model.apply(variables, x, train=True, key=k_drop)
            targets = optax.smooth_labels(jax.nn.one_hot(y, num_classes), smoothing)
            return optax.softmax_cross_entropy(logits, targets).mean(), (logits, stats)

        (loss, (logits, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        if r is not None:
            params = rp.constrain(params, r)
        accuracy = jnp.mean((jnp.argmax(logits, axis=-1) == y).astype(jnp.float32))
        new = TrainState(state.step + 1, params, stats, opt_state)
        return new, {"loss": loss, "accuracy": accuracy}

    jitted = programs.jitted_step(step, mesh, None if total_steps is None else (model, config))
    if mesh is not None:
        reparam = parallel.replicate(reparam, mesh)
    lengths = None if total_steps is None else schedule_steps(config.warmup_fraction, total_steps)
    return TrainStep(jitted, reparam, lengths, mesh)


class TrainStep:
    """A jitted train step and the ``[warmup, total]`` lengths of its schedule (None: compiled in); :meth:`retime`
    changes the run's length between steps without compiling again."""

    def __init__(self, jitted: Any, reparam: rp.Reparam | None, lengths: np.ndarray | None,
                 mesh: jax.sharding.Mesh | None) -> None:
        self._jitted, self._reparam, self._mesh = jitted, reparam, mesh
        self._lengths: Any = None
        self.warmup, self.warmup_fraction = 0, 0.0
        if lengths is not None:
            self.warmup, self.warmup_fraction = int(lengths[0]), float(lengths[0]) / max(float(lengths[1]), 1.0)
            self.retime(int(lengths[1]))

    @property
    def lengths(self) -> tuple[int, int] | None:
        """The schedule's ``(warm-up, total)`` steps now; None when they are compiled in."""
        if self._lengths is None:
            return None
        warmup, total = np.asarray(jax.device_get(self._lengths)).tolist()
        return int(warmup), int(total)

    def retime(self, total_steps: int) -> None:
        """End the schedule at ``total_steps``: the rate follows the new cosine from the next step on. The warm-up
        keeps its planned steps, or its planned share of a shorter run (a run cut to a tenth would otherwise be
        all warm-up)."""
        total = max(int(total_steps), 1)
        warmup = min(self.warmup, int(self.warmup_fraction * total), total - 1)
        lengths: Any = jnp.asarray(np.asarray([warmup, total], np.int32))
        self._lengths = lengths if self._mesh is None else parallel.replicate(lengths, self._mesh)

    def __call__(self, state: TrainState, x: jax.Array, y: jax.Array, key: jax.Array
                 ) -> tuple[TrainState, dict[str, Any]]:
        out: tuple[TrainState, dict[str, Any]] = self._jitted(state, x, y, key, self._reparam, self._lengths)
        return out


def init_state(
    model: Model, variables: dict[str, Any], optimizer: optax.GradientTransformation,
    reparam: rp.Reparam | None,
) -> TrainState:
    """Return the initial train state (on the host/default device) for ``variables``."""
    params = variables["params"]
    if reparam is not None:
        params = rp.trainable(params, reparam)
    stats = variables.get("batch_stats", {})
    return TrainState(jnp.zeros((), jnp.int32), params, stats, optimizer.init(params))
