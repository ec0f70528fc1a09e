"""The remote commands of `netsynth` (`datasets`, `jobs`, `models`): a netsynth service driven over its HTTP API
with `netsynth.Client`, at `--url` / NETSYNTH_URL with the API key `--key` / NETSYNTH_API_KEY."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from netsynth.client import Client
from netsynth.errors import NetsynthError
from netsynth.types import Event, Job

GROUPS = ("datasets", "jobs", "models")
USAGE_ERROR = 2
FAILED = 1


class UsageError(Exception):
    """A missing URL or key, or bad input: exit status 2."""


def _line(*cells: object) -> None:
    print("\t".join("" if cell is None else str(cell) for cell in cells))


def cmd_datasets_upload(client: Client, args: argparse.Namespace) -> int:
    """Upload a dataset file; print its id and what it holds."""
    dataset = client.upload_dataset(args.file, name=args.name, resize=args.resize)
    print(f"{dataset['id']}\t{dataset['name']}: {dataset['sample_count']} {dataset['modality']} samples, "
          f"{len(dataset['classes'])} classes", flush=True)
    return 0


def cmd_datasets_list(client: Client, _args: argparse.Namespace) -> int:
    """Print the caller's datasets, one a line."""
    found = client.datasets()
    _line("ID", "NAME", "MODALITY", "SAMPLES", "CLASSES", "CREATED")
    for d in found:
        _line(d["id"], d["name"], d["modality"], d["sample_count"], len(d["classes"]), d["created_at"])
    return 0


def _budget(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def _finish(client: Client, job_id: str, events: bool) -> int:
    """Watch a job to its end; print its outcome (and each event as JSON with `events`); 0 if it succeeded."""
    end: Event | None = None
    for event in client.watch(job_id):
        if events:
            print(json.dumps(event), flush=True)
        end = event
    job = client.job(job_id)
    state = str(end["payload"].get("state")) if end else job["state"]
    models = ", ".join(f"{m['id']} ({m['variant']})" for m in job["models"]) or "none"
    print(f"job {job_id} {state}; models: {models}" + (f"; error: {job['error']}" if job["error"] else ""))
    return 0 if state == "succeeded" else FAILED


def cmd_jobs_create(client: Client, args: argparse.Namespace) -> int:
    """Submit a job; print its id, then with --watch follow it to its end."""
    constraints = {key: value for key in ("max_params", "max_model_bytes", "max_latency_ms")
                   if (value := getattr(args, key)) is not None}
    job = client.create_job(args.dataset, budget=None if args.budget is None else _budget(args.budget),
                            constraints=constraints or None, tolerance=args.tolerance, seed=args.seed,
                            epochs=args.epochs)
    print(job["id"], flush=True)
    return _finish(client, job["id"], args.events) if args.watch else 0


def _job_line(job: Job) -> None:
    _line(job["id"], job["state"], job["stage"] or "", job["budget_seconds"], f"{job['progress']:.2f}",
          job["created_at"])


def cmd_jobs_list(client: Client, args: argparse.Namespace) -> int:
    """Print the caller's jobs, newest first."""
    found = client.jobs(limit=args.limit)
    _line("ID", "STATE", "STAGE", "BUDGET S", "PROGRESS", "CREATED")
    for job in found:
        _job_line(job)
    return 0


def cmd_jobs_watch(client: Client, args: argparse.Namespace) -> int:
    """Follow a job to its end."""
    return _finish(client, args.job, args.events)


def cmd_jobs_cancel(client: Client, args: argparse.Namespace) -> int:
    """Cancel a job; print it."""
    job = client.cancel(args.job)
    print(f"job {job['id']} {job['state']}" + (" (stopping)" if job["cancel_requested"] else ""))
    return 0


def cmd_models_download(client: Client, args: argparse.Namespace) -> int:
    """Download a model; print where it was written."""
    output = args.output or Path(f"{args.model}.{'onnx' if args.format == 'onnx' else 'zip'}")
    print(client.download(args.model, output, format=args.format))
    return 0


def cmd_models_predict(client: Client, args: argparse.Namespace) -> int:
    """Classify images (files) or texts; print each input with its label and probability."""
    result = client.predict(args.model, args.inputs)
    for given, prediction in zip(args.inputs, result["predictions"], strict=True):
        best = max(prediction["probabilities"])
        _line(given, prediction["label"], f"{best:.4f}")
    return 0


Command = Callable[[Client, argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The arguments of the remote commands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("NETSYNTH_URL"), help="the service (default: NETSYNTH_URL)")
    common.add_argument("--key", default=os.environ.get("NETSYNTH_API_KEY"),
                        help="an API key (default: NETSYNTH_API_KEY)")
    parser = argparse.ArgumentParser(prog="netsynth", description=__doc__)
    groups = parser.add_subparsers(dest="group", required=True)

    def command(group: argparse._SubParsersAction[argparse.ArgumentParser], name: str, func: Command,
                what: str) -> argparse.ArgumentParser:
        p = group.add_parser(name, parents=[common], help=what, description=what)
        p.set_defaults(func=func)
        return p

    datasets = groups.add_parser("datasets", help="upload and list datasets").add_subparsers(dest="cmd", required=True)
    p = command(datasets, "upload", cmd_datasets_upload, "upload a dataset file (image zip, .npz, CSV, TSV)")
    p.add_argument("file", type=Path)
    p.add_argument("--name")
    p.add_argument("--resize", help="HEIGHTxWIDTH for images of mixed sizes")
    command(datasets, "list", cmd_datasets_list, "list your datasets")
    jobs = groups.add_parser("jobs", help="create, list, watch and cancel jobs").add_subparsers(dest="cmd",
                                                                                             required=True)
    p = command(jobs, "create", cmd_jobs_create, "submit a synthesis job")
    p.add_argument("--dataset", required=True, help="the dataset's id")
    p.add_argument("--budget", help="low, medium, high or seconds (default: from the dataset's size)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--tolerance", type=float)
    p.add_argument("--max-params", type=int)
    p.add_argument("--max-model-bytes", type=int)
    p.add_argument("--max-latency-ms", type=float)
    p.add_argument("--watch", action="store_true", help="follow the job to its end")
    p.add_argument("--events", action="store_true", help="with --watch, print each event as a JSON line")
    p = command(jobs, "list", cmd_jobs_list, "list your jobs, newest first")
    p.add_argument("--limit", type=int, default=50)
    p = command(jobs, "watch", cmd_jobs_watch, "follow a job to its end (exit status 1 unless it succeeded)")
    p.add_argument("job")
    p.add_argument("--events", action="store_true", help="print each event as a JSON line")
    p = command(jobs, "cancel", cmd_jobs_cancel, "cancel a job")
    p.add_argument("job")
    models = groups.add_parser("models", help="download models and predict").add_subparsers(dest="cmd",
                                                                                          required=True)
    p = command(models, "download", cmd_models_download, "download a model as ONNX or as a native zip")
    p.add_argument("model")
    p.add_argument("--format", choices=("onnx", "native"), default="onnx")
    p.add_argument("--output", type=Path, help="where to write it (default: MODEL_ID.onnx or .zip)")
    p = command(models, "predict", cmd_models_predict, "classify image files, or texts with a text model")
    p.add_argument("model")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a remote command; 0 on success, 1 when the API refused or failed, 2 on bad input."""
    args = build_parser().parse_args(argv)
    try:
        if not args.url:
            raise UsageError("no service URL: set NETSYNTH_URL or pass --url")
        if not args.key:
            raise UsageError("no API key: set NETSYNTH_API_KEY or pass --key")
        with Client(args.url, args.key) as client:
            status: int = args.func(client, args)
            return status
    except UsageError as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except (NetsynthError, OSError) as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        print("netsynth: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
