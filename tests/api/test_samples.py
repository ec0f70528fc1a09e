"""`/datasets/{id}/samples`: the first rows of each class in turn, with their labels and texts or the URL of their
image, which answers a PNG of the image as the model sees it; rows numbered as in the upload; owner-scoped."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from tests.api.conftest import Account, assert_problem, make_account
from tests.api.test_datasets import upload
from tests.datasets import png_bytes, write_npz, write_text_csv, write_zip

pytestmark = pytest.mark.anyio
URL = "/api/v1/datasets"


def _grey(value: int, height: int = 8, width: int = 8) -> np.ndarray:
    return np.full((height, width, 1), value, np.uint8)


@pytest.fixture
def pets(tmp_path: Path) -> Path:
    """cat/ and dog/ images, each one grey level, stored out of path order: row k is the k-th path sorted."""
    members = [(f"{label}/{i:02d}.png", png_bytes(_grey(value)))
               for label, base in (("dog", 100), ("cat", 10)) for i, value in enumerate(range(base, base + 7))]
    return write_zip(tmp_path / "pets.zip", reversed(members))


async def _dataset(client: httpx.AsyncClient, account: Account, path: Path, **fields: str) -> dict[str, Any]:
    r = await upload(client, account, path, **fields)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def _samples(client: httpx.AsyncClient, account: Account, dataset_id: str, **query: int) -> dict[str, Any]:
    r = await client.get(f"{URL}/{dataset_id}/samples", headers=account.auth, params=query)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _png(client: httpx.AsyncClient, account: Account, url: str) -> Image.Image:
    r = await client.get(url, headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(r.content), formats=["PNG"])
    image.load()
    return image


async def test_image_samples_take_each_class_in_turn_with_their_rows_and_pixels(
    client: httpx.AsyncClient, account: Account, pets: Path
) -> None:
    dataset = await _dataset(client, account, pets)
    body = await _samples(client, account, dataset["id"], limit=5)
    assert body["modality"] == "image"
    samples = body["samples"]
    assert [(s["index"], s["label"]) for s in samples] == [(0, "cat"), (7, "dog"), (1, "cat"), (8, "dog"), (2, "cat")]
    assert all(s["text"] is None for s in samples)
    for s in samples:
        assert s["image_url"] == f"{URL}/{dataset['id']}/samples/{s['index']}.png"
        image = await _png(client, account, s["image_url"])
        assert image.size == (8, 8) and image.mode == "L"
        expected = 10 + s["index"] if s["label"] == "cat" else 100 + s["index"] - 7
        assert set(np.asarray(image).ravel().tolist()) == {expected}
    assert await _samples(client, account, dataset["id"], limit=5) == body  # the same samples every time


async def test_the_default_is_twelve_and_no_more_than_the_dataset_holds(
    client: httpx.AsyncClient, account: Account, pets: Path
) -> None:
    dataset = await _dataset(client, account, pets)
    assert len((await _samples(client, account, dataset["id"]))["samples"]) == 12
    everything = (await _samples(client, account, dataset["id"], limit=64))["samples"]
    assert sorted(s["index"] for s in everything) == list(range(14))
    for limit in (0, 65):
        r = await client.get(f"{URL}/{dataset['id']}/samples", headers=account.auth, params={"limit": limit})
        assert_problem(r, 422)


async def test_an_image_is_shown_at_the_models_size_and_at_most_128_pixels(
    client: httpx.AsyncClient, account: Account, tmp_path: Path
) -> None:
    wide = np.zeros((90, 180, 3), np.uint8)
    wide[:, 60:120] = (255, 0, 0)  # a red middle third: the centre crop keeps it
    members = [(f"{c}/{i}.png", png_bytes(wide)) for c in ("a", "b") for i in range(5)]
    large = await _dataset(client, account, write_zip(tmp_path / "wide.zip", members), name="wide")
    image = await _png(client, account, f"{URL}/{large['id']}/samples/0.png")
    profile = large["profile"]["image"]
    assert image.size == (profile["width"], profile["height"]) == (64, 32)  # capped to 64 px at upload
    declared = await _dataset(client, account, write_zip(tmp_path / "sq.zip", members), name="sq", resize="200x200")
    image = await _png(client, account, f"{URL}/{declared['id']}/samples/3.png")
    assert image.size == (128, 128) and image.mode == "RGB"  # 200x200 as the model sees it, scaled to 128
    centre = np.asarray(image)[64, 64]
    assert centre[0] > 200 and centre[1] < 50  # the red middle, centre-cropped to a square


async def test_npz_samples_read_their_rows(client: httpx.AsyncClient, account: Account, tmp_path: Path) -> None:
    x = np.stack([_grey(3 * i, 6, 6) for i in range(30)])
    y = np.array([i % 3 for i in range(30)])
    dataset = await _dataset(client, account, write_npz(tmp_path / "d.npz", x=x, y=y))
    samples = (await _samples(client, account, dataset["id"], limit=4))["samples"]
    assert [(s["index"], s["label"]) for s in samples] == [(0, "0"), (1, "1"), (2, "2"), (3, "0")]
    image = await _png(client, account, f"{URL}/{dataset['id']}/samples/29.png")
    assert image.size == (6, 6) and set(np.asarray(image).ravel().tolist()) == {87}


async def test_text_samples_carry_their_texts(client: httpx.AsyncClient, account: Account, tmp_path: Path) -> None:
    texts = ["win cash now", "see you at lunch", "x" * 1500, "free prize inside", "call me later", "claim it",
             "meeting at noon", "you won a car", "running late", "cheap pills", "dinner tonight?", "act now"]
    labels = ["spam", "ham", "spam", "spam", "ham", "spam", "ham", "spam", "ham", "spam", "ham", "ham"]
    dataset = await _dataset(client, account, write_text_csv(tmp_path / "sms.csv", texts, labels))
    body = await _samples(client, account, dataset["id"], limit=5)
    assert body["modality"] == "text"
    assert [(s["index"], s["label"]) for s in body["samples"]] == [(1, "ham"), (0, "spam"), (4, "ham"), (2, "spam"),
                                                                    (6, "ham")]
    assert [s["text"] for s in body["samples"]] == ["see you at lunch", "win cash now", "call me later", "x" * 1000,
                                                    "meeting at noon"]
    assert all(s["image_url"] is None for s in body["samples"])
    r = await client.get(f"{URL}/{dataset['id']}/samples/0.png", headers=account.auth)
    assert assert_problem(r, 404)["reason"] == "sample-absent"


async def test_samples_are_the_owners_alone(
    client: httpx.AsyncClient, account: Account, pets: Path, factory: sessionmaker[Session]
) -> None:
    dataset = await _dataset(client, account, pets)
    other = make_account(factory, "eve@example.org")
    for path in (f"{URL}/{dataset['id']}/samples", f"{URL}/{dataset['id']}/samples/0.png"):
        assert_problem(await client.get(path, headers=other.auth), 404)
        assert_problem(await client.get(path), 401)
    missing = await client.get(f"{URL}/{dataset['id']}/samples/14.png", headers=account.auth)
    assert assert_problem(missing, 404)["reason"] == "sample-absent"
    assert_problem(await client.get(f"{URL}/{dataset['id']}/samples/-1.png", headers=account.auth), 422)
