"""`netsynth synthesize DATA --out DIR`: the engine the workers run, on a local dataset, with a progress bar.

Writes to DIR the model package (as the API's native download, unzipped), `search_log.jsonl`, `pareto.json`
and `metrics.json`; and, when compression delivered one, the compressed model's package in DIR/compressed/
(`model.nsz`, `model.onnx`, its before / after figures in `metrics.json`). `netsynth` (api/cli.py) hands this
command over by name, so the API never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from domain.rules import MAX_BUDGET_SECONDS, MAX_TOLERANCE, TIERS, tier_for

USAGE_ERROR = 2
_RESIZE = re.compile(r"^(\d{1,4})x(\d{1,4})$")


class ProgressBar:
    """A `synthesis.progress.Monitor` drawn with rich on stderr: the stage, the share of the budget spent, the time
    elapsed against the budget, the best accuracy and the trials so far. Use it as a context manager."""

    def __init__(self, budget_text: str, console: Console | None = None) -> None:
        self.best, self.trials, self.fraction = 0.0, 0, 0.0
        self.bar = Progress(TextColumn("{task.fields[stage]:<15}"), BarColumn(), TimeElapsedColumn(),
                            TextColumn("of {task.fields[budget]:<10} best {task.fields[best]:.4f}  trials "
                                       "{task.fields[trials]}"), console=console or Console(stderr=True))
        self.task = self.bar.add_task("synthesize", total=1.0, stage="starting", budget=budget_text, best=0.0,
                                      trials=0)

    def __enter__(self) -> ProgressBar:
        self.bar.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.bar.stop()

    def stage(self, name: str) -> None:
        """Show the new stage."""
        self.bar.update(self.task, stage=name)

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Move the bar (rich redraws it a few times a second, however often synthesis reports)."""
        self.best = max(self.best, float(metrics.get("val_accuracy", 0.0)))
        self.fraction = max(self.fraction, min(fraction, 1.0))
        self.bar.update(self.task, completed=self.fraction, best=self.best)

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Count trials and keep the best accuracy seen."""
        if kind == "candidate":
            self.trials += 1
            self.best = max(self.best, float(payload.get("accuracy", 0.0)))
        self.bar.update(self.task, best=self.best, trials=self.trials)


def build_parser() -> argparse.ArgumentParser:
    """The arguments of `netsynth synthesize`."""
    p = argparse.ArgumentParser(prog="netsynth synthesize", description=__doc__.split("\n")[0])
    p.add_argument("data", type=Path, help="image zip or folder of class folders, .npz, CSV (text,label) or TSV")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget", help="low, medium, high (2 / 5 / 16 device-hours) or seconds "
                                         "(default: chosen from the dataset's size)")
    budget.add_argument("--epochs", type=int, help="reproducible mode: a budget of training epochs, so the same "
                                                   "seed gives the same search log")
    p.add_argument("--out", type=Path, required=True, help="output folder (must be new or empty)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-params", type=int)
    p.add_argument("--max-model-bytes", type=int)
    p.add_argument("--max-latency-ms", type=float)
    p.add_argument("--resize", help="HEIGHTxWIDTH for image folders of mixed sizes")
    p.add_argument("--tolerance", type=float, default=None,
                   help="validation accuracy the compressed model may lose, as a fraction (default 0.005 = 0.5 "
                        f"percentage points; 0 to {MAX_TOLERANCE})")
    return p


class CliError(Exception):
    """Bad input: printed as `netsynth: error: ...`, exit status 2."""


def _budget_seconds(text: str | None, samples: int) -> float:
    from infra.settings import Settings

    text = text or tier_for(samples)
    if text in TIERS:
        return float(Settings().tier_seconds(text))
    try:
        seconds = float(text)
    except ValueError:
        raise CliError(f"--budget must be low, medium, high or a number of seconds, not {text!r}") from None
    if not 1 <= seconds <= MAX_BUDGET_SECONDS:
        raise CliError(f"--budget must be between 1 and {MAX_BUDGET_SECONDS} seconds")
    return seconds


def _as_file(data: Path, tmp: Path) -> Path:
    """A dataset file: a folder of class folders is zipped (stored, not compressed) first."""
    if data.is_dir():
        target = tmp / f"{data.name or 'data'}.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
            for path in sorted(data.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(data).as_posix())
        return target
    if not data.is_file():
        raise CliError(f"{data} does not exist")
    return data


def run(args: argparse.Namespace) -> Path:
    """Validate the data, synthesize, write the outputs; return the output folder."""
    from domain.errors import DatasetRejected
    from domain.ingest import Limits, inspect_file

    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise CliError(f"{args.out} exists and is not an empty folder")
    if args.budget is not None:
        _budget_seconds(args.budget, 0)  # a malformed budget is refused before any data is read
    if args.epochs is not None and args.epochs < 1:
        raise CliError("--epochs must be at least 1")
    if args.tolerance is not None and not 0 <= args.tolerance <= MAX_TOLERANCE:
        raise CliError(f"--tolerance must be between 0 and {MAX_TOLERANCE} (a fraction: 0.005 = 0.5 points)")
    resize = None
    if args.resize:
        if (match := _RESIZE.match(args.resize)) is None:
            raise CliError("--resize must look like 32x32")
        resize = (int(match[1]), int(match[2]))
    limits = Limits(resize=resize)
    with tempfile.TemporaryDirectory(prefix="netsynth-") as tmp:
        path = _as_file(args.data, Path(tmp))
        try:
            found = inspect_file(path, path.name, limits)
        except DatasetRejected as exc:
            raise CliError(f"{args.data}: {exc.detail} ({exc.reason})") from None
        print(f"{args.data}: {found.sample_count} {found.modality} samples, {len(found.classes)} classes",
              file=sys.stderr)
        from workers.app import use_compile_cache, use_cpu_xla_flags

        use_cpu_xla_flags()
        use_compile_cache()
        from workers.data import prepare_file

        prepared = prepare_file(path, found.format, limits, args.seed)
    return _synthesize(args, prepared, found.sample_count)


def _synthesize(args: argparse.Namespace, prepared: Any, samples: int) -> Path:
    from domain.package import package_files
    from synthesis.budget import Budget
    from synthesis.engine import synthesize
    from synthesis.interface import Options
    from synthesis.space import Constraints

    if args.epochs is not None:
        budget, budget_text = Budget(epochs=args.epochs), f"{args.epochs} epochs"
    else:
        seconds = _budget_seconds(args.budget, samples)
        budget, budget_text = Budget(seconds=seconds), f"{seconds:.0f} s"
    constraints = Constraints(max_params=args.max_params, max_model_bytes=args.max_model_bytes,
                              max_latency_ms=args.max_latency_ms)
    options = Options(seed=args.seed, constraints=constraints)
    if args.tolerance is not None:
        options = replace(options, tolerance=args.tolerance)
    with ProgressBar(budget_text) as bar:
        result = synthesize(replace(prepared.task, classes=prepared.classes), budget, options, bar)
    model = result.model
    files = package_files(model.spec, model.weights, model.onnx, prepared.preprocessing, prepared.classes,
                          model.metrics, report=model.report.files() if model.report else None)
    files["search_log.jsonl"] = "".join(json.dumps(e, sort_keys=True) + "\n" for e in result.log).encode()
    files["pareto.json"] = json.dumps(result.pareto, indent=2).encode()
    summary = {**model.metrics, "seed": args.seed, "budget": budget_text, "seconds": round(result.seconds, 3),
               "split": result.split, "search_stop": result.stop_reason}
    compressed = result.compressed
    if compressed is not None:
        summary["compressed"] = {k: v for k, v in compressed.model.metrics.items() if isinstance(v, int | float | str)}
    files["metrics.json"] = json.dumps(summary, indent=2).encode()
    small = None if compressed is None else package_files(
        compressed.model.spec, compressed.artifact, compressed.model.onnx, prepared.preprocessing, prepared.classes,
        compressed.model.metrics, variant="compressed",
        report=compressed.model.report.files() if compressed.model.report else None)
    write_outputs(args.out, files, small)
    print(f"model: test accuracy {model.metrics['test_accuracy']:.4f}, {model.param_count:,} parameters, "
          f"{len(result.log)} candidates; written to {args.out}")
    if "warning" in model.metrics:
        print(f"warning: {model.metrics['warning']}", file=sys.stderr)
    if compressed is not None:
        m = compressed.model.metrics
        print(f"compressed: test accuracy {m['test_accuracy']:.4f}, {m['nonzero_params']:,} non-zero parameters, "
              f"{m['model_bytes']:,} bytes ({m['ratio']:.1f}x smaller); written to {args.out / 'compressed'}")
    return Path(args.out)


def write_outputs(out: Path, files: Mapping[str, bytes], compressed: Mapping[str, bytes] | None) -> None:
    """Write the package into `out` (new or empty) and the compressed one, if any, into `out`/compressed: all of it,
    or nothing (CliError naming the folder and why, e.g. a full or read-only disk)."""
    from domain.errors import InvalidInput
    from domain.package import write_package

    created, written = not out.exists(), False
    try:
        write_package(out, files)
        written = True
        if compressed is not None:
            write_package(out / "compressed", compressed)
    except InvalidInput as exc:
        if written:  # only the compressed one failed (leaving nothing of itself): take the package back out
            for name in files:
                (out / name).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
        raise CliError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Run `netsynth synthesize`; return 0, or 2 on bad input."""
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except CliError as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
