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

from store.errors import DatasetRejected, InvalidInput
from store.ingest.archive import SafeZip
from store.ingest.limits import Limits
from store.ingest.resize import POLICIES, STRETCH
from store.ingest.text import TextEncoder

README = """\
# A netsynth model

| File | What it holds |
|---|---|
| `spec.json` | The network spec: input, graph of layers, output (netsynth's JSON model format). |
WEIGHTS_ROW
| `model.onnx` | The same network exported to ONNX, runnable without netsynth. |
| `preprocessing.json` | How raw inputs become the network's input (image shape, or the text encoder). |
| `labels.json` | The class names, in the order of the model's outputs. |
| `metrics.json` | What training measured (e.g. accuracy on held-out data). |
| `report/` | The explainability report (when the job had time for it): `report.html`, `report.json`, images. |

## Predicting with the netsynth command line

```
netsynth predict MODEL_DIR INPUT --output preds.csv
```

`MODEL_DIR` is this folder (or this zip); `INPUT` a zip or folder of PNG / JPEG images or an `.npz` with `x`
for an image model, a CSV with a `text` column or a TSV / TXT of texts for a text model. Labels (class
folders, `y`, a `label` column, `text<TAB>label`) are optional; with them the accuracy is printed.

LOADING

## Running model.onnx with onnxruntime

```python
import json
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
labels = json.load(open("labels.json"))
(probabilities,) = session.run(["probabilities"], {"input": x})
predicted = [labels[i] for i in probabilities.argmax(axis=-1)]
```

The graph's input is named `input`; its output `probabilities` is `[N, classes]` (softmax; `logits` is
there too).

- Images: `x` is raw pixel values 0-255 as float32 `[N, H, W, C]`, with `[H, W, C]` the `shape` in
  `preprocessing.json` (C = 1 for grayscale, 3 for RGB). The graph normalises the pixels itself (per
  channel). An image of another size is first brought to `H x W` as `resize` in `preprocessing.json`
  says: `centre-crop` scales it (Pillow, bilinear) to the smallest size covering `H x W` with its aspect
  ratio kept and cuts out the centre; `stretch` (or no `resize`) scales each axis on its own.
- Text: `x` is int32 token ids `[N, L]` from the encoder in `preprocessing.json`: each text is
  lower-cased and split into words (regular expression `\\w+`); a word's id is its index in `words`
  plus 2 (0 = padding, 1 = unknown word); a word outside `words` becomes up to four ids of its hashed
  character trigrams (`subword_buckets` ids after the words; see `store.ingest.text.TextEncoder`); the ids
  are cut or right-padded with 0 to `max_length`. Encoders of version 3 with `ngram_buckets` > 0 append
  `bag_length` more ids: the text's distinct word 1-2-grams and character 2-5-grams (words padded with a
  space), each `1 + crc32(feature) % ngram_buckets` (features spelt `w word`, `b word word`, `c chars`),
  sorted, cut or right-padded with 0 (`store.ingest.text.ngram_features`). Version 4 with `word_buckets` > 0
  hashes word features to `1 + crc32(feature) % word_buckets` and character features to
  `1 + word_buckets + crc32(feature) % (ngram_buckets - word_buckets)`.
"""

SPEC, WEIGHTS, ARTIFACT, ONNX, PREPROCESSING, LABELS, METRICS = (
    "spec.json", "weights.safetensors", "model.nsz", "model.onnx", "preprocessing.json", "labels.json",
    "metrics.json")
REPORT_DIR = "report"
"""The package's folder of the explainability report: report.json, report.html (self-contained) and its images."""
WEIGHT_FILES = {"dense": WEIGHTS, "compressed": ARTIFACT}
"""The file a model variant's weights ship as: safetensors, or the compressed artifact (`core.artifact`)."""
_VARIANT_README = {
    "dense": ("| `weights.safetensors` | The trained weights, with the spec in the safetensors metadata. |",
              """## Loading the weights with netsynth

```python
from core import checkpoint, model

ckpt = checkpoint.load("weights.safetensors")  # or checkpoint.from_bytes(data)
net = model.build(ckpt.spec)
logits, _ = net.apply(ckpt.variables, x)
```
"""),
    "compressed": ("| `model.nsz` | The compressed model (pruned, weight-shared; netsynth's compressed format): "
                   "its size is the model's bytes. |",
                   """## Loading the compressed model with netsynth

`model.nsz` holds the spec, the masks of the pruned weights, each layer's codebook of shared values and the
bit-packed indices (the byte layout is `docs/compressed-format.md` in netsynth's repository). Decoding gives
back the dense-equivalent weights bit for bit (pruned weights are zero); `model.onnx` is the same network.
`metrics.json` has the compression's before / after report.

```python
from core import artifact, model

ckpt = artifact.decode(open("model.nsz", "rb").read())
net = model.build(ckpt.spec)
logits, _ = net.apply(ckpt.variables, x)
```
"""),
}
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
    row, loading = _VARIANT_README[variant]
    readme = README.replace("WEIGHTS_ROW", row).replace("LOADING", loading)
    return {
        "README.md": readme.encode("utf-8"), SPEC: _json(spec), WEIGHT_FILES[variant]: bytes(weights),
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
    """How an image model brings raw images of another size to its shape (store.ingest.resize): the package's
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
