"""Train-step and inference throughput of netsynth's core against PyTorch, side by side.

The reference CNN (28x28x1 input, 'valid' padding unless ``--padding same``): 3x3 conv 32 - ReLU -
2x2 max-pool - 3x3 conv 64 - ReLU - 2x2 max-pool - dense 128 - ReLU - dense 10; batch 128. The
netsynth side is ``core.model.build`` of that spec and the jitted step of
``core.step.make_train_step`` (AdamW, cross-entropy); PyTorch gets the same network, AdamW
(weight decay on kernels only, as ours) and cross-entropy, in its faster memory layout.

Both run in one process, in alternating short bursts with a pause between them, so that load
from other processes hits both sides alike; the figures are the best burst of each side (and
medians). Settings that affect both sides:

* XLA:CPU runs with :data:`core.kernels.CPU_XLA_FLAGS` (``--default-flags`` to drop them);
* glibc's malloc hands large blocks back to the OS after each step by default, so PyTorch
  page-faults on every step; the script re-runs itself with raised mmap/trim thresholds in
  ``GLIBC_TUNABLES`` (``--no-tunables`` to keep the default);
* PyTorch flushes denormals to zero, as XLA:CPU does by default.

Usage: ``python bench/core_throughput.py [--steps 12] [--repeats 10] [--batch 128] [--out F]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import protocol

TUNABLES = "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"
DEFAULT_OUT = Path(__file__).parent / "results" / "core_throughput.json"
Burst = Callable[[int], float]  # run n steps, return images per second


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="steps per timed burst")
    p.add_argument("--repeats", type=int, default=10, help="timed bursts per side and mode")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--padding", choices=("valid", "same"), default="valid")
    p.add_argument("--pause", type=float, default=0.2, help="seconds of rest before each burst")
    p.add_argument("--default-flags", action="store_true", help="don't set CPU_XLA_FLAGS")
    p.add_argument("--no-tunables", action="store_true", help="don't set GLIBC_TUNABLES")
    protocol.add_busy(p)
    return p.parse_args(argv)


def reference_spec_doc(padding: str) -> dict[str, Any]:
    """Return the reference CNN as a netsynth spec document (raw 0-255 pixels in)."""
    conv = {"padding": padding}
    nodes = [
        {"id": "conv1", "op": "conv2d", "inputs": ["input"], "params": {"filters": 32, **conv}},
        {"id": "relu1", "op": "activation", "inputs": ["conv1"], "params": {"fn": "relu"}},
        {"id": "pool1", "op": "max_pool2d", "inputs": ["relu1"]},
        {"id": "conv2", "op": "conv2d", "inputs": ["pool1"], "params": {"filters": 64, **conv}},
        {"id": "relu2", "op": "activation", "inputs": ["conv2"], "params": {"fn": "relu"}},
        {"id": "pool2", "op": "max_pool2d", "inputs": ["relu2"]},
        {"id": "flat", "op": "flatten", "inputs": ["pool2"]},
        {"id": "fc1", "op": "dense", "inputs": ["flat"], "params": {"units": 128}},
        {"id": "relu3", "op": "activation", "inputs": ["fc1"], "params": {"fn": "relu"}},
        {"id": "logits", "op": "dense", "inputs": ["relu3"], "params": {"units": 10}},
    ]
    return {"name": "reference-cnn", "nodes": nodes,
            "input": {"shape": [28, 28, 1], "dtype": "float32", "modality": "image",
                      "scale": 1 / 255},
            "output": {"node": "logits", "num_classes": 10}}


# --------------------------------------------------------------------------- machine figures


def cpu_peak() -> dict[str, Any]:
    """Estimate fp32 peak FLOP/s as cores x clock x FLOP per cycle from /proc/cpuinfo.

    FLOP per cycle and core = 2 (FMA) x 2 (FMA pipes) x fp32 lanes: 16 with AVX-512 (8 on AMD
    before Zen 5, which splits 512-bit operations), 8 with AVX2+FMA, else 4 (no FMA: x1). The
    clock is the reported (nominal) one; turbo clocks can exceed it.
    """
    info: dict[str, str] = {}
    mhz: list[float] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "cpu MHz":
                mhz.append(float(value))
            info.setdefault(key, value)
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    amd_split = info.get("vendor_id") == "AuthenticAMD" and int(info.get("cpu family", "0")) < 26
    if "avx512f" in flags:
        lanes, fma = (8 if amd_split else 16), 2
    elif "avx2" in flags and "fma" in flags:
        lanes, fma = 8, 2
    else:
        lanes, fma = 4, 1
    per_cycle = 2 * fma * lanes if fma > 1 else 2 * lanes
    ghz = max(mhz) / 1000 if mhz else float("nan")
    return {"cores": cores, "ghz": ghz, "flop_per_cycle_per_core": per_cycle,
            "peak_gflops": (cores or 0) * ghz * per_cycle, "model": info.get("model name", ""),
            "method": "cores x /proc/cpuinfo MHz x (2 FMA x FMA pipes x fp32 lanes)"}


def flops_per_image(spec: Any) -> dict[str, int]:
    """Forward MACs (core.analysis), inference and train FLOPs per image.

    Training = forward + input gradients + weight gradients = 3x the forward, less the input
    gradient of the layers that read the network input.
    """
    from core.analysis import analyse
    from core.graph import validate

    graph = validate(spec)
    analysis = analyse(graph)
    first = {n.id for n in graph.order if "input" in n.inputs}
    first_macs = sum(c.macs for c in analysis.nodes if c.node in first)
    return {"forward_macs": analysis.macs, "infer_flops": 2 * analysis.macs,
            "train_flops": 2 * (3 * analysis.macs - first_macs)}


# ------------------------------------------------------------------------------ both sides


def netsynth_side(doc: dict[str, Any], batch: int, data: list[tuple[Any, Any]]
                  ) -> tuple[Burst, Burst, dict[str, Any]]:
    """Return train and inference bursts through netsynth's core, and its settings."""
    import jax
    import jax.numpy as jnp

    from core.model import build
    from core.spec import Spec
    from core.step import init_state, make_optimizer, make_train_step
    from core.train_config import TrainConfig

    model = build(Spec.from_dict(doc))
    config = TrainConfig(batch_size=batch, learning_rate=1e-3, weight_decay=1e-4,
                         label_smoothing=0.0, max_shift=0, flip=False)
    optimizer = make_optimizer(config, total_steps=1_000_000)
    variables = model.init(jax.random.key(0))
    state = {"s": init_state(model, variables, optimizer, None)}
    step = make_train_step(model, optimizer, config)
    forward = jax.jit(lambda p, b, x: model.apply({"params": p, "batch_stats": b}, x)[0])
    batches = [(jnp.asarray(x), jnp.asarray(y)) for x, y in data]
    key = jax.random.key(1)
    cursor = [0]

    def train(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            x, y = batches[cursor[0] % len(batches)]
            cursor[0] += 1
            state["s"], out = step(state["s"], x, y, key)
        out["loss"].block_until_ready()
        return n * batch / (time.perf_counter() - start)

    def infer(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            logits = forward(state["s"].params, state["s"].batch_stats, batches[i % len(batches)][0])
        logits.block_until_ready()
        return n * batch / (time.perf_counter() - start)

    train(2)
    infer(2)
    settings = {"backend": jax.default_backend(), "device": str(jax.devices()[0]),
                "params": sum(int(leaf.size) for leaf in jax.tree.leaves(state["s"].params)),
                "compute_dtype": str(jnp.dtype(model.compute_dtype)),
                "xla_flags": os.environ.get("XLA_FLAGS", "")}
    return train, infer, settings


def torch_side(padding: str, batch: int, data: list[tuple[Any, Any]], channels_last: bool
               ) -> tuple[Burst, Burst]:
    """Return PyTorch train and inference bursts for the same network, optimiser and loss."""
    import torch
    from torch import nn

    pad = 0 if padding == "valid" else 1
    side = 5 if padding == "valid" else 7

    class Scale(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (1 / 255)

    model = nn.Sequential(
        Scale(), nn.Conv2d(1, 32, 3, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(side * side * 64, 128), nn.ReLU(),
        nn.Linear(128, 10))
    return torch_bursts(model, batch, data, channels_last)


def torch_bursts(model: Any, batch: int, data: list[tuple[Any, Any]], channels_last: bool
                 ) -> tuple[Burst, Burst]:
    """Return PyTorch train and inference bursts of ``model`` (AdamW with weight decay on tensors of
    rank >= 2, as ours; cross-entropy) over ``data``: float ``[N, H, W, C]`` images, passed as NCHW
    (channels-last in memory when ``channels_last``), or integer token ids, passed as int64."""
    import torch
    from torch import nn

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device).to(memory_format=fmt)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def tensor(x: Any) -> Any:
        if x.ndim < 4:
            return torch.from_numpy(x).long().to(device)
        return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=fmt).to(device)

    batches = [(tensor(x), torch.from_numpy(y).long().to(device)) for x, y in data]
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=cuda)
    cursor = [0]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def train(n: int) -> float:
        model.train()
        start = time.perf_counter()
        for _ in range(n):
            x, y = batches[cursor[0] % len(batches)]
            cursor[0] += 1
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        sync()
        return n * batch / (time.perf_counter() - start)

    def infer(n: int) -> float:
        model.eval()
        with torch.inference_mode(), autocast:
            start = time.perf_counter()
            for i in range(n):
                model(batches[i % len(batches)][0])
            sync()
            return n * batch / (time.perf_counter() - start)

    train(2)
    infer(2)
    return train, infer


# -------------------------------------------------------------------------------- the run


def interleave(bursts: dict[str, Burst], steps: int, repeats: int, pause: float
               ) -> dict[str, list[float]]:
    """Time every burst ``repeats`` times, in alternating order, resting before each one."""
    samples: dict[str, list[float]] = {name: [] for name in bursts}
    names = list(bursts)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            time.sleep(pause)
            samples[name].append(bursts[name](steps))
    return samples


def summarise(samples: dict[str, list[float]], ours: str, theirs: str) -> dict[str, float]:
    """Best and median images/s of both sides, and the ratio of bests and median paired ratio."""
    a, b = samples[ours], samples[theirs]
    return {"ours": max(a), "theirs": max(b), "ratio": max(a) / max(b),
            "ours_median": statistics.median(a), "theirs_median": statistics.median(b),
            "ratio_median": statistics.median(x / y for x, y in zip(a, b, strict=True))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure both sides and return the result document."""
    import numpy as np
    import torch

    from core.spec import Spec

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.set_flush_denormal(True)
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, (args.batch, 28, 28, 1)).astype(np.float32),
             rng.integers(0, 10, args.batch).astype(np.int32)) for _ in range(8)]
    doc = reference_spec_doc(args.padding)
    ours_train, ours_infer, settings = netsynth_side(doc, args.batch, data)
    bursts = {"ours_train": ours_train, "ours_infer": ours_infer}
    for layout in ("channels_last", "nchw"):
        t_train, t_infer = torch_side(args.padding, args.batch, data, layout == "channels_last")
        bursts[f"torch_{layout}_train"], bursts[f"torch_{layout}_infer"] = t_train, t_infer
    samples = interleave(bursts, args.steps, args.repeats, args.pause)

    def faster(mode: str) -> str:
        return max(("channels_last", "nchw"), key=lambda lay: max(samples[f"torch_{lay}_{mode}"]))

    best = {mode: faster(mode) for mode in ("train", "infer")}
    flops = flops_per_image(Spec.from_dict(doc))
    peak = cpu_peak()
    result: dict[str, Any] = {"medians": {}, "flops": {**flops}}
    for mode in ("train", "infer"):
        m = summarise(samples, f"ours_{mode}", f"torch_{best[mode]}_{mode}")
        result |= {f"{mode}_img_s": round(m["ours"], 1), f"torch_{mode}_img_s": round(m["theirs"], 1),
                   f"{mode}_ratio": round(m["ratio"], 3)}
        result["medians"] |= {f"{mode}_img_s": round(m["ours_median"], 1),
                              f"torch_{mode}_img_s": round(m["theirs_median"], 1),
                              f"{mode}_ratio": round(m["ratio_median"], 3)}
        result["flops"] |= {f"{mode}_gflops": round(m["ours"] * flops[f"{mode}_flops"] / 1e9, 1),
                            f"torch_{mode}_gflops": round(m["theirs"] * flops[f"{mode}_flops"] / 1e9, 1)}
    result["flops"] |= {"peak_gflops": round(peak["peak_gflops"], 1), "peak_method": peak["method"]}
    result["settings"] = {
        **settings, "batch": args.batch, "steps_per_burst": args.steps, "repeats": args.repeats,
        "pause_s": args.pause, "padding": args.padding,
        "network": "conv3x3(32)-relu-maxpool2-conv3x3(64)-relu-maxpool2-dense128-relu-dense10",
        "optimizer": "AdamW lr 1e-3, weight decay 1e-4 on kernels (ours: warm-up + cosine)",
        "loss": "softmax cross-entropy", "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
        "torch_layout": best, "torch_threads": torch.get_num_threads(),
        "torch_flush_denormal": True, "cpu": peak, "versions": _versions(),
        "python": platform.python_version()}
    result["samples"] = {k: [round(v, 1) for v in vs] for k, vs in samples.items()}
    return result


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("jax", "jaxlib", "flax", "optax", "torch")}


def report(result: dict[str, Any]) -> str:
    """Return the result as a table."""
    f, s, med = result["flops"], result["settings"], result["medians"]
    rows = [("", "netsynth core", f"PyTorch {s['versions']['torch']}", "ratio")]
    for mode in ("train", "infer"):
        for label, src in ((f"{mode} img/s", result), ("  (medians)", med)):
            rows.append((label, f"{src[f'{mode}_img_s']:,.0f}", f"{src[f'torch_{mode}_img_s']:,.0f}",
                         f"{src[f'{mode}_ratio']:.2f}x"))
    for mode in ("train", "infer"):
        rows.append((f"{mode} GFLOP/s", f"{f[f'{mode}_gflops']:.1f}",
                     f"{f[f'torch_{mode}_gflops']:.1f}", ""))
    lines = [f"{a:<14}{b:>16}{c:>22}{d:>9}" for a, b, c, d in rows]
    peak, pct = s["cpu"], 100 / f["peak_gflops"]
    lines += [
        f"peak estimate {f['peak_gflops']:.0f} GFLOP/s = {peak['cores']} cores x "
        f"{peak['ghz']:.2f} GHz x {peak['flop_per_cycle_per_core']} FLOP/cycle ({peak['model']});"
        f" train {pct * f['train_gflops']:.0f}% of it, PyTorch {pct * f['torch_train_gflops']:.0f}%",
        f"FLOPs/image: train {f['train_flops'] / 1e6:.1f} M, inference "
        f"{f['infer_flops'] / 1e6:.1f} M; batch {s['batch']}, padding '{s['padding']}', "
        f"{s['backend']} ({s['compute_dtype']}), PyTorch layout {s['torch_layout']}",
        f"XLA_FLAGS={s['xla_flags']!r} GLIBC_TUNABLES={s['glibc_tunables']!r}",
    ]
    return "\n".join(lines)


def prepare_process(script: str, args: argparse.Namespace) -> None:
    """Re-run ``script`` with the allocator tunables unless ``--no-tunables`` (glibc reads them at
    process start only), then put :data:`core.kernels.CPU_XLA_FLAGS` into ``XLA_FLAGS`` unless
    ``--default-flags`` (before JAX starts its backend)."""
    if not args.no_tunables and "GLIBC_TUNABLES" not in os.environ:
        env = {**os.environ, "GLIBC_TUNABLES": TUNABLES}
        os.execve(sys.executable, [sys.executable, script, *sys.argv[1:]], env)
    if not args.default_flags:
        from core.kernels import CPU_XLA_FLAGS  # imports jax; flags are read at backend start

        flags = [os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]
        os.environ["XLA_FLAGS"] = " ".join(flags).strip()


def main(argv: list[str] | None = None) -> None:
    """Set up the process (allocator, XLA flags), measure, print and write the JSON."""
    args = parse_args(argv)
    prepare_process(__file__, args)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    result = run(args)
    print(report(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, result, run_record)


if __name__ == "__main__":
    main()
