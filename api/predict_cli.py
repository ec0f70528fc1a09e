"""`netsynth predict MODEL_DIR INPUT --output preds.csv`: a model package's predictions on raw images or texts."""

from __future__ import annotations

import argparse
import contextlib
import csv
import uuid
from pathlib import Path

import numpy as np

from api.inference import SessionCache
from domain.errors import InvalidInput
from domain.ingest import Inputs, load_inputs
from domain.package import Package, image_shape, network_input, read_package, resize_policy
from infra.settings import Settings

DEFAULT_BATCH = 256


def add_predict_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `predict` subcommand."""
    p = subparsers.add_parser(
        "predict", help="predict with a model package: raw images or texts in, labels and probabilities out")
    p.add_argument("model_dir", metavar="MODEL_DIR", type=Path,
                   help="the model package: the folder `netsynth synthesize` wrote, or the API's native .zip")
    p.add_argument("input", metavar="INPUT", type=Path,
                   help="images (a zip or folder of PNG / JPEG, class folders optional; an .npz with x and optional "
                   "y) or texts (a CSV with a text and optional label column; a TSV / TXT of text<TAB>label or text)")
    p.add_argument("--output", type=Path, default=Path("preds.csv"),
                   help="the CSV to write: input, predicted, then p_<class> per class (default: preds.csv)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help=f"inputs per run (default: {DEFAULT_BATCH})")
    p.set_defaults(func=cmd_predict)


def probabilities(package: Package, inputs: Inputs, batch_size: int = DEFAULT_BATCH) -> np.ndarray:
    """The package's class probabilities [N, classes] (float32) for the inputs, `batch_size` at a time."""
    if batch_size < 1:
        raise InvalidInput(f"the batch size must be at least 1, not {batch_size}")
    sessions, key = SessionCache(size=1), uuid.uuid4()
    try:  # onnxruntime raises types of its own, each a bare Exception
        sessions.runner(key, package.onnx)
    except Exception as exc:
        raise InvalidInput(f"the package's model.onnx cannot be loaded ({exc})") from exc
    batches = []
    for start in range(0, len(inputs.names), batch_size):
        end = start + batch_size
        if inputs.images is not None:
            x = network_input(package.preprocessing, images=inputs.images[start:end])
        else:
            x = network_input(package.preprocessing, texts=(inputs.texts or [])[start:end])
        try:
            batches.append(sessions.probabilities(key, package.onnx, x))
        except Exception as exc:
            raise InvalidInput(f"the package's model.onnx cannot run on these inputs ({exc})") from exc
    proba = np.concatenate(batches)
    if proba.ndim != 2 or proba.shape[1] != len(package.classes):
        raise InvalidInput(f"model.onnx gives {proba.shape[-1]} probabilities per input but labels.json names "
                           f"{len(package.classes)} classes")
    return proba


def write_predictions(path: Path, names: list[str], classes: list[str], proba: np.ndarray) -> None:
    """A CSV with a header `input,predicted,p_<class>...` and one row per input, complete or not written at all (a
    file of that name stays as it was); InvalidInput, naming the file and why, when the disk refuses it."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        with partial.open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["input", "predicted", *(f"p_{name}" for name in classes)])
            for name, row in zip(names, proba, strict=True):
                writer.writerow([name, classes[int(np.argmax(row))], *(f"{p:.9g}" for p in row.tolist())])
        partial.replace(path)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def accuracy_line(labels: list[str], predicted: list[str], classes: list[str]) -> str:
    """The accuracy of `predicted` against `labels`, noting labels the model has no class for."""
    known = set(classes)
    unknown = sorted({label for label in labels if label not in known})
    if len(unknown) == len(set(labels)):
        return f"no accuracy: the input's labels ({', '.join(unknown[:5])}) are none of the model's classes"
    right = sum(label == guess for label, guess in zip(labels, predicted, strict=True))
    note = f"; labels the model has no class for count as wrong: {', '.join(unknown[:5])}" if unknown else ""
    return f"accuracy {right / len(labels):.4f} ({right}/{len(labels)} labelled inputs){note}"


def cmd_predict(settings: Settings, args: argparse.Namespace) -> None:
    """Predict with the package at `args.model_dir` on `args.input`, write `args.output`, print a summary and,
    when the input carries labels, the accuracy. Bad input raises domain.errors (InvalidInput, DatasetRejected)."""
    package = read_package(args.model_dir)
    inputs = load_inputs(args.input, image_shape(package.preprocessing), policy=resize_policy(package.preprocessing))
    proba = probabilities(package, inputs, args.batch_size)
    write_predictions(args.output, inputs.names, package.classes, proba)
    predicted = [package.classes[i] for i in proba.argmax(axis=1).tolist()]
    kind = "images" if inputs.images is not None else "texts"
    print(f"predicted {len(predicted)} {kind} with {args.model_dir} ({len(package.classes)} classes) "
          f"into {args.output}")
    if inputs.labels is not None:
        print(accuracy_line(inputs.labels, predicted, package.classes))
