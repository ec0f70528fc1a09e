"""Compilation: the persistent cache across processes, one evaluation program for every batch, the traced
learning-rate schedule, and the meter of compile seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.compilation import metered
from core.evaluation import bucket, evaluate, predict_proba
from core.model import build
from core.schedule import schedule_steps, warmup_cosine
from tests.core.specs import quadrant_data, tiny_spec

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """
import json, sys
from core.compilation import metered, use_cache
use_cache(sys.argv[1])
from core.data import Dataset
from core.model import build
from core.train_config import TrainConfig
from core.training import train
from tests.core.specs import quadrant_data, tiny_spec
x, y = quadrant_data(96, seed=0)
with metered() as meter:
    train(build(tiny_spec()), Dataset(x, y, x[:40], y[:40]), TrainConfig(epochs=int(sys.argv[2]), batch_size=32))
print(json.dumps(meter.to_dict()))
"""


def _train_in_a_process(cache: Path, epochs: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))}
    done = subprocess.run([sys.executable, "-c", TRAIN, str(cache), str(epochs)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_a_second_process_reads_the_programs_the_first_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "jax-cache"
    first = _train_in_a_process(cache, epochs=1)
    assert first["compile_cache_misses"] > 0 and first["compile_seconds"] > 0
    assert any(cache.iterdir())  # entries written, small CPU programs included
    second = _train_in_a_process(cache, epochs=2)  # a run of another length: the same train step
    assert second["compile_cache_hits"] >= first["compile_cache_misses"]
    assert second["compile_cache_misses"] == 0


def test_the_cache_off_writes_nothing(tmp_path: Path) -> None:
    script = "from core.compilation import use_cache; use_cache(None); import jax, jax.numpy as jnp; " \
             "print(jax.jit(lambda a: a * 2)(jnp.ones(3)))"
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not any(tmp_path.iterdir())


def test_evaluation_compiles_once_for_every_batch_size_and_build() -> None:
    spec = tiny_spec()
    model = build(spec)
    variables = model.init(jax.random.key(0))
    x, y = quadrant_data(100, seed=3)
    evaluate(model, variables, x, y, batch_size=64)  # 64 + a ragged 36, padded: one program
    with metered() as meter:
        ragged = evaluate(build(spec), variables, x[:37], y[:37], batch_size=64)  # another build, 37 rows: 64
        evaluate(model, variables, x[:50], y[:50], batch_size=64)
        evaluate(model, variables, x, y, batch_size=64)
    assert meter.programs == 0 and meter.seconds == 0.0
    logits, _ = model.apply(variables, jnp.asarray(x[:37]), train=False)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(y[:37]))
    assert ragged["loss"] == pytest.approx(float(jnp.mean(loss)), rel=1e-5)
    assert ragged["accuracy"] == pytest.approx(float(jnp.mean(jnp.argmax(logits, -1) == y[:37])))
    predict_proba(model, variables, x[:20], batch_size=64)
    with metered() as meter:
        proba = predict_proba(build(spec), variables, x[:30], batch_size=64)
    assert meter.programs == 0
    np.testing.assert_allclose(proba, np.asarray(jax.nn.softmax(model.apply(variables, x[:30])[0])), atol=1e-6)


def test_batches_are_powers_of_two() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 136, 256, 257)] == [1, 1, 2, 4, 256, 256, 512]


@pytest.mark.parametrize(("total", "fraction", "peak"), [(1, 0.1, 0.01), (24, 0.1, 0.003), (357, 0.0, 0.0021),
                                                         (1000, 0.05, 0.05)])
def test_the_traced_schedule_is_optax_bit_for_bit(total: int, fraction: float, peak: float) -> None:
    warmup, steps = (int(v) for v in schedule_steps(fraction, total))
    counts = jnp.arange(steps + 2, dtype=jnp.int32)
    ours = jax.jit(jax.vmap(lambda c, s: warmup_cosine(peak, s)(c), in_axes=(0, None)))
    theirs = jax.jit(jax.vmap(optax.warmup_cosine_decay_schedule(0.0, peak, warmup, steps)))
    np.testing.assert_array_equal(np.asarray(ours(counts, jnp.asarray([warmup, steps]))), np.asarray(theirs(counts)))


def test_the_meter_counts_the_compilation_of_its_thread_only() -> None:
    ones = jnp.ones(7)
    with metered() as outer:
        with metered() as inner:
            jax.jit(lambda a: a * 3 + 1)(ones)
        jax.jit(lambda a: a * 3 + 1)(ones)  # a new function: compiled (or read back) again
    assert inner.programs == 1 and outer.programs == 2 and outer.seconds >= inner.seconds > 0
