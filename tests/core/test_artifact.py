"""The compressed model format: exact round trips, packed sizes, and refusal of bytes it did not write."""

from __future__ import annotations

import json
import lzma
import math
import zlib
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from core import artifact, packing, tree
from core.checkpoint import variable_shapes
from core.errors import CheckpointError
from core.graph import validate
from core.reparam import Reparam, materialise, quantise, trainable
from core.spec import Spec


def cnn() -> Spec:
    return Spec.from_dict({"input": {"shape": [8, 8, 1]}, "output": {"node": "logits", "num_classes": 3}, "nodes": [
        {"id": "c1", "op": "conv2d", "inputs": ["input"], "params": {"filters": 8}},
        {"id": "bn", "op": "batch_norm", "inputs": ["c1"]},
        {"id": "r", "op": "activation", "inputs": ["bn"], "params": {"fn": "relu"}},
        {"id": "flat", "op": "flatten", "inputs": ["r"]},
        {"id": "h", "op": "dense", "inputs": ["flat"], "params": {"units": 40}},
        {"id": "logits", "op": "dense", "inputs": ["h"], "params": {"units": 3}}]})


def compressed_model(density: float = 0.1, k: int = 16) -> tuple[Spec, dict[str, Any], Reparam]:
    """Random variables with h/kernel pruned and shared, c1/kernel shared, logits/kernel pruned only."""
    spec = cnn()
    rng = np.random.default_rng(0)
    variables: dict[str, Any] = {}
    for kind, shapes in variable_shapes(validate(spec)).items():
        variables[kind] = tree.unflatten({p: jnp.asarray(rng.normal(size=s).astype(np.float32))
                                          for p, s in shapes.items()})
    params = tree.flatten(variables["params"])
    masks = {"h/kernel": jnp.asarray((rng.random(params["h/kernel"].shape) < density).astype(np.float32)),
             "logits/kernel": jnp.asarray((rng.random(params["logits/kernel"].shape) < 0.5).astype(np.float32))}
    indices = {p: quantise(params[p], k, mask=masks.get(p))[1] for p in ("h/kernel", "c1/kernel")}
    reparam = Reparam(masks, indices, {"h/kernel": k, "c1/kernel": k})
    variables["params"] = materialise(trainable(variables["params"], reparam), reparam)
    return spec, variables, reparam


def bits(x: Any) -> bytes:
    return np.asarray(x, np.float32).tobytes()


def test_round_trip_is_bit_exact_with_masks_codebooks_and_batch_stats() -> None:
    spec, variables, reparam = compressed_model()
    decoded = artifact.decode(artifact.encode(spec, variables, reparam))
    assert decoded.spec.to_json() == spec.to_json()
    for kind in ("params", "batch_stats"):
        want, got = tree.flatten(variables[kind]), tree.flatten(decoded.variables[kind])
        assert want.keys() == got.keys()
        for path in want:
            assert bits(want[path]) == bits(got[path]), path
    assert decoded.reparam is not None
    assert set(decoded.reparam.masks) == set(reparam.masks)
    for path, mask in reparam.masks.items():
        np.testing.assert_array_equal(np.asarray(decoded.reparam.masks[path]), np.asarray(mask))
    assert dict(decoded.reparam.sizes) == dict(reparam.sizes)
    for path, idx in reparam.indices.items():
        live = np.asarray(reparam.masks[path]) != 0 if path in reparam.masks else slice(None)
        np.testing.assert_array_equal(np.asarray(decoded.reparam.indices[path])[live], np.asarray(idx)[live])


def test_negative_zero_and_unmasked_exact_zeros_survive() -> None:
    spec, variables, _ = compressed_model()
    flat = tree.flatten(variables["params"])
    kernel = np.asarray(flat["h/kernel"]).copy()
    kernel[0, :3] = [-0.0, 0.0, np.float32(1e-38)]
    flat["h/kernel"] = kernel
    variables["params"] = tree.unflatten(flat)
    decoded = artifact.decode(artifact.encode(spec, variables))
    assert bits(tree.flatten(decoded.variables["params"])["h/kernel"]) == bits(kernel)


def test_shared_sparse_layer_costs_about_its_packed_bits() -> None:
    spec, variables, reparam = compressed_model(density=0.05, k=16)
    size = len(artifact.encode(spec, variables, reparam))
    dense = 4 * sum(np.size(a) for kind in variables.values() for a in tree.flatten(kind).values())
    h = int(np.count_nonzero(np.asarray(reparam.masks["h/kernel"])))
    assert h * 4 / 8 < size < dense / 8  # at most 4 bits per kept weight plus masks, the rest, the spec
    plain = len(artifact.encode(spec, variables, Reparam(reparam.masks)))
    assert size < plain  # sharing pays


def test_gap_coded_masks_beat_bitmaps_when_sparse_and_both_round_trip() -> None:
    rng = np.random.default_rng(3)
    sparse = rng.random(100_000) < 0.002
    assert len(packing.pack_gaps(sparse)) < len(packing.pack_bitmap(sparse))
    dense = rng.random(1000) < 0.7
    assert len(packing.pack_bitmap(dense)) < len(packing.pack_gaps(dense))
    for live in (sparse, dense, np.zeros(17, bool), np.ones(9, bool)):
        np.testing.assert_array_equal(packing.unpack_gaps(packing.pack_gaps(live), live.size), live)
        np.testing.assert_array_equal(packing.unpack_bitmap(packing.pack_bitmap(live), live.size), live)


@pytest.mark.parametrize("k", [1, 2, 3, 16, 200, 256])
def test_indices_take_ceil_log2_k_bits(k: int) -> None:
    values = np.random.default_rng(k).integers(0, k, 1001)
    packed = packing.pack_bits(values, packing.bits_for(k))
    assert len(packed) == math.ceil(1001 * math.ceil(math.log2(k)) / 8)
    np.testing.assert_array_equal(packing.unpack_bits(packed, packing.bits_for(k), 1001), values)
    for data in (b"", bytes(range(256)) * 40):
        codec, payload = packing.squeeze(data)
        assert packing.unsqueeze(codec, payload) == data and len(payload) <= len(data)


def test_values_where_the_mask_prunes_are_refused() -> None:
    spec, variables, reparam = compressed_model()
    flat = tree.flatten(variables["params"])
    kernel = np.asarray(flat["logits/kernel"]).copy()
    kernel[np.asarray(reparam.masks["logits/kernel"]) == 0] = 1.0
    flat["logits/kernel"] = kernel
    variables["params"] = tree.unflatten(flat)
    with pytest.raises(CheckpointError, match="mask"):
        artifact.encode(spec, variables, reparam)


def test_corrupt_or_foreign_bytes_are_refused() -> None:
    spec, variables, reparam = compressed_model()
    data = artifact.encode(spec, variables, reparam)
    for bad in (b"", b"PK\x03\x04" + data[4:], data[:-5], data + b"\x00", data[:4] + b"\x09" + data[5:]):
        with pytest.raises(CheckpointError):
            artifact.decode(bad)


def table() -> Spec:
    return Spec.from_dict({"input": {"shape": [6], "dtype": "int32"}, "output": {"node": "logits", "num_classes": 2},
                           "nodes": [
        {"id": "embed", "op": "embedding", "inputs": ["input"], "params": {"vocab_size": 4000, "dim": 32}},
        {"id": "pool", "op": "global_max_pool", "inputs": ["embed"]},
        {"id": "logits", "op": "dense", "inputs": ["pool"], "params": {"units": 2}}]})


def test_a_table_pruned_by_whole_rows_costs_about_a_bit_per_row_and_round_trips() -> None:
    spec = table()
    rng = np.random.default_rng(5)
    flat = {p: rng.normal(size=s).astype(np.float32) for p, s in variable_shapes(validate(spec))["params"].items()}
    rows = rng.random(4000) < 0.2
    row_mask = np.repeat(rows[:, None], 32, axis=1).astype(np.float32)
    inside = row_mask * (rng.random((4000, 32)) < 0.5)  # some entries of the kept rows pruned too
    for mask in (row_mask, inside):
        params = {**flat, "embed/embedding": np.where(mask != 0, flat["embed/embedding"], np.float32(0))}
        reparam = Reparam({"embed/embedding": jnp.asarray(mask)})
        data = artifact.encode(spec, {"params": tree.unflatten(params)}, reparam)
        decoded = artifact.decode(data)
        got = tree.flatten(decoded.variables["params"])
        assert all(bits(got[p]) == bits(params[p]) for p in params)
        assert decoded.reparam is not None
        np.testing.assert_array_equal(np.asarray(decoded.reparam.masks["embed/embedding"]), mask)
        if mask is row_mask:
            mask_bytes = leaf_entries(data)[0][3][0]  # embed/embedding: its mask's first stream
            assert leaf_entries(data)[0][0] == artifact.ROWS and mask_bytes <= 4000 / 8 + 20  # a bit per row
            plain_bitmap = len(packing.squeeze(packing.pack_bitmap(row_mask.astype(bool)))[1])
            assert plain_bitmap > 1.3 * mask_bytes  # what the row code saves


def leaf_entries(data: bytes) -> list[Any]:
    head_len = int.from_bytes(data[5:9], "little")
    return list(json.loads(zlib.decompress(data[9:9 + head_len]))["leaves"])


def test_version_1_artifacts_are_still_read() -> None:
    spec, variables, reparam = compressed_model()
    data = artifact.encode(spec, variables, reparam)
    old = data[:4] + b"\x01" + data[5:]  # no leaf uses the row code, so the bytes are a valid version 1 artifact
    assert bits(tree.flatten(artifact.decode(old).variables["params"])["h/kernel"]) == bits(
        tree.flatten(variables["params"])["h/kernel"])


def test_float_values_are_shuffled_into_byte_planes_when_that_is_shorter_and_round_trip() -> None:
    values = np.random.default_rng(7).normal(0.0, 0.1, 3000).astype("<f4").tobytes()
    codec, payload = packing.squeeze(values)
    assert codec == packing.PLANES_LZMA and packing.unsqueeze(codec, payload) == values
    lzma2 = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
    unshuffled = min(len(zlib.compress(values, 9)), len(lzma.compress(values, format=lzma.FORMAT_RAW, filters=lzma2)))
    assert len(payload) < 0.97 * unshuffled
    for n in (0, 1, 3, 4, 7, 16, 17):
        data = bytes(range(n))
        assert packing.unplanes(packing.planes(data)) == data
        assert packing.unsqueeze(*packing.squeeze(data)) == data


def test_streams_over_the_lzma_limit_get_zlib_and_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(0).normal(0, 0.02, 3000).astype(np.float32).tobytes()
    assert packing.squeeze(values)[0] == packing.PLANES_LZMA  # the shortest form of a float32 stream
    monkeypatch.setattr(packing, "LZMA_MOST", len(values) - 1)
    codec, payload = packing.squeeze(values)
    assert codec in (packing.STORED, packing.ZLIB) and packing.unsqueeze(codec, payload) == values


def test_lzma_streams_sized_to_their_dictionary_are_the_preset_9_streams_byte_for_byte() -> None:
    preset = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]  # its 64 MiB dictionary
    rng = np.random.default_rng(3)
    for n in (1, 100, 4096, 4097, 70_000):
        data = rng.integers(0, 8, n, dtype=np.uint8).tobytes()
        for codec in (packing.LZMA, packing.PLANES_LZMA):
            payload = packing._ENCODERS[codec](data)
            plain = data if codec == packing.LZMA else packing.planes(data)
            assert payload == lzma.compress(plain, format=lzma.FORMAT_RAW, filters=preset)
            assert packing.unsqueeze(codec, payload) == data


def laplace_shared(k: int) -> tuple[Spec, dict[str, Any], Reparam]:
    """``cnn()`` with Laplace-distributed weights (as trained ones are) and h/kernel shared among ``k`` values."""
    spec, variables, _ = compressed_model()
    params = tree.flatten(variables["params"])
    params["h/kernel"] = jnp.asarray(np.random.default_rng(k).laplace(size=params["h/kernel"].shape), jnp.float32)
    indices = {"h/kernel": quantise(params["h/kernel"], k)[1]}
    reparam = Reparam({}, indices, {"h/kernel": k})
    variables["params"] = materialise(trainable(tree.unflatten(params), reparam), reparam)
    return spec, variables, reparam


@pytest.mark.parametrize("k", [8, 32, 64])
def test_indices_of_odd_widths_are_stored_a_byte_each_when_that_entropy_codes_shorter(k: int) -> None:
    spec, variables, reparam = laplace_shared(k)
    data = artifact.encode(spec, variables, reparam)
    h = [e for e in leaf_entries(data) if e[1] == k]
    assert len(h) == 1 and h[0][4:] == [8]
    idx = np.asarray(reparam.indices["h/kernel"]).ravel()
    packed = len(packing.squeeze(packing.pack_bits(idx, packing.bits_for(k)))[1])
    assert h[0][3][1] < packed  # the index section: shorter than at ceil(log2 k) bits
    decoded = artifact.decode(data)
    assert bits(tree.flatten(decoded.variables["params"])["h/kernel"]) == bits(
        tree.flatten(variables["params"])["h/kernel"])
    assert decoded.reparam is not None
    np.testing.assert_array_equal(np.asarray(decoded.reparam.indices["h/kernel"]).ravel(), idx)


def with_entries(data: bytes, entries: list[Any], version: int) -> bytes:
    """``data`` with its header's leaf entries replaced and its version byte set."""
    head_len = int.from_bytes(data[5:9], "little")
    header = json.loads(zlib.decompress(data[9:9 + head_len]))
    head = zlib.compress(json.dumps({**header, "leaves": entries}, separators=(",", ":")).encode(), 9)
    return data[:4] + bytes([version]) + len(head).to_bytes(4, "little") + head + data[9 + head_len:]


def test_version_2_artifacts_without_index_widths_are_still_read_and_widths_are_checked() -> None:
    spec, variables, reparam = compressed_model()
    data = artifact.encode(spec, variables, reparam)
    entries = leaf_entries(data)
    assert all(len(e) == 4 for e in entries)  # k = 16 normal weights: nibbles code shorter than bytes
    want = bits(tree.flatten(variables["params"])["h/kernel"])
    assert bits(tree.flatten(artifact.decode(with_entries(data, entries, 2)).variables["params"])["h/kernel"]) == want
    shared = next(i for i, e in enumerate(entries) if e[1] == 16)
    for version, width in ((2, 4), (3, 3), (3, 33)):  # no width field before version 3; never below ceil(log2 k)
        bad = [e if i != shared else [*e, width] for i, e in enumerate(entries)]
        with pytest.raises(CheckpointError):
            artifact.decode(with_entries(data, bad, version))


@pytest.mark.parametrize("k", [1, 2, 4, 16])
def test_indices_whose_width_divides_a_byte_stay_packed_and_round_trip(k: int) -> None:
    spec, variables, reparam = laplace_shared(k)
    data = artifact.encode(spec, variables, reparam)
    (h,) = [e for e in leaf_entries(data) if e[1] == k]
    assert len(h) == 4  # no width field: ceil(log2 k) bits (none for one value)
    decoded = artifact.decode(data)
    assert bits(tree.flatten(decoded.variables["params"])["h/kernel"]) == bits(
        tree.flatten(variables["params"])["h/kernel"])
