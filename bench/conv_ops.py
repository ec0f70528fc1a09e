"""Which operation keeps the convolutional families below PyTorch on the CPU: each part of a train step of a 3x3
'same' convolution layer with batch norm, timed alone through netsynth's core (``core.kernels.conv_general_dilated``:
oneDNN where it is built, else XLA:CPU; ``core.norm.batch_norm``) and through PyTorch 2.13 (channels_last), one
thread a side, in one process.

Parts: the convolution's forward pass, its gradient with
respect to the input (data gradient) and to the kernel (filter gradient), and batch norm in training mode, forward
and backward. Shapes are the plain family's stages at 32x32 (batch 128): 32x32x32, 16x16x64 and 8x8x128, each
convolution keeping its channel count. Timing: alternating bursts (the core, then PyTorch) of ``--calls`` calls each,
``--repeats`` bursts a side, medians; ratio = PyTorch's seconds / the core's (above 1: the core is faster).
GFLOP/s count 2 multiply-adds per MAC of the convolution (the same for each gradient).

Usage: ``python bench/conv_ops.py [--quick] [--out FILE]``; results in ``bench/results/conv_ops.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # oneDNN's (and PyTorch's) OpenMP threads

import argparse  # after XLA_FLAGS: JAX reads them when it loads
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import protocol
from synthesis_quality import environment

from core import kernels
from core import norm as core_norm

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "conv_ops.json"
SHAPES = ((32, 32), (16, 64), (8, 128))  # (side, channels)
DIMS = ("NHWC", "HWIO", "NHWC")


def core_parts(x: np.ndarray, w: np.ndarray) -> dict[str, Callable[[], Any]]:
    """The jitted parts of a convolution + batch-norm layer's train step as the core computes them."""
    xj, wj = jnp.asarray(x), jnp.asarray(w)
    scale, bias = jnp.ones(w.shape[-1]), jnp.zeros(w.shape[-1])

    def conv(a: jax.Array, k: jax.Array) -> jax.Array:
        return kernels.conv_general_dilated(a, k, (1, 1), "SAME", dimension_numbers=DIMS)

    y = jax.jit(conv)(xj, wj)
    g = jnp.ones_like(y)

    def norm(a: jax.Array, s: jax.Array, b: jax.Array) -> jax.Array:
        return core_norm.batch_norm(a, s, b, 1e-5)[0]

    forward = jax.jit(conv)
    data = jax.jit(lambda k, d: jax.vjp(lambda a: conv(a, k), xj)[1](d)[0])
    filt = jax.jit(lambda a, d: jax.vjp(lambda k: conv(a, k), wj)[1](d)[0])
    bn = jax.jit(lambda a, d: jax.vjp(norm, a, scale, bias)[1](d))
    return {"conv forward": lambda: forward(xj, wj), "conv data gradient": lambda: data(wj, g),
            "conv filter gradient": lambda: filt(xj, g), "batch norm fwd+bwd": lambda: bn(y, g)}


def torch_parts(x: np.ndarray, w: np.ndarray) -> dict[str, Callable[[], Any]]:
    """The same parts through PyTorch, channels_last (its fastest CPU layout)."""
    import torch
    from torch.nn import grad as conv_grad

    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(w.transpose(3, 2, 0, 1).copy()).contiguous(memory_format=torch.channels_last)
    conv = torch.nn.functional.conv2d
    with torch.no_grad():
        y = conv(xt, wt, padding=1)
    g = torch.ones_like(y)
    bn = torch.nn.BatchNorm2d(w.shape[-1])

    def data() -> Any:
        return conv_grad.conv2d_input(xt.shape, wt, g, padding=1)

    def filt() -> Any:
        return conv_grad.conv2d_weight(xt, wt.shape, g, padding=1)

    def norm() -> Any:
        a = y.detach().requires_grad_(True)
        out = bn(a)
        return torch.autograd.grad(out, (a, bn.weight, bn.bias), g)

    def forward() -> Any:
        with torch.no_grad():
            return conv(xt, wt, padding=1)

    return {"conv forward": forward, "conv data gradient": data, "conv filter gradient": filt,
            "batch norm fwd+bwd": norm}


def burst(fn: Callable[[], Any], calls: int, sync: Callable[[Any], Any]) -> float:
    """Seconds per call over ``calls`` calls."""
    began = time.perf_counter()
    for _ in range(calls):
        out = fn()
    sync(out)
    return (time.perf_counter() - began) / calls


def measure(side: int, channels: int, batch: int, calls: int, repeats: int) -> list[dict[str, Any]]:
    """One row per part at one shape."""
    import torch

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, side, side, channels)).astype(np.float32)
    w = (rng.normal(size=(3, 3, channels, channels)) / np.sqrt(9 * channels)).astype(np.float32)
    flops = 2 * batch * side * side * channels * channels * 9
    return compare(f"{batch}x{side}x{side}x{channels}", core_parts(x, w), torch_parts(x, w), calls, repeats,
                   {part: flops for part in ("conv forward", "conv data gradient", "conv filter gradient")})


def compare(shape: str, xla: dict[str, Callable[[], Any]], pt: dict[str, Callable[[], Any]], calls: int,
            repeats: int, flops: dict[str, int]) -> list[dict[str, Any]]:
    """One row per part of ``xla`` (and its PyTorch twin in ``pt``): alternating bursts, medians, the ratio
    PyTorch's seconds / XLA's, and GFLOP/s for the parts ``flops`` counts; each row printed as it is measured."""
    rows = []
    for part in xla:
        for fn in (xla[part], pt[part]):  # warm up (compilation, allocator)
            fn()
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(burst(xla[part], calls, jax.block_until_ready))
            theirs.append(burst(pt[part], calls, lambda _o: None))
        a, b = statistics.median(ours), statistics.median(theirs)
        counted = flops.get(part)
        rows.append({"shape": shape, "part": part, "core_ms": round(1e3 * a, 3), "torch_ms": round(1e3 * b, 3),
                     "ratio": round(b / a, 3), "core_gflops": round(counted / a / 1e9, 1) if counted else None,
                     "torch_gflops": round(counted / b / 1e9, 1) if counted else None})
        print(f"{shape:<16}{part:<30}{rows[-1]['core_ms']:>10.2f}{rows[-1]['torch_ms']:>10.2f}"
              f"{rows[-1]['ratio']:>8.2f}x", flush=True)
    return rows


def arguments(argv: list[str] | None, doc: str, default_out: Path, calls: int) -> argparse.Namespace:
    """The command line of an ops benchmark (``--quick``: few calls, batch 16, output in the temp folder)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: few calls, output in the temp folder")
    p.add_argument("--calls", type=int, default=calls)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--out", type=Path, default=default_out)
    protocol.add_busy(p)
    args = p.parse_args(argv)
    args.run = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    if args.quick:
        args.calls, args.repeats, args.batch = 1, 2, 16
        temp = Path(os.environ.get("TMPDIR", "/tmp"))
        args.out = args.out if args.out != default_out else temp / default_out.name
    print(f"{'shape':<16}{'part':<30}{'core ms':>10}{'torch ms':>10}{'ratio':>9}")
    return args


def write(args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Write an ops benchmark's rows, with the machine and the run's record (bench/protocol.py), to ``args.out``."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, {"environment": env, "threads": 1, "batch": args.batch, "rows": rows}, args.run, indent=1)


def main(argv: list[str] | None = None) -> None:
    """Measure every part at every shape; print the table and write the JSON."""
    args = arguments(argv, __doc__ or "", DEFAULT_OUT, calls=5)
    env = environment()
    write(args, env, [r for side, channels in SHAPES
                      for r in measure(side, channels, args.batch, args.calls, args.repeats)])


if __name__ == "__main__":
    main()
