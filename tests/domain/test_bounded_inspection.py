"""Inspecting an upload holds a bounded part of it, whatever it holds (issue 46, finding 1): each hostile file is
checked in a child process whose peak resident memory, past what it held before the check, is compared with a bound
well under the file's data. Before the fix, an npz of fewer than 1,024 rows was read whole, a zip member was joined
in memory (twice: once for its header, once to decode it), and every sample kept 32 bytes until the end."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest import Limits, inspect_file, load_file
from domain.ingest.profile import Duplicates
from domain.ingest.results import ImageData
from tests.datasets import write_npz, write_text_csv

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]
_CHILD = """
import json, sys
from pathlib import Path
from domain.errors import DatasetRejected
from domain.ingest import Limits, inspect_file

def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

path, limits = Path(sys.argv[1]), Limits(**json.loads(sys.argv[2]))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak resident size starts again from the current one
before = status_kib("VmRSS")
try:
    found = inspect_file(path, path.name, limits)
    result = {"accepted": found.sample_count}
except DatasetRejected as exc:
    result = {"refused": exc.reason, "detail": exc.detail}
result["growth"] = (status_kib("VmHWM") - before) * 1024
print(json.dumps(result))
"""


def inspected_in_child(path: Path, **limits: object) -> dict[str, object]:
    """Inspect `path` in a fresh interpreter: what it concluded and how many bytes its peak resident memory grew by
    while it checked the file (Linux's VmHWM, reset just before the check, past the VmRSS then; getrusage's
    ru_maxrss would not do: Linux carries the parent's peak into a child across fork and exec)."""
    run = subprocess.run([sys.executable, "-c", _CHILD, str(path), json.dumps(limits)], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert run.returncode == 0, run.stderr
    result: dict[str, object] = json.loads(run.stdout)
    return result


def test_an_npz_of_few_large_rows_is_read_in_strips(tmp_path: Path) -> None:
    """Four 2048x2048x3 images (48 MiB): the check holds a few MiB of them, not the rows (65 MiB before)."""
    row = (np.arange(2048 * 2048 * 3, dtype=np.uint32) % 251).astype(np.uint8).reshape(2048, 2048, 3)
    path = write_npz(tmp_path / "rows.npz", x=np.broadcast_to(row, (4, *row.shape)), y=np.arange(4) % 2)
    found = inspected_in_child(path, min_samples_per_class=2)
    assert found["accepted"] == 4
    assert isinstance(found["growth"], int) and found["growth"] < 16 * MIB, found


def test_the_profile_of_large_rows_read_in_strips_is_the_profile_of_the_whole_rows(tmp_path: Path) -> None:
    """Rows larger than a batch are resized strip by strip exactly as a whole row is: the profile inspection gives
    (pixel statistics, duplicates) is the one of the images that loading resizes whole."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (4, 1500, 1100, 3), dtype=np.uint8)
    x[3] = x[0]
    path = write_npz(tmp_path / "strips.npz", x=x, y=np.array([0, 1, 1, 0]))
    limits = Limits(min_samples_per_class=2)
    image = inspect_file(path, "strips.npz", limits).profile["image"]
    data = load_file(path, "npz", limits)
    assert isinstance(data, ImageData) and data.x.shape == (4, 64, 47, 3)
    values = data.x.reshape(-1, 3).astype(np.float64)
    assert image["mean"] == [round(float(v), 6) for v in values.mean(axis=0)]
    assert image["std"] == [round(float(v), 6) for v in values.std(axis=0)]
    assert inspect_file(path, "strips.npz", limits).profile["duplicates"] == {"count": 1, "conflicting": 0}


def test_a_million_small_samples_keep_no_memory_each(tmp_path: Path) -> None:
    """A million 4x4 images: labels are counted, not kept, and the duplicate keys spill to a temporary file past
    Duplicates.SPILL_KEYS (54 MiB before: 32 bytes a sample and a sorted copy)."""
    n = 1_000_000
    x = np.random.default_rng(0).integers(0, 256, (n, 4, 4), dtype=np.uint8)
    x[n - 1] = x[0]
    path = write_npz(tmp_path / "many.npz", x=x, y=np.arange(n) % 2)
    del x
    found = inspected_in_child(path)
    assert found["accepted"] == n
    assert isinstance(found["growth"], int) and found["growth"] < 32 * MIB, found


def test_spilled_duplicate_keys_count_as_the_ones_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Duplicates and conflicting labels found across spilled parts are the ones found in memory."""
    rng = np.random.default_rng(1)
    inputs = [bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(2000)]
    samples = [(inputs[i % 1500], str(i % 3 if i % 7 else 0)) for i in range(3000)]

    def counted() -> dict[str, int]:
        duplicates = Duplicates()
        for key, label in samples:
            duplicates.add(key, label)
        return duplicates.summary()

    held = counted()
    monkeypatch.setattr(Duplicates, "SPILL_KEYS", 64)
    assert counted() == held and held["count"] == 1500 and held["conflicting"] > 0


def test_a_million_texts_keep_no_memory_each(tmp_path: Path) -> None:
    """The character and word counts of texts are kept as counts of each length, not one entry a text."""
    n = 1_000_000
    path = write_text_csv(tmp_path / "many.csv", [f"t{i} w" for i in range(n)], [str(i % 3) for i in range(n)])
    found = inspected_in_child(path)
    assert found["accepted"] == n
    assert isinstance(found["growth"], int) and found["growth"] < 32 * MIB, found


def test_a_zip_member_is_decoded_as_it_streams(tmp_path: Path) -> None:
    """Two 2048x2048 noise PNGs of 12 MiB each: the size is read from the first bytes and the image decoded from the
    member's stream, never the member joined in memory (57 MiB before)."""
    noise = np.random.default_rng(0).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "PNG", compress_level=1)
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for label in "ab":
            archive.writestr(f"{label}/1.png", buffer.getvalue())
    found = inspected_in_child(path, min_samples_per_class=1)
    assert found["accepted"] == 2
    assert isinstance(found["growth"], int) and found["growth"] < 40 * MIB, found


def header_only_npz(path: Path, shape: tuple[int, ...], fortran: bool = False) -> Path:
    """An npz whose 'x' declares `shape` (uint8) but holds none of its data, and a 'y' of as many labels."""
    with zipfile.ZipFile(path, "w") as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": fortran, "shape": shape})
        archive.writestr("x.npy", header.getvalue())
        labels = io.BytesIO()
        np.save(labels, np.arange(shape[0]) % 2)
        archive.writestr("y.npy", labels.getvalue())
    return path


def test_rows_over_the_per_image_limit_are_refused_from_the_header(tmp_path: Path) -> None:
    """A 4096x4096 image has more pixels than one image may: refused before a byte of it is read."""
    path = header_only_npz(tmp_path / "huge.npz", (10, 4096, 4096, 3))
    with pytest.raises(DatasetRejected) as refused:
        inspect_file(path, "huge.npz", Limits())
    assert refused.value.reason == "image-too-large" and "pixels" in refused.value.detail


def test_a_fortran_ordered_npz_is_refused_with_a_way_out(tmp_path: Path) -> None:
    """A column-major array cannot be read an image at a time: refused, saying how to save it."""
    path = write_npz(tmp_path / "f.npz", x=np.asfortranarray(np.zeros((10, 8, 8, 3), np.uint8)), y=np.arange(10) % 2)
    with pytest.raises(DatasetRejected) as refused:
        inspect_file(path, "f.npz", Limits())
    assert refused.value.reason == "malformed-npz" and "ascontiguousarray" in refused.value.detail


def test_a_declared_resize_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "r.npz", x=np.zeros((10, 8, 8), np.uint8), y=np.arange(10) % 2)
    with pytest.raises(DatasetRejected) as refused:
        inspect_file(path, "r.npz", Limits(resize=(4000, 4000)))
    assert refused.value.reason == "resize-too-large"
