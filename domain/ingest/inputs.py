"""Inputs to predict on, labels optional: images from a zip, a folder or an npz, texts from CSV / TSV / TXT."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from domain.errors import DatasetRejected, InvalidInput
from domain.ingest.archive import SafeZip
from domain.ingest.arrays import label_names, read_npz_inputs
from domain.ingest.detect import TEXT_FORMATS, detect_format
from domain.ingest.images import decode_image
from domain.ingest.imagezip import visible_files
from domain.ingest.limits import Limits
from domain.ingest.resize import CENTRE_CROP, fit_pixels
from domain.ingest.tables import text_lines

_IMAGE_INPUTS = "a zip or folder of PNG / JPEG images or an .npz with 'x'"
_TEXT_INPUTS = "a CSV with a 'text' column or a TSV / TXT of texts"


@dataclass(frozen=True)
class Inputs:
    """Images (uint8 [N, H, W, C] at the model's shape, resized to it when needed; float32 when an npz held
    floats) or texts, each input's name (its file's path, `x[i]` or `line n`), and every input's label when the
    input carried labels."""

    images: np.ndarray | None
    texts: list[str] | None
    labels: list[str] | None
    names: list[str]


def _decoded(
    files: Sequence[tuple[str, Callable[[], bytes]]], shape: tuple[int, int, int], limits: Limits, where: str,
    policy: str,
) -> Inputs:
    """Each visible (path, bytes reader) decoded at `shape` (resized by `policy`); labelled by class folder when
    every image is in one."""
    visible = visible_files((read, name) for name, read in files)
    if not visible:
        raise DatasetRejected("empty", f"{where} holds no images")
    images = np.empty((len(visible), *shape), dtype=np.uint8)
    names = []
    for i, (read, parts) in enumerate(visible):
        names.append("/".join(parts))
        images[i] = decode_image(read(), shape, limits, name=names[-1], policy=policy)
    labelled = all(len(parts) == 2 for _, parts in visible)
    return Inputs(images, None, [parts[0] for _, parts in visible] if labelled else None, names)


def _zip_images(path: Path, shape: tuple[int, int, int], limits: Limits, policy: str) -> Inputs:
    with SafeZip(path, limits) as archive:
        files = [(info.filename, partial(archive.read, info)) for info in archive.members]
        return _decoded(files, shape, limits, path.name, policy)


def _folder_images(folder: Path, shape: tuple[int, int, int], limits: Limits, policy: str) -> Inputs:
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    return _decoded([(p.relative_to(folder).as_posix(), p.read_bytes) for p in paths], shape, limits, str(folder),
                    policy)


def _npz_images(path: Path, shape: tuple[int, int, int], limits: Limits, policy: str) -> Inputs:
    x, labels = read_npz_inputs(path, limits)
    if x.shape[3] != shape[2]:
        raise InvalidInput(f"{path.name}: 'x' holds {'x'.join(map(str, x.shape[1:]))} images; the model takes "
                           f"{'x'.join(map(str, shape))} (height x width x channels)")
    x = fit_pixels(x, shape[:2], policy)
    names = [f"x[{i}]" for i in range(x.shape[0])]
    return Inputs(x, None, None if labels is None else label_names(labels), names)


def _texts(path: Path, fmt: str, limits: Limits) -> Inputs:
    rows = list(text_lines(path, fmt, limits))
    if not rows:
        raise DatasetRejected("empty", f"{path.name} holds no texts")
    unlabelled = [line for line, _, label in rows if label is None]
    if unlabelled and len(unlabelled) < len(rows):
        labelled = next(line for line, _, label in rows if label is not None)
        raise DatasetRejected(f"malformed-{fmt}", f"line {unlabelled[0]} has no label while line {labelled} has "
                              "one; label every line or none")
    labels = None if unlabelled else [label for _, _, label in rows if label is not None]
    return Inputs(None, [text for _, text, _ in rows], labels, [f"line {line}" for line, _, _ in rows])


def load_inputs(path: Path, shape: tuple[int, int, int] | None, limits: Limits | None = None,
                policy: str = CENTRE_CROP) -> Inputs:
    """The inputs in `path` for a model taking images decoded to `shape` (H, W, C), images of another size
    resized by the resize `policy` (domain.ingest.resize), or texts when `shape` is None. InvalidInput when
    `path` is missing or holds the other kind of input; DatasetRejected when it is malformed."""
    limits = limits or Limits()
    if path.is_dir():
        fmt = "folder"
    elif path.is_file():
        fmt = detect_format(path, path.name, limits)
    else:
        raise InvalidInput(f"{path} does not exist")
    if shape is None and fmt not in TEXT_FORMATS:
        raise InvalidInput(f"{path} holds images; this model classifies texts: give {_TEXT_INPUTS}")
    if shape is None:
        return _texts(path, fmt, limits)
    if fmt in TEXT_FORMATS:
        raise InvalidInput(f"{path} holds texts; this model classifies images: give {_IMAGE_INPUTS}")
    loaders = {"folder": _folder_images, "image_zip": _zip_images, "npz": _npz_images}
    return loaders[fmt](path, shape, limits, policy)
