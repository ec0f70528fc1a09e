"""The model package: its files, as a zip and as a folder, read back with clear refusals; and network inputs."""

from __future__ import annotations

import errno
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from domain.errors import InvalidInput
from domain.ingest import TextEncoder
from domain.package import (
    Package,
    check_preprocessing,
    image_shape,
    network_input,
    package_files,
    package_zip,
    read_package,
    resize_policy,
    write_package,
)

SPEC = {"name": "tiny", "input": {"shape": [4, 4, 1]}, "nodes": [], "output": {"node": "x", "num_classes": 2}}
IMAGE = {"kind": "image", "shape": [4, 4, 1], "resize": "centre-crop"}
ENCODER = TextEncoder.fit(["a good film", "a bad film", "good plot"], max_length=6)
TEXT = {"kind": "text", "encoder": ENCODER.to_json()}
NAMES = ["README.md", "spec.json", "weights.safetensors", "model.onnx", "preprocessing.json", "labels.json",
         "metrics.json"]


def _files(preprocessing: dict[str, Any] = IMAGE) -> dict[str, bytes]:
    return package_files(SPEC, b"weights bytes", b"onnx bytes", preprocessing, ["cat", "dog"], {"accuracy": 0.5})


def _expected(preprocessing: dict[str, Any] = IMAGE) -> Package:
    return Package(spec=SPEC, onnx=b"onnx bytes", preprocessing=preprocessing, classes=["cat", "dog"],
                   metrics={"accuracy": 0.5}, weights=b"weights bytes", variant="dense")


def _without(files: dict[str, bytes], name: str, path: Path) -> Path:
    return write_package(path, {k: v for k, v in files.items() if k != name})


# ---- files, zip, folder ----------------------------------------------------------------------------------------


def test_package_files_are_the_seven_documented_files() -> None:
    files = _files()
    assert list(files) == NAMES
    assert json.loads(files["spec.json"]) == SPEC
    assert json.loads(files["labels.json"]) == ["cat", "dog"]
    assert json.loads(files["preprocessing.json"]) == IMAGE
    assert json.loads(files["metrics.json"]) == {"accuracy": 0.5}
    assert (files["weights.safetensors"], files["model.onnx"]) == (b"weights bytes", b"onnx bytes")
    assert "netsynth predict MODEL_DIR INPUT" in files["README.md"].decode()


@pytest.mark.parametrize("preprocessing", [IMAGE, TEXT])
def test_zip_round_trip(tmp_path: Path, preprocessing: dict[str, Any]) -> None:
    data = package_zip(_files(preprocessing))
    assert data == package_zip(_files(preprocessing))  # the same files make the same bytes
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == NAMES
        assert archive.testzip() is None
    path = tmp_path / "model.zip"
    path.write_bytes(data)
    assert read_package(path) == _expected(preprocessing)


@pytest.mark.parametrize("preprocessing", [IMAGE, TEXT])
def test_folder_round_trip(tmp_path: Path, preprocessing: dict[str, Any]) -> None:
    files = _files(preprocessing)
    folder = write_package(tmp_path / "out" / "model", files)
    assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES)
    assert all((folder / name).read_bytes() == data for name, data in files.items())
    assert read_package(folder) == _expected(preprocessing)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["model"]  # no staging folder is left behind


def test_write_package_fills_an_existing_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    write_package(tmp_path / "model", _files())
    assert read_package(tmp_path / "model") == _expected()
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(NAMES)  # no staging folder is left


def test_write_package_refuses_a_non_empty_folder_unless_asked(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "labels.json").write_text("[]")
    with pytest.raises(InvalidInput, match="is not empty"):
        write_package(folder, _files())
    assert sorted(p.name for p in folder.iterdir()) == ["labels.json", "notes.txt"]
    write_package(folder, _files(), overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine"  # files of other names are left alone
    assert read_package(folder) == _expected()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_write_package_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "model").write_text("x")
    with pytest.raises(InvalidInput, match="is a file"):
        write_package(tmp_path / "model", _files())


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    broken: dict[str, Any] = {**_files(), "metrics.json": None}  # not bytes: writing it fails half way
    with pytest.raises(TypeError):
        write_package(tmp_path / "model", broken)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(TypeError):
        write_package(tmp_path / "empty", broken)
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("errno_", [errno.ENOSPC, errno.EACCES])
def test_a_disk_that_refuses_the_write_is_invalid_input_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errno_: int
) -> None:
    def refuse(path: Path, _data: bytes) -> int:
        raise OSError(errno_, os.strerror(errno_), str(path))

    monkeypatch.setattr(Path, "write_bytes", refuse)
    with pytest.raises(InvalidInput) as caught:
        write_package(tmp_path / "model", _files())
    assert str(caught.value) == f"cannot write the model package to {tmp_path / 'model'}: {os.strerror(errno_)}"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match=r"cannot write the model package to .*empty"):
        write_package(tmp_path / "empty", _files())
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("name", ["", "a/b.json", "../x", ".hidden"])
def test_write_package_refuses_paths_as_file_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        write_package(tmp_path / "model", {name: b"x"})
    assert list(tmp_path.iterdir()) == []


def test_metrics_are_optional_and_readme_and_weights_are_not_needed(tmp_path: Path) -> None:
    files = {k: v for k, v in _files().items() if k not in {"metrics.json", "README.md", "weights.safetensors"}}
    assert read_package(write_package(tmp_path / "m", files)).metrics == {}


# ---- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["spec.json", "model.onnx", "preprocessing.json", "labels.json"])
def test_a_missing_file_is_named(tmp_path: Path, name: str) -> None:
    folder = _without(_files(), name, tmp_path / "model")
    with pytest.raises(InvalidInput, match=rf"is not a complete model package: it has no {name}"):
        read_package(folder)
    zipped = tmp_path / "model.zip"
    zipped.write_bytes(package_zip({k: v for k, v in _files().items() if k != name}))
    with pytest.raises(InvalidInput, match=rf"it has no {name}"):
        read_package(zipped)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("spec.json", b"{not json", "spec.json is not valid JSON"),
    ("spec.json", b"[1, 2]", "spec.json must hold a JSON object"),
    ("labels.json", b'{"a": 1}', "labels.json must hold a JSON list"),
    ("labels.json", b'["cat", "cat"]', "labels.json must be a list of distinct class names"),
    ("labels.json", b"[]", "labels.json must be a list of distinct class names"),
    ("labels.json", b"[1, 2]", "labels.json must be a list of distinct class names"),
    ("preprocessing.json", b'{"kind": "audio"}', "preprocessing.json: the kind of input must be"),
    ("preprocessing.json", b'{"kind": "image", "shape": [4, 4, 2]}', "height, width, 1 or 3"),
    ("preprocessing.json", b'{"kind": "text", "encoder": {"version": 99}}', "text encoder is malformed"),
    ("preprocessing.json", b'{"kind": "image", "shape": [4, 4, 1], "resize": "zoom"}', "resize policy must be one"),
    ("metrics.json", b"\xff\xfe", "metrics.json is not valid JSON"),
    ("model.onnx", b"", "it has no model.onnx"),
])
def test_a_malformed_file_is_named(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    folder = write_package(tmp_path / "model", {**_files(), name: content})
    with pytest.raises(InvalidInput, match=message) as caught:
        read_package(folder)
    assert str(folder) in str(caught.value)


def test_a_missing_path_or_a_file_that_is_no_zip_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        read_package(tmp_path / "nowhere")
    (tmp_path / "model.zip").write_bytes(b"not a zip at all")
    with pytest.raises(InvalidInput, match=r"is not a model package: .*not a valid zip"):
        read_package(tmp_path / "model.zip")


# ---- preprocessing and network inputs --------------------------------------------------------------------------


def test_image_shape_and_check_preprocessing() -> None:
    assert image_shape(IMAGE) == (4, 4, 1)
    assert image_shape({"kind": "image", "shape": [28, 20, 3]}) == (28, 20, 3)
    assert image_shape(TEXT) is None
    check_preprocessing(IMAGE)
    check_preprocessing(TEXT)
    for bad in ({}, {"kind": "image"}, {"kind": "image", "shape": [4, 4]}, {"kind": "image", "shape": [0, 4, 1]},
                {"kind": "image", "shape": [4.0, 4, 1]}, {"kind": "text"}, {"kind": "text", "encoder": []}):
        with pytest.raises(InvalidInput):
            check_preprocessing(bad)


def test_the_package_carries_the_resize_policy(tmp_path: Path) -> None:
    folder = write_package(tmp_path / "model", _files())
    assert json.loads((folder / "preprocessing.json").read_text())["resize"] == "centre-crop"
    assert resize_policy(read_package(folder).preprocessing) == "centre-crop"
    assert "centre-crop" in (folder / "README.md").read_text()
    assert resize_policy({"kind": "image", "shape": [4, 4, 1]}) == "stretch"  # packages made before the policy


def test_network_input_of_images_is_float32_raw_pixels() -> None:
    images = [np.full((4, 4, 1), v, dtype=np.uint8) for v in (0, 7, 255)]
    x = network_input(IMAGE, images=images)
    assert (x.dtype, x.shape) == (np.dtype(np.float32), (3, 4, 4, 1))
    np.testing.assert_array_equal(x, np.stack(images).astype(np.float32))
    np.testing.assert_array_equal(network_input(IMAGE, images=np.stack(images)), x)
    floats = np.random.default_rng(0).uniform(0, 1, (2, 4, 4, 1)).astype(np.float32)
    np.testing.assert_array_equal(network_input(IMAGE, images=floats), floats)  # an npz's floats pass as they are


def test_network_input_of_texts_is_the_encoders_ids() -> None:
    texts = ["a good film", "", "never seen words"]
    x = network_input(TEXT, texts=texts)
    assert (x.dtype, x.shape) == (np.dtype(np.int32), (3, 6 + ENCODER.bag_length))  # word ids, then the n-gram bag
    np.testing.assert_array_equal(x, ENCODER.encode(texts))
    assert x[0, :6].tolist() == [2 + ENCODER.to_json()["words"].index(w) for w in ("a", "good", "film")] + [0, 0, 0]
    assert np.all(x[0, 6:] >= 0) and np.count_nonzero(x[0, 6:]) > 3


@pytest.mark.parametrize(("preprocessing", "kwargs", "message"), [
    (IMAGE, {"texts": ["hi"]}, "takes images, not texts"),
    (TEXT, {"images": [np.zeros((4, 4, 1), np.uint8)]}, "takes texts, not images"),
    (IMAGE, {}, "no images"),
    (IMAGE, {"images": []}, "no images"),
    (TEXT, {"texts": []}, "no texts"),
    (IMAGE, {"images": [np.zeros((4, 4, 1), np.uint8), np.zeros((5, 4, 1), np.uint8)]}, r"4x4x1 images.*5x4x1"),
    (IMAGE, {"images": np.zeros((2, 4, 4, 3), np.uint8)}, r"takes 4x4x1 images .*not 4x4x3"),
])
def test_network_input_refuses_what_the_model_cannot_take(
    preprocessing: dict[str, Any], kwargs: dict[str, Any], message: str,
) -> None:
    with pytest.raises(InvalidInput, match=message):
        network_input(preprocessing, **kwargs)


def test_a_report_travels_in_its_folder_and_comes_back_with_the_weights(tmp_path: Path) -> None:
    """The report's files go under report/ (folder and zip alike) and the weights are read back with their variant;
    a name outside report/ with a folder is refused before anything is written."""
    files = package_files(SPEC, b"nsz bytes", b"onnx bytes", IMAGE, ["cat", "dog"], {}, variant="compressed",
                          report={"report.json": b"{}", "report.html": b"<html>", "row3_gradcam.png": b"png"})
    assert {"report/report.json", "report/report.html", "report/row3_gradcam.png"} <= set(files)
    folder = write_package(tmp_path / "pkg", files)
    assert (folder / "report" / "row3_gradcam.png").read_bytes() == b"png"
    zipped = tmp_path / "pkg.zip"
    zipped.write_bytes(package_zip(files))
    for path in (folder, zipped):
        package = read_package(path)
        assert (package.weights, package.variant) == (b"nsz bytes", "compressed")
    with pytest.raises(ValueError, match="plain file name"):
        write_package(tmp_path / "bad", {"other/x.png": b"x"})
    assert not (tmp_path / "bad").exists()
