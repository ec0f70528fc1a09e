"""A trained model's package: the files it ships as (README, spec, weights, ONNX, preprocessing, labels, metrics),
as a zip or a folder, read back for prediction; and the one reading of its preprocessing into network inputs."""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from domain.errors import DatasetRejected, InvalidInput
from domain.ingest.archive import SafeZip
from domain.ingest.limits import Limits
from domain.ingest.resize import POLICIES, STRETCH
from domain.ingest.text import TextEncoder
from domain.package_readme import readme

SPEC, WEIGHTS, ARTIFACT, ONNX, PREPROCESSING, LABELS, METRICS = (
    "spec.json", "weights.safetensors", "model.nsz", "model.onnx", "preprocessing.json", "labels.json",
    "metrics.json")
REPORT_DIR = "report"
"""The package's folder of the explainability report: report.json, report.html (self-contained) and its images."""
WEIGHT_FILES = {"dense": WEIGHTS, "compressed": ARTIFACT}
"""The file a model variant's weights ship as: safetensors, or the compressed artifact (`core.artifact`)."""
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so that the same files always make the same zip


@dataclass(frozen=True)
class Package:
    """What prediction and explanation need from a model package: its spec, ONNX graph, preprocessing, class names,
    metrics, and its weights (empty when the package has none) with their variant."""

    spec: dict[str, Any]
    onnx: bytes
    preprocessing: dict[str, Any]
    classes: list[str]
    metrics: dict[str, Any]
    weights: bytes = b""
    variant: str = "dense"


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")


def package_files(
    spec: Mapping[str, Any], weights: bytes, onnx: bytes, preprocessing: Mapping[str, Any], classes: Sequence[str],
    metrics: Mapping[str, Any], variant: str = "dense", report: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
    """The package's files by name: README.md, spec.json, the weights (weights.safetensors, or model.nsz for the
    compressed variant), model.onnx, preprocessing.json, labels.json, metrics.json and the report's files (by
    their names in report/)."""
    if variant not in WEIGHT_FILES:
        raise ValueError(f"a model variant is one of {list(WEIGHT_FILES)}, not {variant!r}")
    return {
        "README.md": readme(variant).encode("utf-8"), SPEC: _json(spec), WEIGHT_FILES[variant]: bytes(weights),
        ONNX: bytes(onnx), PREPROCESSING: _json(preprocessing), LABELS: _json(list(classes)), METRICS: _json(metrics),
        **{f"{REPORT_DIR}/{name}": bytes(data) for name, data in (report or {}).items()},
    }


def package_zip(files: Mapping[str, bytes]) -> bytes:
    """The files as one deflated zip, the same bytes for the same files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def write_package(folder: Path, files: Mapping[str, bytes], overwrite: bool = False, what: str = "model package"
                  ) -> Path:
    """Write the files into `folder`, staged in a temporary folder first: a new folder appears complete or not at
    all; into an existing one (it must be empty unless `overwrite`) each file moves at once, replacing a file of
    the same name and leaving the others. InvalidInput when `folder` is a file or a non-empty folder not to
    overwrite, or when the disk refuses the write (full, not writable): its message names the folder (holding
    `what`) and why."""
    for name in files:
        parts = name.split("/")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != REPORT_DIR) or any(
                not part or part != Path(part).name or part.startswith(".") for part in parts):
            raise ValueError(f"a package file needs a plain file name (or one in {REPORT_DIR}/), not {name!r}")
    partial = f".{uuid.uuid4().hex[:12]}.partial"
    if folder.is_dir():
        if not overwrite and any(folder.iterdir()):
            raise InvalidInput(f"{folder} is not empty; choose a new or empty folder")
        staging = folder / partial
    elif folder.exists():
        raise InvalidInput(f"{folder} is a file, not a folder to write the {what} into")
    else:
        staging = folder.parent / f".{folder.name}{partial}"
    try:
        staging.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        for name, data in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_bytes(data)
        if staging.parent == folder:
            for name in files:
                (folder / name).parent.mkdir(exist_ok=True)
                os.replace(staging / name, folder / name)
        else:
            staging.rename(folder)
    except OSError as exc:
        raise InvalidInput(f"cannot write the {what} to {folder}: {exc.strerror or exc}") from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _folder_reader(folder: Path) -> Callable[[str], bytes | None]:
    def read(name: str) -> bytes | None:
        path = folder / name
        return path.read_bytes() if path.is_file() else None
    return read


def _zip_files(path: Path) -> dict[str, bytes]:
    try:
        with SafeZip(path, Limits()) as archive:
            return {info.filename: archive.read(info) for info in archive.members}
    except DatasetRejected as exc:
        raise InvalidInput(f"{path} is not a model package: {exc.detail}") from exc


def _parsed(path: Path, name: str, data: bytes | None, kind: type) -> Any:
    if data is None:
        raise InvalidInput(f"{path} is not a complete model package: it has no {name}")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{path}: {name} is not valid JSON ({exc})") from exc
    if not isinstance(value, kind):
        raise InvalidInput(f"{path}: {name} must hold a JSON {'object' if kind is dict else 'list'}")
    return value


def read_package(path: Path) -> Package:
    """The package in a folder (as `netsynth synthesize` writes it) or a zip (the API's native download);
    InvalidInput names the file that is missing or malformed."""
    if path.is_dir():
        read = _folder_reader(path)
    elif path.is_file():
        read = _zip_files(path).get
    else:
        raise InvalidInput(f"{path} does not exist; give a model package folder or a native .zip")
    onnx = read(ONNX)
    if not onnx:
        raise InvalidInput(f"{path} is not a complete model package: it has no {ONNX} (or an empty one)")
    classes = _parsed(path, LABELS, read(LABELS), list)
    if not classes or not all(isinstance(c, str) for c in classes) or len(set(classes)) != len(classes):
        raise InvalidInput(f"{path}: {LABELS} must be a list of distinct class names")
    preprocessing = _parsed(path, PREPROCESSING, read(PREPROCESSING), dict)
    try:
        check_preprocessing(preprocessing)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {PREPROCESSING}: {exc}") from exc
    metrics = read(METRICS)
    variant, weights = next(((v, data) for v, name in WEIGHT_FILES.items() if (data := read(name))), ("dense", b""))
    return Package(spec=_parsed(path, SPEC, read(SPEC), dict), onnx=onnx, preprocessing=preprocessing,
                   classes=classes, metrics={} if metrics is None else _parsed(path, METRICS, metrics, dict),
                   weights=weights, variant=variant)


def image_shape(preprocessing: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The (H, W, C) an image model's inputs are decoded to; None for a text model; InvalidInput for another
    kind or a malformed shape."""
    kind = preprocessing.get("kind")
    if kind == "text":
        return None
    if kind != "image":
        raise InvalidInput(f"the kind of input must be 'image' or 'text', not {kind!r}")
    shape = preprocessing.get("shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(d) is int and d > 0 for d in shape)
            and shape[2] in (1, 3)):
        raise InvalidInput(f"an image model's shape must be [height, width, 1 or 3], not {shape!r}")
    height, width, channels = shape
    return height, width, channels


def resize_policy(preprocessing: Mapping[str, Any]) -> str:
    """How an image model brings raw images of another size to its shape (domain.ingest.resize): the package's
    `resize`, or `stretch` for packages made before it was recorded; InvalidInput for an unknown policy."""
    policy = preprocessing.get("resize", STRETCH)
    if policy not in POLICIES:
        raise InvalidInput(f"the resize policy must be one of {list(POLICIES)}, not {policy!r}")
    return str(policy)


def _encoder(preprocessing: Mapping[str, Any]) -> TextEncoder:
    try:
        return TextEncoder.from_json(preprocessing.get("encoder"))  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidInput(f"the text encoder is malformed ({exc})") from exc


def check_preprocessing(preprocessing: Mapping[str, Any]) -> None:
    """Refuse (InvalidInput) preprocessing that is neither {"kind": "image", "shape": [H, W, C]} with C 1 or 3
    (and an optional known "resize" policy) nor {"kind": "text", "encoder": {...}} with a readable encoder."""
    if image_shape(preprocessing) is None:
        _encoder(preprocessing)
    else:
        resize_policy(preprocessing)


def network_input(
    preprocessing: Mapping[str, Any], images: Sequence[np.ndarray] | np.ndarray | None = None,
    texts: Sequence[str] | None = None,
) -> np.ndarray:
    """The ONNX graph's input: for decoded images [H, W, C] at the model's shape (uint8 pixels, or the floats of
    an npz) float32 [N, H, W, C]; for raw texts int32 token ids [N, L]. InvalidInput for the other kind of input,
    no inputs, or images of another shape."""
    shape = image_shape(preprocessing)
    if shape is None:
        if images is not None:
            raise InvalidInput("this model takes texts, not images")
        if not texts:
            raise InvalidInput("there are no texts to predict on")
        return _encoder(preprocessing).encode(list(texts))
    if texts is not None:
        raise InvalidInput("this model takes images, not texts")
    if images is None or len(images) == 0:
        raise InvalidInput("there are no images to predict on")
    shapes = {tuple(np.shape(image)) for image in images}
    if shapes != {shape}:
        found = ", ".join("x".join(map(str, s)) for s in sorted(shapes))
        raise InvalidInput(f"this model takes {'x'.join(map(str, shape))} images (height x width x channels), "
                           f"not {found}")
    return np.asarray(images, dtype=np.float32)
