"""`netsynth predict MODEL_DIR INPUT --output preds.csv` on real exported networks: the same predictions as the
API's predict endpoint, from a zip or folder of images, an npz or a CSV of texts; clear errors on bad input."""

from __future__ import annotations

import argparse
import csv
import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.cli import build_parser, main
from api.predict_cli import add_predict_parser
from domain.errors import DatasetRejected, InvalidInput
from domain.ingest.resize import fit_pixels
from domain.package import package_files, package_zip, write_package
from infra.settings import Settings
from store.models import TrainedModel
from tests.api.conftest import Account
from tests.api.model_inputs import pixels as _pixels
from tests.api.model_inputs import png as _png
from tests.datasets import write_npz, write_text_csv, write_zip
from tests.nets import IMAGE_CLASSES, TEXT_CLASSES, Net, insert_model

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["a good film", "bad plot", "words never seen before", "GOOD good good acting", "fine, bad acting"]


def _package(net: Net, folder: Path) -> Path:
    return write_package(folder, package_files(net.spec, net.weights, net.onnx, net.preprocessing, net.classes,
                                               {"accuracy": 0.875}))


def _predict(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[list[dict[str, str]], list[str]]:
    """Parse argv as `netsynth predict ...` does and run it; the CSV's rows and the printed lines."""
    parser = argparse.ArgumentParser(prog="netsynth")
    add_predict_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["predict", *map(str, argv)])
    args.func(Settings(), args)
    with Path(args.output).open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, capsys.readouterr().out.splitlines()


async def _api(
    client: httpx.AsyncClient, account: Account, model: TrainedModel, *, pngs: list[bytes] | None = None,
    texts: list[str] | None = None,
) -> tuple[list[str], np.ndarray]:
    """The predict endpoint's labels and probabilities."""
    url = f"/api/v1/models/{model.id}/predict"
    if pngs is not None:
        files = [("files", (f"{i}.png", png, "image/png")) for i, png in enumerate(pngs)]
        r = await client.post(url, headers=account.auth, files=files)
    else:
        r = await client.post(url, headers=account.auth, json={"texts": texts})
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    return [p["label"] for p in predictions], np.array([p["probabilities"] for p in predictions])


def _assert_same(rows: list[dict[str, str]], classes: list[str], labels: list[str], proba: np.ndarray) -> None:
    assert list(rows[0]) == ["input", "predicted", *(f"p_{c}" for c in classes)]
    assert [row["predicted"] for row in rows] == labels
    got = np.array([[float(row[f"p_{c}"]) for c in classes] for row in rows])
    np.testing.assert_allclose(got, proba, rtol=1e-6, atol=1e-7)
    assert len(set(labels)) > 1  # the comparison can tell classes apart


# ---- the same predictions as the API ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_zip_of_class_folders_matches_the_api_and_prints_the_accuracy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: httpx.AsyncClient, account: Account,
    factory: sessionmaker[Session], image_net: Net,
) -> None:
    pngs = [_png(p) for p in _pixels(8)]
    labels, proba = await _api(client, account, insert_model(factory, account.user, image_net), pngs=pngs)
    truth = [labels[i] if i % 2 else IMAGE_CLASSES[0] for i in range(8)]  # a right answer, then maybe wrong ones
    names = [f"{label}/img{i}.png" for i, label in enumerate(truth)]
    data = write_zip(tmp_path / "in.zip", zip(names, pngs, strict=True))
    rows, out = _predict(capsys, _package(image_net, tmp_path / "model"), data, "--output", tmp_path / "p.csv")
    _assert_same(rows, IMAGE_CLASSES, labels, proba)
    assert [row["input"] for row in rows] == names
    right = sum(t == p for t, p in zip(truth, labels, strict=True))
    assert out == [f"predicted 8 images with {tmp_path / 'model'} (3 classes) into {tmp_path / 'p.csv'}",
                   f"accuracy {right / 8:.4f} ({right}/8 labelled inputs)"]


@pytest.mark.anyio
async def test_a_folder_of_images_matches_the_api_without_an_accuracy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: httpx.AsyncClient, account: Account,
    factory: sessionmaker[Session], image_net: Net,
) -> None:
    pngs = [_png(p) for p in _pixels(6, seed=5)]
    labels, proba = await _api(client, account, insert_model(factory, account.user, image_net), pngs=pngs)
    folder = tmp_path / "photos"
    folder.mkdir()
    for i, png in enumerate(pngs):
        (folder / f"{i}.png").write_bytes(png)
    rows, out = _predict(capsys, _package(image_net, tmp_path / "model"), folder, "--output", tmp_path / "p.csv",
                         "--batch-size", "4")  # two runs, the second one short
    _assert_same(rows, IMAGE_CLASSES, labels, proba)
    assert [row["input"] for row in rows] == [f"{i}.png" for i in range(6)]
    assert len(out) == 1 and out[0].startswith("predicted 6 images")


@pytest.mark.anyio
async def test_an_npz_matches_the_api_given_the_same_pixels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: httpx.AsyncClient, account: Account,
    factory: sessionmaker[Session], image_net: Net,
) -> None:
    pixels = _pixels(7, seed=2)
    labels, proba = await _api(client, account, insert_model(factory, account.user, image_net),
                               pngs=[_png(p) for p in pixels])
    data = write_npz(tmp_path / "in.npz", x=pixels[..., 0], y=np.array(["ant"] * 7))
    rows, out = _predict(capsys, _package(image_net, tmp_path / "model"), data, "--output", tmp_path / "p.csv")
    _assert_same(rows, IMAGE_CLASSES, labels, proba)
    assert [row["input"] for row in rows] == [f"x[{i}]" for i in range(7)]
    right = labels.count("ant")
    assert out[1] == f"accuracy {right / 7:.4f} ({right}/7 labelled inputs)"


@pytest.mark.anyio
async def test_a_csv_of_texts_matches_the_api_with_the_native_zip_as_the_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: httpx.AsyncClient, account: Account,
    factory: sessionmaker[Session], text_net: Net,
) -> None:
    model = insert_model(factory, account.user, text_net)
    labels, proba = await _api(client, account, model, texts=TEXTS)
    r = await client.get(f"/api/v1/models/{model.id}/download?format=native", headers=account.auth)
    native = tmp_path / "model.zip"
    native.write_bytes(r.content)
    data = write_text_csv(tmp_path / "in.csv", TEXTS, ["pos", "neg", "pos", "pos", "meh"])
    rows, out = _predict(capsys, native, data, "--output", tmp_path / "p.csv")
    _assert_same(rows, TEXT_CLASSES, labels, proba)
    assert [row["input"] for row in rows] == [f"line {i}" for i in range(2, 7)]
    right = sum(t == p for t, p in zip(["pos", "neg", "pos", "pos", "meh"], labels, strict=True))
    assert out[1] == (f"accuracy {right / 5:.4f} ({right}/5 labelled inputs); labels the model has no class for "
                      "count as wrong: meh")


def test_a_txt_of_unlabelled_texts_and_labels_the_model_does_not_know(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text_net: Net,
) -> None:
    model = _package(text_net, tmp_path / "model")
    data = tmp_path / "in.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rows, out = _predict(capsys, model, data, "--output", tmp_path / "p.csv")
    assert [row["input"] for row in rows] == [f"line {i}" for i in range(1, 6)]
    assert len(out) == 1
    data.write_text("".join(f"{text}\tsomething\n" for text in TEXTS), encoding="utf-8")
    _, out = _predict(capsys, model, data, "--output", tmp_path / "p.csv")
    assert out[1] == "no accuracy: the input's labels (something) are none of the model's classes"


@pytest.mark.anyio
async def test_raw_images_of_another_size_predict_as_the_pre_resized_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: httpx.AsyncClient, account: Account,
    factory: sessionmaker[Session], image_net: Net,
) -> None:
    raw = _pixels(5, (30, 45, 1), seed=8)
    pre = fit_pixels(raw, (8, 8))  # the model's 8x8, as ingest resizes
    labels, proba = await _api(client, account, insert_model(factory, account.user, image_net),
                               pngs=[_png(p) for p in pre])
    model = _package(image_net, tmp_path / "model")
    data = write_zip(tmp_path / "raw.zip", [(f"{i}.png", _png(p)) for i, p in enumerate(raw)])
    rows, _ = _predict(capsys, model, data, "--output", tmp_path / "p.csv")
    _assert_same(rows, IMAGE_CLASSES, labels, proba)
    npz = write_npz(tmp_path / "raw.npz", x=raw[..., 0])
    rows, _ = _predict(capsys, model, npz, "--output", tmp_path / "q.csv")
    _assert_same(rows, IMAGE_CLASSES, labels, proba)


# ---- errors ---------------------------------------------------------------------------------------------------


def test_a_bad_model_dir_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_net: Net) -> None:
    data = write_zip(tmp_path / "in.zip", [("a.png", _png(_pixels(1)[0]))])
    with pytest.raises(InvalidInput, match=r"does not exist; give a model package folder or a native \.zip"):
        _predict(capsys, tmp_path / "nowhere", data)
    files = package_files(image_net.spec, image_net.weights, image_net.onnx, image_net.preprocessing,
                          image_net.classes, {})
    folder = write_package(tmp_path / "partial", {k: v for k, v in files.items() if k != "labels.json"})
    with pytest.raises(InvalidInput, match=r"partial is not a complete model package: it has no labels\.json"):
        _predict(capsys, folder, data)
    broken = write_package(tmp_path / "broken", {**files, "model.onnx": b"not an onnx graph"})
    with pytest.raises(InvalidInput, match=r"model\.onnx cannot be loaded"):
        _predict(capsys, broken, data, "--output", tmp_path / "p.csv")
    more = write_package(tmp_path / "more", {**files, "labels.json": b'["a", "b", "c", "d"]'})
    with pytest.raises(InvalidInput, match=r"model\.onnx gives 3 probabilities per input but labels\.json names 4"):
        _predict(capsys, more, data, "--output", tmp_path / "p.csv")
    assert not (tmp_path / "p.csv").exists()


def test_a_bad_input_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_net: Net) -> None:
    model = _package(image_net, tmp_path / "model")
    with pytest.raises(InvalidInput, match="holds texts; this model classifies images"):
        _predict(capsys, model, write_text_csv(tmp_path / "in.csv", ["hi"], ["a"]))
    with pytest.raises(DatasetRejected, match=r"cat/2\.png is not a readable PNG or JPEG image"):
        _predict(capsys, model, write_zip(tmp_path / "in.zip", [("cat/1.png", _png(_pixels(1)[0])),
                                                                ("cat/2.png", b"garbage")]))
    with pytest.raises(InvalidInput, match="does not exist"):
        _predict(capsys, model, tmp_path / "missing.zip")
    with pytest.raises(InvalidInput, match="batch size must be at least 1"):
        _predict(capsys, model, write_zip(tmp_path / "ok.zip", [("a.png", _png(_pixels(1)[0]))]),
                 "--batch-size", "0")
    with pytest.raises(InvalidInput, match=r"cannot write .*no-such-folder"):
        _predict(capsys, model, tmp_path / "ok.zip", "--output", tmp_path / "no-such-folder" / "p.csv")


def test_a_full_disk_is_a_one_line_error_that_leaves_the_output_as_it_was(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, image_net: Net
) -> None:
    model = _package(image_net, tmp_path / "model")
    data = write_zip(tmp_path / "in.zip", [(f"{i}.png", _png(p)) for i, p in enumerate(_pixels(3))])
    real_writer = csv.writer

    class FillsTheDisk:
        """A CSV writer whose disk fills up after the header."""

        def __init__(self, f: Any) -> None:
            self.writer, self.rows = real_writer(f), 0

        def writerow(self, row: list[str]) -> None:
            if self.rows:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.rows += 1
            self.writer.writerow(row)

    monkeypatch.setattr(csv, "writer", FillsTheDisk)
    output = tmp_path / "out" / "p.csv"
    output.parent.mkdir()
    for before in (None, "the previous predictions\n"):
        if before is not None:
            output.write_text(before)
        assert main(["predict", str(model), str(data), "--output", str(output)], settings=Settings()) == 2
        err = capsys.readouterr().err
        assert err == f"netsynth: error: cannot write {output}: No space left on device\n"
        assert [p.name for p in output.parent.iterdir()] == ([] if before is None else ["p.csv"])
        assert before is None or output.read_text() == before


# ---- the installed command -------------------------------------------------------------------------------------

WIRED = any(isinstance(action, argparse._SubParsersAction) and "predict" in action.choices
            for action in build_parser()._actions)


@pytest.mark.skipif(not WIRED, reason="`predict` is not registered in api.cli yet")
def test_the_netsynth_command_predicts_and_fails_with_exit_2(tmp_path: Path, image_net: Net) -> None:
    model = tmp_path / "model.zip"
    model.write_bytes(package_zip(package_files(image_net.spec, image_net.weights, image_net.onnx,
                                                image_net.preprocessing, image_net.classes, {})))
    data = write_zip(tmp_path / "in.zip", [(f"{i}.png", _png(p)) for i, p in enumerate(_pixels(3))])
    command = [sys.executable, "-m", "api.cli", "predict", str(model), str(data), "--output", str(tmp_path / "p.csv")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("predicted 3 images")
    with (tmp_path / "p.csv").open(encoding="utf-8") as f:
        assert [row["input"] for row in csv.DictReader(f)] == ["0.png", "1.png", "2.png"]
    done = subprocess.run([*command[:5], str(tmp_path / "nothing.zip")], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == f"netsynth: error: {tmp_path / 'nothing.zip'} does not exist"
