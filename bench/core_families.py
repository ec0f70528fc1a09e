"""Train-step and inference throughput of every network family the search can pick, netsynth against PyTorch.

One representative network per family (``bench/families/specs.py``: the hand-written CNN seed; plain stages
with 'same' padding, batch norm and stride-2 convolutions; residual; inverted residual with depthwise
convolutions; densely connected; the hashed n-gram bag, the trigram text CNN, Kim's word CNN, the transformer
encoder and the wide text CNN), built by the search space's own ``to_spec``, for 32x32x3 images or an SMS
Spam-like text layout. The netsynth side is ``core.model.build`` of that spec and the jitted train step of
``core.training`` (AdamW, cross-entropy); the PyTorch side is the same graph in PyTorch layers
(``bench/families/torch_net.py``; the parameter counts are asserted equal), with AdamW on the same tensors.
The method is ``bench/core_throughput.py``'s, through its functions: its XLA flags and allocator tunables,
both sides in one process, alternating bursts of ``--steps`` steps, ``--repeats`` of each; PyTorch images in
NCHW or channels-last, whichever was faster per mode in one trial burst each. Ratios are medians of the
per-round ratios. Batch 128 and the batch the search's seeds train with (64).

Run it with ``taskset -c 0`` and ``OMP_NUM_THREADS=1`` for the one-core figures (XLA, oneDNN and PyTorch then
each use one thread). Results and the exceptions: ``bench/README.md``.

Usage: ``python bench/core_families.py [--quick] [--families hand-cnn,text-cnn] [--batches 128,64]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import protocol
from core_throughput import (
    Burst,
    _versions,
    cpu_peak,
    flops_per_image,
    interleave,
    netsynth_side,
    prepare_process,
    torch_bursts,
)
from families.specs import FAMILIES, SEARCH_BATCH, Family, batches

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results" / "core_families.json"
QUICK_OUT = Path("/tmp/core_families_quick.json")
LAYOUTS = ("channels_last", "nchw")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--quick``: 3 steps, 3 repeats, batch 128 only)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="steps per timed burst")
    p.add_argument("--repeats", type=int, default=10, help="timed bursts per side and mode")
    p.add_argument("--batches", default=f"128,{SEARCH_BATCH}", help="comma-separated batch sizes")
    p.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    p.add_argument("--quick", action="store_true", help="3 steps, 3 repeats, batch 128: a smoke run")
    p.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT.relative_to(ROOT)} ({QUICK_OUT} "
                   "with --quick)")
    p.add_argument("--pause", type=float, default=0.2, help="seconds of rest before each burst")
    p.add_argument("--default-flags", action="store_true", help="don't set CPU_XLA_FLAGS")
    p.add_argument("--no-tunables", action="store_true", help="don't set GLIBC_TUNABLES")
    protocol.add_busy(p)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.batches = 3, 3, "128"
    args.out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    unknown = set(args.families.split(",")) - set(FAMILIES)
    if unknown:
        p.error(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    return args


def _median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def measure(family: Family, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Time one family at one batch size, both sides interleaved; return its row."""
    import torch
    from families.torch_net import TorchNet, same_params

    spec = family.spec()
    data = batches(family.info, batch)
    ours_train, ours_infer, settings = netsynth_side(spec.to_dict(), batch, data)
    layouts = LAYOUTS if family.info.modality == "image" else LAYOUTS[1:]
    twins: dict[str, tuple[Burst, Burst]] = {}
    params = 0
    for layout in layouts:
        torch.manual_seed(0)
        twin = TorchNet(spec)
        params = same_params(settings["params"], twin)
        twins[layout] = torch_bursts(twin, batch, data, layout == "channels_last")
    trial = {f"{lay}_{mode}": round(twins[lay][i](args.steps), 1)  # one burst each: the faster layout runs
             for lay in layouts for i, mode in enumerate(("train", "infer"))}
    best = {mode: max(layouts, key=lambda lay: trial[f"{lay}_{mode}"]) for mode in ("train", "infer")}
    bursts: dict[str, Burst] = {"ours_train": ours_train, "torch_train": twins[best["train"]][0],
                                "ours_infer": ours_infer, "torch_infer": twins[best["infer"]][1]}
    load = os.getloadavg()[0]
    samples = interleave(bursts, args.steps, args.repeats, args.pause)
    flops = flops_per_image(spec)
    unit = "img/s" if family.info.modality == "image" else "texts/s"
    row: dict[str, Any] = {"family": family.name, "batch": batch, "params": params, "unit": unit,
                           "note": family.note, "arch": family.arch, "torch_layout": best,
                           "torch_layout_trial": trial, "load_average": round(load, 2),
                           "flops_per_example": flops}
    for mode in ("train", "infer"):
        ours, theirs = samples[f"ours_{mode}"], samples[f"torch_{mode}"]
        row[f"{mode}_ratio"] = round(_median_ratio(ours, theirs), 3)
        row[f"{mode}_per_s"] = round(statistics.median(ours), 1)
        row[f"torch_{mode}_per_s"] = round(statistics.median(theirs), 1)
        row[f"{mode}_gflops"] = round(row[f"{mode}_per_s"] * flops[f"{mode}_flops"] / 1e9, 2)
        row[f"torch_{mode}_gflops"] = round(row[f"torch_{mode}_per_s"] * flops[f"{mode}_flops"] / 1e9, 2)
    row["samples"] = {k: [round(v, 1) for v in vs] for k, vs in samples.items()}
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every chosen family at every batch size (all families at the first size, then the next);
    return the result document, also written to ``args.out`` after each row (``complete`` false until the
    last), so an interrupted run keeps what it measured."""
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.set_flush_denormal(True)
    sizes = [int(b) for b in args.batches.split(",")]
    start, load_start = time.time(), os.getloadavg()
    rows: list[dict[str, Any]] = []
    names = args.families.split(",")
    result: dict[str, Any] = {}
    for batch in sizes:
        for name in names:
            rows.append(measure(FAMILIES[name], batch, args))
            print(row_line(rows[-1], cpu_peak()["peak_gflops"]), flush=True)
            settings = {
                "steps_per_burst": args.steps, "repeats": args.repeats, "pause_s": args.pause, "batches": sizes,
                "search_batch": SEARCH_BATCH, "quick": args.quick, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), "torch_threads": torch.get_num_threads(),
                "optimizer": "AdamW lr 1e-3, weight decay 1e-4 on rank >= 2 tensors",
                "loss": "softmax cross-entropy",
                "ratio": "median over rounds of netsynth / PyTorch (faster layout), per-second figures are medians",
                "load_average_start": [round(x, 2) for x in load_start],
                "load_average_end": [round(x, 2) for x in os.getloadavg()], "wall_s": round(time.time() - start),
                "families_module": "bench/families/specs.py", "cpu": cpu_peak(), "versions": _versions()}
            result = {"complete": len(rows) == len(sizes) * len(names),
                      "rows": [r for r in rows if r["batch"] == sizes[0]],
                      "rows_other_batches": [r for r in rows if r["batch"] != sizes[0]], "settings": settings}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            protocol.write(args.out, result, run_record)
    return result


HEADER = (f"{'family':<17}{'batch':>6}{'params':>11}{'netsynth':>11}{'PyTorch':>10}{'train':>7}"
          f"{'netsynth':>10}{'PyTorch':>10}{'infer':>7}{'GFLOP/s':>9}{'%peak':>7}{'PyT %':>7}")


def row_line(row: dict[str, Any], peak: float) -> str:
    """One table line: train and inference per second of both sides, ratios, train GFLOP/s and % of peak."""
    pct = 100 / peak
    return (f"{row['family']:<17}{row['batch']:>6}{row['params']:>11,}{row['train_per_s']:>11,.0f}"
            f"{row['torch_train_per_s']:>10,.0f}{row['train_ratio']:>6.2f}x{row['infer_per_s']:>10,.0f}"
            f"{row['torch_infer_per_s']:>10,.0f}{row['infer_ratio']:>6.2f}x{row['train_gflops']:>9.1f}"
            f"{pct * row['train_gflops']:>6.0f}%{pct * row['torch_train_gflops']:>6.0f}%")


def report(result: dict[str, Any]) -> str:
    """The result as a table (per second: img/s for images, texts/s for text; medians)."""
    s = result["settings"]
    peak = s["cpu"]["peak_gflops"]
    lines = ["per second (medians): train, then inference; ratio = median netsynth / PyTorch; "
             "GFLOP/s and % of peak: train step", HEADER]
    lines += [row_line(r, peak) for r in [*result["rows"], *result["rows_other_batches"]]]
    lines.append(f"peak estimate {peak:.0f} GFLOP/s ({s['cpu']['cores']} cores x {s['cpu']['ghz']:.2f} GHz x "
                 f"{s['cpu']['flop_per_cycle_per_core']} FLOP/cycle, {s['cpu']['model']}); load average "
                 f"{s['load_average_start'][0]:.1f} -> {s['load_average_end'][0]:.1f}; {s['wall_s']} s")
    lines.append(f"XLA_FLAGS={s['xla_flags']!r} GLIBC_TUNABLES={s['glibc_tunables']!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Set up the process (allocator, XLA flags), measure, print and write the JSON."""
    args = parse_args(argv)
    prepare_process(__file__, args)
    print(HEADER, flush=True)
    result = run(args)
    print(report(result))
    out = args.out.resolve()
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
