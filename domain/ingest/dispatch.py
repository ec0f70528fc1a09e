"""Inspecting (validate and profile) and loading an uploaded dataset, one parser per format for both."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from domain.errors import DatasetRejected
from domain.ingest.accumulate import ImageAccumulator, TextAccumulator
from domain.ingest.archive import SafeZip
from domain.ingest.arrays import label_names, npz_batches, read_npz
from domain.ingest.detect import TEXT_FORMATS, detect_format
from domain.ingest.imagezip import zip_images, zip_sizes
from domain.ingest.limits import Limits
from domain.ingest.resize import fit_pixels, plan_resize
from domain.ingest.results import ImageData, Inspection, TextData
from domain.ingest.tables import text_rows


def _accumulated(path: Path, fmt: str, limits: Limits, keep: bool
                 ) -> tuple[ImageAccumulator | TextAccumulator, int | None]:
    """Every sample of the file accumulated; with an npz, also the size of its test split."""
    if fmt in TEXT_FORMATS:
        texts = TextAccumulator(keep)
        for text, label in text_rows(path, fmt, limits):
            texts.add(text, label)
        return texts, None
    if fmt == "npz" and keep:  # loading: one array, not batches copied into one
        npz = read_npz(path, limits)
        plan = plan_resize(Counter({npz.x.shape[1:3]: npz.x.shape[0]}), limits.resize)
        images = ImageAccumulator(keep, plan)
        x = npz.x if plan.target is None else fit_pixels(npz.x, plan.target)
        images.add(label_names(npz.labels), x, x.shape[1:3] != npz.x.shape[1:3])
        return images, npz.test_samples
    if fmt == "npz":  # inspecting: batch by batch, so an upload's validation never holds it whole
        with npz_batches(path, limits) as (npz, batches):
            plan = plan_resize(Counter({npz.x.shape[1:3]: len(npz.labels)}), limits.resize)
            images, names, at = ImageAccumulator(keep, plan), label_names(npz.labels), 0
            for batch in batches:
                x = batch if plan.target is None else fit_pixels(batch, plan.target)
                images.add(names[at:at + len(x)], x, x.shape[1:3] != batch.shape[1:3])
                at += len(x)
        return images, npz.test_samples
    if fmt == "image_zip":
        if keep and limits.resize is not None:  # loading at a known size: no need to read the headers first
            plan = plan_resize(Counter(), limits.resize)
        else:
            with SafeZip(path, limits) as archive:  # its own archive: each pass is held to the read limit alone
                plan = plan_resize(zip_sizes(archive, limits), limits.resize)
        images = ImageAccumulator(keep, plan)
        with SafeZip(path, limits) as archive:
            for label, pixels, resized in zip_images(archive, limits, plan.target):
                images.add([label], pixels[None], resized)
        return images, None
    raise DatasetRejected("unknown-format", f"unknown dataset format {fmt!r}")


def inspect_file(path: Path, filename: str, limits: Limits) -> Inspection:
    """Detect the format from the filename's extension and the file's first bytes, validate and profile;
    raise DatasetRejected(reason, detail) with a user-facing detail when the dataset is refused."""
    fmt = detect_format(path, filename, limits)
    samples, test_samples = _accumulated(path, fmt, limits, keep=False)
    profile = {"format": fmt, **samples.profile(limits)}
    if test_samples is not None:
        profile["npz_test_samples"] = test_samples
    counts: dict[str, int] = profile["class_counts"]
    return Inspection(fmt, profile["modality"], list(counts), counts, profile["sample_count"], profile)


def load_file(path: Path, fmt: str, limits: Limits) -> ImageData | TextData:
    """Load an inspected file of format `fmt` into arrays, with the same parsing and checks as inspect_file."""
    samples, _ = _accumulated(path, fmt, limits, keep=True)
    return samples.data(limits)
