"""A job's dataset turned into arrays: images at the size their profile recorded, preprocessing for prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from domain.ingest import Limits, inspect_file
from domain.ingest.resize import fit_pixels
from store.blobs import FileBlobStore
from store.models import Dataset
from synthesis.split import stratified_split
from tests.datasets import png_bytes, write_text_csv, write_zip
from workers.data import prepare, prepare_file, text_task

FEW = Limits(min_samples_per_class=2)


def _mixed_zip(path: Path) -> tuple[Path, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (10, 10, 3) if i < 3 else (30, 20, 3), dtype=np.uint8) for i in range(5)]
    return write_zip(path, [(f"{'ab'[i % 2]}/{i}.png", png_bytes(p)) for i, p in enumerate(images)]), images


def test_mixed_sizes_train_at_the_target_and_the_preprocessing_records_the_policy(tmp_path: Path) -> None:
    path, images = _mixed_zip(tmp_path / "d.zip")
    prepared = prepare_file(path, "image_zip", FEW)
    assert prepared.preprocessing == {"kind": "image", "shape": [10, 10, 3], "resize": "centre-crop"}
    assert prepared.task.x.shape == (5, 10, 10, 3)
    np.testing.assert_array_equal(prepared.task.x[3], fit_pixels(images[3][None], (10, 10))[0])


def test_a_job_loads_its_dataset_at_the_size_declared_at_upload(tmp_path: Path) -> None:
    path, images = _mixed_zip(tmp_path / "d.zip")
    declared = Limits(min_samples_per_class=2, resize=(6, 12))
    found = inspect_file(path, "d.zip", declared)
    blobs = FileBlobStore(tmp_path / "blobs")
    key = blobs.put_file(path, "datasets/d")
    dataset = Dataset(filename="d.zip", format=found.format, profile=found.profile, blob_key=key)
    prepared = prepare(dataset, blobs, FEW)  # the worker's limits know nothing of the declared size
    assert prepared.preprocessing["shape"] == [6, 12, 3]
    np.testing.assert_array_equal(prepared.task.x[0], fit_pixels(images[0][None], (6, 12))[0])
    np.testing.assert_array_equal(prepared.task.x[4], fit_pixels(images[4][None], (6, 12))[0])


def test_text_task_learns_its_vocabulary_from_the_engines_training_rows_only() -> None:
    texts = [f"common{i % 3} word{i} word{i}" for i in range(60)]  # each row has a word of its own, twice
    y = np.arange(60) % 2
    task, encoder = text_task(texts, y, 2, seed=3, test_fraction=0.2)
    split = stratified_split(y, 3, test_fraction=0.2, groups=task.groups)
    assert len(split.val) and len(split.test)
    vocabulary = encoder.to_json()["words"]
    assert {f"word{i}" for i in split.train} <= set(vocabulary)
    assert not {f"word{i}" for i in np.concatenate([split.val, split.test])} & set(vocabulary)
    assert np.array_equal(task.x, np.asarray(encoder.encode(texts), np.int32))
    assert task.bag_start > 0 and task.bag_vocab == encoder.ngram_buckets + 1


def test_a_text_task_carries_its_classes_raw_texts_in_row_order_and_their_encoder(tmp_path: Path) -> None:
    texts = [f"word{i} common{i % 3}" for i in range(40)]
    path = write_text_csv(tmp_path / "t.csv", texts, ["spam" if i % 2 else "ham" for i in range(40)])
    prepared = prepare_file(path, "csv", FEW)
    task = prepared.task
    assert list(task.texts or []) == texts and task.codec is not None and task.rows is None
    assert np.array_equal(task.codec.encode(texts), task.x)
    assert list(task.classes or []) == prepared.classes and sorted(prepared.classes) == ["ham", "spam"]


def test_images_number_their_rows_by_their_paths_in_the_archive_sorted(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    names = ["b/2.png", "a/0.png", "b/1.png", "a/3.png"]  # the archive's order, not its paths' sorted order
    images = [rng.integers(0, 256, (6, 6, 3), dtype=np.uint8) for _ in names]
    path = write_zip(tmp_path / "d.zip", [(n, png_bytes(p)) for n, p in zip(names, images, strict=True)])
    prepared = prepare_file(path, "image_zip", FEW)
    assert prepared.task.rows is not None and prepared.task.rows.tolist() == [3, 0, 2, 1]
    assert list(prepared.task.classes or []) == prepared.classes == ["a", "b"]
    for i, pixels in enumerate(images):  # x keeps the archive's order: rows says where each one was uploaded
        np.testing.assert_array_equal(prepared.task.x[i], pixels)
    ordered = write_zip(tmp_path / "s.zip", [(n, png_bytes(p)) for n, p in sorted(zip(names, images, strict=True),
                                                                                 key=lambda item: item[0])])
    assert prepare_file(ordered, "image_zip", FEW).task.rows is None
