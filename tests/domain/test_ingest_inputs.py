"""Inputs to predict on: images from a zip, a folder or an npz, texts from CSV / TSV / TXT, labels optional."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from domain.errors import DatasetRejected, InvalidInput
from domain.ingest import Inputs, Limits, decode_image, load_inputs
from tests.datasets import png_bytes, write_image_zip, write_npz, write_text_csv, write_text_tsv, write_zip

SHAPE = (8, 8, 1)


def _images(n: int, shape: tuple[int, ...] = SHAPE, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def _write_folder(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _assert_images(inputs: Inputs, expected: np.ndarray) -> None:
    assert inputs.texts is None
    assert inputs.images is not None
    assert inputs.images.dtype == expected.dtype
    np.testing.assert_array_equal(inputs.images, expected)
    assert len(inputs.names) == len(expected)


# ---- images in a zip -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", [None, "test-set"])
def test_a_zip_of_class_folders_gives_labels(tmp_path: Path, root: str | None) -> None:
    x, y = _images(6), np.array([0, 1, 2, 0, 1, 2])
    inputs = load_inputs(write_image_zip(tmp_path / "d.zip", x, y, ["ant", "bee", "cow"], root=root), SHAPE)
    _assert_images(inputs, x)
    assert inputs.labels == ["ant", "bee", "cow", "ant", "bee", "cow"]
    assert inputs.names == [f"{label}/{i}.png" for i, label in enumerate(inputs.labels)]


def test_a_flat_zip_gives_no_labels_and_keeps_the_archive_order(tmp_path: Path) -> None:
    x = _images(3)
    names = ["b.png", "a.png", "c.png"]
    path = write_zip(tmp_path / "d.zip", [*zip(names, [png_bytes(p) for p in x], strict=True),
                                          ("__MACOSX/._a.png", b"junk"), (".DS_Store", b"junk")])
    inputs = load_inputs(path, SHAPE)
    _assert_images(inputs, x)
    assert (inputs.labels, inputs.names) == (None, names)


def test_mixed_depths_give_no_labels(tmp_path: Path) -> None:
    x = _images(3)
    names = ["cat/1.png", "2.png", "cat/deep/3.png"]
    inputs = load_inputs(write_zip(tmp_path / "d.zip", zip(names, [png_bytes(p) for p in x], strict=True)), SHAPE)
    _assert_images(inputs, x)
    assert (inputs.labels, inputs.names) == (None, names)


def test_images_are_converted_and_resized_to_the_models_shape(tmp_path: Path) -> None:
    blobs = [png_bytes(_images(1, (20, 12, 3), seed=1)[0]), png_bytes(_images(1, (8, 8, 3), seed=2)[0], "JPEG")]
    path = write_zip(tmp_path / "d.zip", [("x/a.png", blobs[0]), ("y/b.jpg", blobs[1])])
    inputs = load_inputs(path, SHAPE)
    _assert_images(inputs, np.stack([decode_image(b, SHAPE, Limits()) for b in blobs]))
    assert inputs.labels == ["x", "y"]
    rgb = load_inputs(path, (5, 6, 3))
    assert rgb.images is not None and rgb.images.shape == (2, 5, 6, 3)


def test_a_bad_image_is_refused_by_name(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "d.zip", [("cat/ok.png", png_bytes(_images(1)[0])), ("cat/bad.png", b"nope")])
    with pytest.raises(DatasetRejected, match=r"cat/bad\.png is not a readable PNG or JPEG") as caught:
        load_inputs(path, SHAPE)
    assert caught.value.reason == "undecodable-image"


def test_an_unsafe_or_empty_zip_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetRejected) as caught:
        load_inputs(write_zip(tmp_path / "evil.zip", [("../up.png", png_bytes(_images(1)[0]))]), SHAPE)
    assert caught.value.reason == "path-traversal"
    with pytest.raises(DatasetRejected, match="holds no images"):
        load_inputs(write_zip(tmp_path / "empty.zip", [(".DS_Store", b"x")]), SHAPE)


# ---- images in a folder ----------------------------------------------------------------------------------------


def test_a_folder_of_class_folders_gives_labels_recursively_in_sorted_order(tmp_path: Path) -> None:
    x = _images(4)
    folder = _write_folder(tmp_path / "in", {"dog/2.png": png_bytes(x[2]), "cat/1.png": png_bytes(x[1]),
                                             "cat/0.png": png_bytes(x[0]), "dog/3.png": png_bytes(x[3]),
                                             ".hidden/9.png": b"skipped", "dog/.DS_Store": b"skipped"})
    inputs = load_inputs(folder, SHAPE)
    _assert_images(inputs, x)
    assert inputs.labels == ["cat", "cat", "dog", "dog"]
    assert inputs.names == ["cat/0.png", "cat/1.png", "dog/2.png", "dog/3.png"]


def test_a_flat_folder_gives_no_labels(tmp_path: Path) -> None:
    x = _images(2)
    inputs = load_inputs(_write_folder(tmp_path / "in", {"a.png": png_bytes(x[0]), "b.png": png_bytes(x[1])}), SHAPE)
    _assert_images(inputs, x)
    assert (inputs.labels, inputs.names) == (None, ["a.png", "b.png"])


def test_a_folder_with_a_stray_file_or_no_images_is_refused(tmp_path: Path) -> None:
    folder = _write_folder(tmp_path / "in", {"a.png": png_bytes(_images(1)[0]), "notes.txt": b"hello"})
    with pytest.raises(DatasetRejected, match=r"notes\.txt is not a readable PNG or JPEG"):
        load_inputs(folder, SHAPE)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetRejected, match="holds no images"):
        load_inputs(tmp_path / "empty", SHAPE)


# ---- images in an npz ------------------------------------------------------------------------------------------


def test_an_npz_with_labels(tmp_path: Path) -> None:
    x = _images(5)
    inputs = load_inputs(write_npz(tmp_path / "d.npz", x=x, y=np.array([3, 1, 3, 0, 1])), SHAPE)
    _assert_images(inputs, x)
    assert inputs.labels == ["3", "1", "3", "0", "1"]
    assert inputs.names == [f"x[{i}]" for i in range(5)]


def test_an_npz_without_labels_and_without_a_channel_axis(tmp_path: Path) -> None:
    x = _images(3)
    inputs = load_inputs(write_npz(tmp_path / "d.npz", x=x[..., 0]), SHAPE)
    _assert_images(inputs, x)
    assert inputs.labels is None


def test_an_npz_of_floats_keeps_them(tmp_path: Path) -> None:
    x = np.random.default_rng(0).uniform(0, 1, (2, *SHAPE))
    inputs = load_inputs(write_npz(tmp_path / "d.npz", x=x, y=np.array(["a", "b"])), SHAPE)
    _assert_images(inputs, x.astype(np.float32))
    assert inputs.labels == ["a", "b"]


def test_an_npz_of_another_shape_or_without_x_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"'x' holds 8x8x3 images; the model takes 8x8x1"):
        load_inputs(write_npz(tmp_path / "a.npz", x=_images(2, (8, 8, 3))), SHAPE)
    with pytest.raises(DatasetRejected, match=r"needs an array 'x' of images .*found: images") as caught:
        load_inputs(write_npz(tmp_path / "b.npz", images=_images(2)), SHAPE)
    assert caught.value.reason == "malformed-npz"
    with pytest.raises(DatasetRejected, match=r"'y' has 1 labels for 2 samples"):
        load_inputs(write_npz(tmp_path / "c.npz", x=_images(2), y=np.array([1])), SHAPE)


# ---- texts ----------------------------------------------------------------------------------------------------


def test_a_csv_with_labels(tmp_path: Path) -> None:
    texts = ["a good film", 'with "quotes", and commas', "multi\nline"]
    inputs = load_inputs(write_text_csv(tmp_path / "d.csv", texts, ["pos", "neg", " pos "]), None)
    assert (inputs.images, inputs.texts, inputs.labels) == (None, texts, ["pos", "neg", "pos"])
    assert inputs.names == ["line 2", "line 3", "line 5"]


@pytest.mark.parametrize(("name", "content", "texts", "lines"), [
    ("d.csv", "id,Text\n1,hello there\n2,general kenobi\n", ["hello there", "general kenobi"], [2, 3]),
    ("d.txt", "first text\n\nsecond, with a comma\r\n", ["first text", "second, with a comma"], [1, 3]),
])
def test_texts_without_labels(tmp_path: Path, name: str, content: str, texts: list[str], lines: list[int]) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    inputs = load_inputs(tmp_path / name, None)
    assert (inputs.texts, inputs.labels, inputs.names) == (texts, None, [f"line {n}" for n in lines])


def test_a_csv_without_a_text_column_or_with_an_empty_label_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("sentence,label\nhi,a\n", encoding="utf-8")
    with pytest.raises(DatasetRejected, match=r"must have a 'text' column \(and optionally 'label'\)"):
        load_inputs(path, None)
    path.write_text("text,label\nhi,a\nho,\n", encoding="utf-8")
    with pytest.raises(DatasetRejected, match="line 3 has an empty label"):
        load_inputs(path, None)


@pytest.mark.parametrize("suffix", [".tsv", ".txt"])
def test_a_tsv_with_labels(tmp_path: Path, suffix: str) -> None:
    inputs = load_inputs(write_text_tsv(tmp_path / f"d{suffix}", ["good", "a\ttabbed text"], ["pos", "neg"]), None)
    assert (inputs.texts, inputs.labels, inputs.names) == (["good", "a\ttabbed text"], ["pos", "neg"],
                                                           ["line 1", "line 2"])


def test_a_tsv_labelling_some_lines_only_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.tsv"
    path.write_text("one\tpos\ntwo\nthree\tneg\n", encoding="utf-8")
    with pytest.raises(DatasetRejected, match="line 2 has no label while line 1 has one") as caught:
        load_inputs(path, None)
    assert caught.value.reason == "malformed-tsv"


def test_an_empty_text_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DatasetRejected, match="holds no texts"):
        load_inputs(path, None)


# ---- the wrong kind of input --------------------------------------------------------------------------------------


def test_the_wrong_kind_or_a_missing_input_is_refused(tmp_path: Path) -> None:
    csv = write_text_csv(tmp_path / "d.csv", ["hi"], ["a"])
    with pytest.raises(InvalidInput, match="holds texts; this model classifies images"):
        load_inputs(csv, SHAPE)
    images = write_image_zip(tmp_path / "d.zip", _images(1), np.array([0]))
    with pytest.raises(InvalidInput, match="holds images; this model classifies texts"):
        load_inputs(images, None)
    with pytest.raises(InvalidInput, match="holds images; this model classifies texts"):
        load_inputs(tmp_path, None)
    with pytest.raises(InvalidInput, match="does not exist"):
        load_inputs(tmp_path / "nowhere.zip", SHAPE)
    (tmp_path / "d.bin").write_bytes(b"x")
    with pytest.raises(DatasetRejected, match=r"unknown file type \.bin"):
        load_inputs(tmp_path / "d.bin", SHAPE)
