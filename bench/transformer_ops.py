"""Which operation keeps the transformer family below PyTorch on the CPU: each part of the text transformer seed's
train step, timed alone through XLA:CPU and through PyTorch 2.13, one thread a side, in one process
(``bench/conv_ops.py``'s method and timing).

Shapes are the seed's (``synthesis.space.text.SEEDS["transformer"]``, the ``text-transformer`` row of
``bench/core_families.py``): batch 128, 64 tokens, model width 64, 4 heads, feed-forward 128, a 10,000-row
embedding table. Parts: a dense layer of the feed-forward block (64 -> 128 over all 8,192 token rows) forward, its
data gradient and its weight gradient, and the weight gradient written as 64 row-chunks contracted in one batched
product then summed (a reformulation tried); the attention block (query/key/value projection, scores, softmax,
weighted values) forward and forward+backward, and its scores product and softmax forward+backward alone; layer
norm, the feed-forward block (dense, tanh-GELU, dense) and the embedding lookup, forward+backward.
GFLOP/s are counted for the dense parts (2 per multiply-add).

Usage: ``python bench/transformer_ops.py [--quick] [--out FILE]``; results in
``bench/results/transformer_ops.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import functools  # after XLA_FLAGS: JAX reads them when it loads
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from conv_ops import arguments, compare, write
from synthesis_quality import environment

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "transformer_ops.json"
LENGTH, WIDTH, HEADS, HIDDEN, VOCAB = 64, 64, 4, 128, 10_000


def arrays(batch: int) -> dict[str, np.ndarray]:
    """The inputs every part uses, drawn once."""
    rng = np.random.default_rng(0)

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.normal(size=shape) * scale).astype(np.float32)

    return {"x": normal(batch, LENGTH, WIDTH), "g": normal(batch, LENGTH, HIDDEN),
            "w1": normal(WIDTH, HIDDEN, scale=WIDTH ** -0.5), "w2": normal(HIDDEN, WIDTH, scale=HIDDEN ** -0.5),
            "qkv": normal(WIDTH, 3 * WIDTH, scale=WIDTH ** -0.5), "table": normal(VOCAB, WIDTH),
            "ids": rng.integers(0, VOCAB, (batch, LENGTH)).astype(np.int64)}


def attention(x: Any, w: Any, softmax: Callable[[Any], Any], swap: Callable[[Any, int, int], Any]) -> Any:
    """Multi-head self-attention without the output projection; ``swap(t, i, j)`` exchanges two axes (the same
    code runs on JAX and on PyTorch arrays)."""
    (b, n, d), projected = x.shape, x @ w
    q, k, v = (swap(projected[..., i * d:(i + 1) * d].reshape(b, n, HEADS, d // HEADS), 1, 2) for i in range(3))
    return softmax(q @ swap(k, 2, 3) / np.sqrt(d // HEADS)) @ v


def xla_parts(a: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    """The jitted parts through XLA."""
    x, g, w1, w2, qkv, table = (jnp.asarray(a[k]) for k in ("x", "g", "w1", "w2", "qkv", "table"))
    ids = jnp.asarray(a["ids"].astype(np.int32))
    rows = x.reshape(-1, WIDTH)
    scores = jnp.ones((x.shape[0], HEADS, LENGTH, LENGTH))
    heads = x.reshape(x.shape[0], LENGTH, HEADS, WIDTH // HEADS).transpose(0, 2, 1, 3)

    def softmax(s: Any) -> Any:
        return jax.nn.softmax(s, axis=-1)

    def att(v: Any, w: Any) -> Any:
        return attention(v, w, softmax, jnp.swapaxes)

    def square(f: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args: jnp.sum(f(*args) ** 2)

    def norm(v: Any) -> Any:
        mean = v.mean(-1, keepdims=True)
        return (v - mean) * jax.lax.rsqrt(v.var(-1, keepdims=True) + 1e-6)

    fns = {
        "dense forward": (jax.jit(lambda v, w: v @ w), (x, w1)),
        "dense data gradient": (jax.jit(lambda d, w: d @ w.T), (g, w1)),
        "dense weight gradient": (jax.jit(lambda v, d: v.reshape(-1, WIDTH).T @ d.reshape(-1, HIDDEN)), (x, g)),
        "weight gradient, 64 chunks": (jax.jit(lambda v, d: jnp.einsum(
            "cnd,cne->de", v.reshape(64, -1, WIDTH), d.reshape(64, -1, HIDDEN))), (x, g)),
        "attention forward": (jax.jit(att), (x, qkv)),
        "attention fwd+bwd": (jax.jit(jax.grad(square(att), (0, 1))), (x, qkv)),
        "scores product fwd+bwd": (jax.jit(jax.grad(square(lambda q, k: q @ k.transpose(0, 1, 3, 2)), (0, 1))),
                                   (heads, heads)),
        "softmax fwd+bwd": (jax.jit(jax.grad(square(softmax))), (scores,)),
        "layer norm fwd+bwd": (jax.jit(jax.grad(square(norm))), (rows,)),
        "feed-forward fwd+bwd": (jax.jit(jax.grad(square(lambda v, u, w: jax.nn.gelu(v @ u) @ w), (0, 1, 2))),
                                 (x, w1, w2)),
        "embedding fwd+bwd": (jax.jit(jax.grad(square(lambda t, i: jnp.take(t, i, axis=0)))), (table, ids)),
    }
    return {part: functools.partial(f, *args) for part, (f, args) in fns.items()}


def torch_parts(a: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    """The same parts through PyTorch (autograd for the forward+backward parts)."""
    import torch

    x, g, w1, w2, qkv, table = (torch.from_numpy(a[k]) for k in ("x", "g", "w1", "w2", "qkv", "table"))
    ids = torch.from_numpy(a["ids"])
    rows = x.reshape(-1, WIDTH)
    scores = torch.ones((x.shape[0], HEADS, LENGTH, LENGTH))
    heads = x.reshape(x.shape[0], LENGTH, HEADS, WIDTH // HEADS).transpose(1, 2).contiguous()

    def softmax(s: Any) -> Any:
        return torch.softmax(s, dim=-1)

    def att(v: Any, w: Any) -> Any:
        return attention(v, w, softmax, torch.transpose)

    def grad(f: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        def run() -> Any:
            leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in args]
            return torch.autograd.grad((f(*leaves) ** 2).sum(), [t for t in leaves if t.requires_grad])
        return run

    def nograd(f: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return f(*args)
        return run

    weight_gradient = nograd(lambda v, d: v.reshape(-1, WIDTH).T @ d.reshape(-1, HIDDEN), x, g)
    return {
        "dense forward": nograd(lambda v, w: v @ w, x, w1),
        "dense data gradient": nograd(lambda d, w: d @ w.T, g, w1),
        "dense weight gradient": weight_gradient,
        "weight gradient, 64 chunks": weight_gradient,  # the peer of XLA's reformulation is PyTorch's plain product
        "attention forward": nograd(att, x, qkv),
        "attention fwd+bwd": grad(att, x, qkv),
        "scores product fwd+bwd": grad(lambda q, k: q @ k.transpose(-1, -2), heads, heads),
        "softmax fwd+bwd": grad(softmax, scores),
        "layer norm fwd+bwd": grad(lambda v: torch.nn.functional.layer_norm(v, (WIDTH,), eps=1e-6), rows),
        "feed-forward fwd+bwd": grad(lambda v, u, w: torch.nn.functional.gelu(v @ u, approximate="tanh") @ w,
                                     x, w1, w2),
        "embedding fwd+bwd": grad(lambda t, i: torch.nn.functional.embedding(i, t), table, ids),
    }


def main(argv: list[str] | None = None) -> None:
    """Measure every part; print the table and write the JSON."""
    import torch

    args = arguments(argv, __doc__ or "", DEFAULT_OUT, calls=10)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    env = environment()
    dense = 2 * args.batch * LENGTH * WIDTH * HIDDEN
    flops = {p: dense for p in ("dense forward", "dense data gradient", "dense weight gradient",
                                "weight gradient, 64 chunks")}
    a = arrays(args.batch)
    write(args, env, compare(f"{args.batch}x{LENGTH}x{WIDTH}", xla_parts(a), torch_parts(a), args.calls,
                             args.repeats, flops))


if __name__ == "__main__":
    main()
