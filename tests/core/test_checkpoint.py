"""Checkpoints: bit-exact round trips (with masks and shared weights) and clear errors."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

from core import tree
from core.checkpoint import (
    FORMAT,
    Checkpoint,
    from_bytes,
    load,
    save,
    to_bytes,
)
from core.errors import CheckpointError
from core.graph import validate
from core.reparam import (
    Reparam,
    mask_top_n_incoming,
    materialise,
    share,
    trainable,
    with_masks,
)
from core.spec import INPUT, InputSpec, Node, Spec
from tests.core.conftest import random_variables


def small_spec() -> Spec:
    return Spec.from_dict({
        "name": "ckpt",
        "input": {"shape": [6, 6, 2], "scale": 0.5},
        "nodes": [
            {"id": "conv", "op": "conv2d", "inputs": ["input"], "params": {"filters": 4}},
            {"id": "bn", "op": "batch_norm", "inputs": ["conv"]},
            {"id": "sep", "op": "separable_conv2d", "inputs": ["bn"], "params": {"filters": 3}},
            {"id": "gap", "op": "global_avg_pool", "inputs": ["sep"]},
            {"id": "fc", "op": "dense", "inputs": ["gap"], "params": {"units": 20}},
            {"id": "logits", "op": "dense", "inputs": ["fc"], "params": {"units": 5}},
        ],
        "output": {"node": "logits", "num_classes": 5}})


def compressed(seed: int = 0) -> tuple[Spec, dict[str, Any], Reparam]:
    """A model whose conv kernel is pruned, fc kernel shared + pruned and logits kernel shared."""
    rng = np.random.default_rng(seed)
    spec = small_spec()
    variables = random_variables(spec, seed)
    params = tree.flatten(variables["params"])
    masks: dict[str, Any] = {}
    indices: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    masks["conv/kernel"] = (rng.random(params["conv/kernel"].shape) > 0.5).astype(np.float32)
    params["conv/kernel"] = params["conv/kernel"] * masks["conv/kernel"]
    for path, k, pruned in (("fc/kernel", 7, True), ("logits/kernel", 300, False)):
        shape = params[path].shape
        indices[path] = rng.integers(0, k, shape).astype(np.int32)
        sizes[path] = k
        dense = rng.normal(size=k).astype(np.float32)[indices[path]]
        if pruned:
            masks[path] = (rng.random(shape) > 0.4).astype(np.float32)
            dense = np.where(masks[path] != 0, dense, np.float32(0))  # as reparam.materialise
        params[path] = dense
    variables["params"] = tree.unflatten(params)
    return spec, variables, Reparam(masks, indices, sizes)


def assert_same_tree(a: dict[str, Any], b: dict[str, Any]) -> None:
    fa, fb = tree.flatten(a), tree.flatten(b)
    assert sorted(fa) == sorted(fb)
    for path in fa:
        x, y = np.asarray(fa[path]), np.asarray(fb[path])
        assert x.dtype == y.dtype, path
        assert x.tobytes() == y.tobytes(), path  # bit for bit


def assert_same_checkpoint(ckpt: Checkpoint, spec: Spec, variables: dict[str, Any],
                           reparam: Reparam | None) -> None:
    assert ckpt.spec.to_dict() == spec.to_dict()
    assert_same_tree(ckpt.variables, variables)
    if reparam is None:
        assert ckpt.reparam is None
        return
    assert ckpt.reparam is not None
    assert_same_tree(dict(ckpt.reparam.masks), dict(reparam.masks))
    assert_same_tree(dict(ckpt.reparam.indices), dict(reparam.indices))
    assert dict(ckpt.reparam.sizes) == dict(reparam.sizes)


def header(data: bytes) -> dict[str, Any]:
    (size,) = struct.unpack("<Q", data[:8])
    parsed: dict[str, Any] = json.loads(data[8:8 + size])
    return parsed


def rewrite(data: bytes, drop: str | None = None, add: dict[str, np.ndarray] | None = None,
            meta: dict[str, str] | None = None) -> bytes:
    """Return a checkpoint with a tensor dropped or replaced, or its metadata changed."""
    tensors = dict(safetensors.numpy.load(data))
    if drop is not None:
        del tensors[drop]
    tensors.update(add or {})
    return bytes(safetensors.numpy.save(tensors, metadata={**header(data)["__metadata__"],
                                                           **(meta or {})}))


def test_round_trip_is_bit_exact_without_reparam():
    spec = small_spec()
    variables = random_variables(spec)
    assert "batch_stats" in variables
    assert_same_checkpoint(from_bytes(to_bytes(spec, variables)), spec, variables, None)


def test_round_trip_is_bit_exact_with_masks_and_codebooks():
    spec, variables, reparam = compressed()
    data = to_bytes(spec, variables, reparam)
    assert_same_checkpoint(from_bytes(data), spec, variables, reparam)


def test_shared_leaves_are_stored_as_codebook_and_small_indices():
    spec, variables, reparam = compressed()
    stored = safetensors.numpy.load(to_bytes(spec, variables, reparam))
    assert "params/fc/kernel" not in stored and "params/logits/kernel" not in stored
    assert stored["codebook/fc/kernel"].shape == (7,)
    assert stored["indices/fc/kernel"].dtype == np.uint8
    assert stored["indices/logits/kernel"].dtype == np.uint16  # 300 codebook entries
    assert stored["masks/conv/kernel"].dtype == np.uint8
    assert "params/conv/kernel" in stored and "batch_stats/bn/var" in stored


def test_round_trip_of_parameters_compressed_by_core_reparam():
    spec = small_spec()
    variables = random_variables(spec, seed=3)
    params = variables["params"]
    reparam = with_masks(Reparam(), {"fc/kernel": mask_top_n_incoming(params["fc"]["kernel"], 2),
                                     "conv/kernel": mask_top_n_incoming(params["conv"]["kernel"], 5)})
    reparam = share(params, reparam, ["fc/kernel", "logits/kernel"], k=4, iters=5)
    variables["params"] = jax.tree.map(np.asarray, materialise(trainable(params, reparam), reparam))
    data = to_bytes(spec, variables, reparam)
    stored = safetensors.numpy.load(data)
    assert {"codebook/fc/kernel", "codebook/logits/kernel"} <= set(stored)
    assert "params/fc/kernel" not in stored
    assert_same_checkpoint(from_bytes(data), spec, variables, reparam)


def test_shared_leaf_that_disagrees_with_its_indices_is_kept_dense():
    spec, variables, reparam = compressed()
    params = tree.flatten(variables["params"])
    params["logits/kernel"] = params["logits/kernel"] + np.float32(1e-3) * (np.arange(100) % 3
                                                                          ).reshape(20, 5)
    variables["params"] = tree.unflatten(params)
    data = to_bytes(spec, variables, reparam)
    assert "params/logits/kernel" in safetensors.numpy.load(data)
    assert_same_checkpoint(from_bytes(data), spec, variables, reparam)


def test_save_and_load_file(tmp_path):
    spec, variables, reparam = compressed(1)
    path = tmp_path / "model.safetensors"
    save(path, validate(spec), variables, reparam)  # a Graph saves its normalised spec
    assert_same_checkpoint(load(path), validate(spec).spec, variables, reparam)
    assert os.listdir(tmp_path) == ["model.safetensors"]


@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated", "header-only", "bad-json"])
def test_corrupt_bytes_raise(damage):
    data = to_bytes(*compressed()[:2])
    bad = {
        "empty": b"",
        "garbage": b"\x00\x01not a checkpoint at all",
        "truncated": data[:-7],
        "header-only": data[:40],
        "bad-json": data[:8] + b"}" + data[9:],
    }[damage]
    with pytest.raises(CheckpointError, match="corrupt"):
        from_bytes(bad)


def test_foreign_safetensors_and_unknown_version_raise():
    plain = bytes(safetensors.numpy.save({"w": np.zeros(3, np.float32)}))
    with pytest.raises(CheckpointError, match=FORMAT):
        from_bytes(plain)
    data = to_bytes(small_spec(), random_variables(small_spec()))
    with pytest.raises(CheckpointError, match="version '99'"):
        from_bytes(rewrite(data, meta={"format_version": "99"}))
    with pytest.raises(CheckpointError, match="spec"):
        from_bytes(rewrite(data, meta={"spec": '{"nodes": []}'}))


def test_missing_extra_and_misshapen_tensors_raise():
    spec, variables, reparam = compressed()
    data = to_bytes(spec, variables, reparam)
    for name in ("params/bn/scale", "batch_stats/bn/mean", "codebook/fc/kernel"):
        with pytest.raises(CheckpointError, match="lacks tensor"):
            from_bytes(rewrite(data, drop=name))
    for name in ("masks/conv/kernel", "indices/fc/kernel"):
        with pytest.raises(CheckpointError, match="missing"):
            from_bytes(rewrite(data, drop=name))
    with pytest.raises(CheckpointError, match="no use for"):
        from_bytes(rewrite(data, add={"params/ghost/kernel": np.zeros(2, np.float32)}))
    cases: dict[str, np.ndarray] = {"params/conv/bias": np.zeros(5, np.float32),
             "masks/conv/kernel": np.zeros((3, 3, 2, 5), np.uint8),
             "codebook/fc/kernel": np.zeros(6, np.float32),
             "indices/logits/kernel": np.zeros((5, 20), np.uint16)}
    for name, wrong in cases.items():
        with pytest.raises(CheckpointError, match="shape"):
            from_bytes(rewrite(data, add={name: wrong}))
    with pytest.raises(CheckpointError, match="exceed"):
        from_bytes(rewrite(data, add={"indices/fc/kernel": np.full((3, 20), 7, np.uint8)}))


def test_saving_variables_that_do_not_fit_raises():
    spec, variables, reparam = compressed()
    params = tree.flatten(variables["params"])
    with pytest.raises(CheckpointError, match="missing params"):
        to_bytes(spec, {**variables, "params": tree.unflatten(
            {p: a for p, a in params.items() if p != "fc/bias"})})
    with pytest.raises(CheckpointError, match="shape"):
        to_bytes(spec, {**variables, "params": tree.unflatten(
            {**params, "fc/bias": np.zeros(3, np.float32)})})
    with pytest.raises(CheckpointError, match="reparam"):
        to_bytes(spec, variables, Reparam(masks={"nope/kernel": jnp.ones(2)}))
    with pytest.raises(CheckpointError, match="indices"):
        to_bytes(spec, variables, Reparam(indices=reparam.indices, sizes={"fc/kernel": 7}))


def test_failed_save_leaves_no_partial_file(tmp_path, monkeypatch):
    spec, variables, _ = compressed()
    target = tmp_path / "model.safetensors"
    with pytest.raises(CheckpointError):
        save(target, spec, {"params": {}})
    assert os.listdir(tmp_path) == []
    save(target, spec, variables)
    before = target.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save(target, spec, random_variables(spec, seed=9))
    assert os.listdir(tmp_path) == ["model.safetensors"]
    assert target.read_bytes() == before


def test_loaded_reparam_that_does_not_fit_the_spec_raises():
    spec, variables, reparam = compressed()
    params = tree.flatten(variables["params"])
    params["logits/kernel"] = params["logits/kernel"] + np.float32(1e-3) * (np.arange(100) % 3
                                                                          ).reshape(20, 5)
    data = to_bytes(spec, {**variables, "params": tree.unflatten(params)}, reparam)
    assert "codebook/logits/kernel" not in safetensors.numpy.load(data)  # kept dense
    bad_indices: dict[str, np.ndarray] = {
        "logits/kernel": np.full((20, 5), 300, np.uint16),  # no codebook to check them against
        "fc/kernel": np.full((3, 20), -1, np.int8)}
    for name, wrong in bad_indices.items():
        with pytest.raises(CheckpointError, match="exceed"):
            from_bytes(rewrite(data, add={f"indices/{name}": wrong}))
    info = json.loads(header(data)["__metadata__"]["reparam"])
    ghost = {**info, "mask_dtypes": {**info["mask_dtypes"], "ghost": "float32"}}
    with pytest.raises(CheckpointError, match="ghost"):
        from_bytes(rewrite(data, add={"masks/ghost": np.array(1, np.uint8)},
                           meta={"reparam": json.dumps(ghost)}))
    unreadable = {**info, "sizes": {**info["sizes"], "fc/kernel": "seven"}}
    with pytest.raises(CheckpointError, match="reparam metadata"):
        from_bytes(rewrite(data, meta={"reparam": json.dumps(unreadable)}))


def test_the_same_model_serialises_to_the_same_bytes_in_every_process(tmp_path: Path) -> None:
    """safetensors orders its metadata's keys differently per process; the checkpoint's header is sorted."""
    spec = Spec(InputSpec((4,), modality="tabular"), (Node("head", "dense", (INPUT,), {"units": 3}),), "head", 3)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    code = ("import hashlib, sys, jax; from core import checkpoint, model; from core.spec import Spec; "
            "spec = Spec.from_json(open(sys.argv[1]).read()); v = model.build(spec).init(jax.random.key(0)); "
            "data = checkpoint.to_bytes(spec, v); assert checkpoint.from_bytes(data).spec.to_json() == spec.to_json(); "
            "print(hashlib.sha256(data).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parents[2]).stdout.strip() for _ in range(4)}
    assert len(digests) == 1, digests
