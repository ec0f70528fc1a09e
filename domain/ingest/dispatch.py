"""Inspecting (validate and profile) and loading an uploaded dataset, one parser per format for both."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from domain.errors import DatasetRejected
from domain.ingest.accumulate import ImageAccumulator, TextAccumulator
from domain.ingest.archive import SafeZip
from domain.ingest.arrays import label_names, npz_stream, read_npz
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
        loaded = read_npz(path, limits)
        plan = plan_resize(Counter({loaded.x.shape[1:3]: loaded.x.shape[0]}), limits.resize)
        images = ImageAccumulator(keep, plan)
        x = loaded.x if plan.target is None else fit_pixels(loaded.x, plan.target)
        images.add(label_names(loaded.labels), x, x.shape[1:3] != loaded.x.shape[1:3])
        return images, loaded.test_samples
    if fmt == "npz":  # inspecting: batch by batch, so an upload's validation never holds it whole
        with npz_stream(path, limits) as npz:
            plan = plan_resize(Counter({npz.source: npz.samples}), limits.resize)
            images = ImageAccumulator(keep, plan)
            resized = plan.target is not None and plan.target != npz.source
            for labels, x in npz.batches(plan.target):
                images.add(label_names(labels), x, resized)
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
    raise DatasetRejected(reason, detail) with a user-facing detail when the dataset is refused. Holds a bounded
    amount of the file at a time, whatever its size (docs/api.md, "Bounded memory")."""
    fmt = detect_format(path, filename, limits)
    if limits.resize is not None and max(limits.resize) > limits.max_resize_side:
        raise DatasetRejected("resize-too-large", f"a declared resize may be at most {limits.max_resize_side} "
                              f"pixels a side, not {limits.resize[0]}x{limits.resize[1]}")
    samples, test_samples = _accumulated(path, fmt, limits, keep=False)
    profile = {"format": fmt, **samples.profile(limits)}
    if test_samples is not None:
        profile["npz_test_samples"] = test_samples
    counts: dict[str, int] = profile["class_counts"]
    return Inspection(fmt, profile["modality"], list(counts), counts, profile["sample_count"], profile)


def load_file(path: Path, fmt: str, limits: Limits) -> ImageData | TextData:
    """Load an inspected file of format `fmt` into arrays, with the same parsing and checks as inspect_file but
    the per-image bounds, which keep inspecting in bounded memory (loading holds the whole dataset anyway): a
    dataset accepted before they were set still loads."""
    limits = replace(limits, max_image_pixels=2**62, max_image_file_bytes=2**62)
    samples, _ = _accumulated(path, fmt, limits, keep=True)
    return samples.data(limits)
