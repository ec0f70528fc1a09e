"""The family benchmark's rows (bench/core_families.py, a script; its helpers imported from bench/)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from families.specs import FAMILIES, IMAGE, TEXT, batches, kinds, uncovered

from core.analysis import analyse
from synthesis.space import image, text


def test_every_family_the_search_can_emit_has_a_row():
    rng = np.random.default_rng(0)
    drawn = [image.sample(rng) for _ in range(200)] + [text.sample(rng) for _ in range(200)]
    seeds = [*image.SEEDS.values(), *text.SEEDS.values()]
    assert uncovered(drawn + seeds) == set()
    expected = {f"image:{b}" for b in image.BLOCKS} | {f"text:{e}" for e in text.ENCODERS} | {"text:wide"}
    assert expected <= set().union(*(kinds(a) for a in drawn))  # the draws do reach every family


def test_a_family_outside_the_rows_is_reported():
    novel = {**image.SEEDS["resnet"], "stages": [{"block": "capsule", "depth": 1, "width": 16, "kernel": 3}]}
    assert uncovered([novel]) == {"image:capsule"}


def test_rows_are_the_search_spaces_specs():
    for family in FAMILIES.values():
        spec = family.spec()
        to_spec = image.to_spec if family.info.modality == "image" else text.to_spec
        assert spec == to_spec(family.arch, family.info, f"bench-{family.name}")
        assert analyse(spec).params > 0
    assert FAMILIES["hand-cnn"].covers() == {"image:hand-cnn", "image:plain"}
    assert FAMILIES["text-wide"].covers() == {"text:bag", "text:wide"}


def test_batches_fit_the_tasks():
    (x, _), *_ = batches(IMAGE, 4)
    assert x.shape == (4, 32, 32, 3) and x.dtype == np.float32 and x.min() >= 0 and x.max() <= 255
    (ids, labels), *_ = batches(TEXT, 4)
    words, bag = ids[:, :TEXT.bag_start], ids[:, TEXT.bag_start:]
    assert ids.dtype == np.int32 and labels.max() < TEXT.num_classes
    assert words.min() >= 1 and words.max() < TEXT.vocab_size and bag.max() < TEXT.bag_vocab
    assert (bag == 0).any(axis=1).all() and (bag > 0).any(axis=1).all()  # some features, then padding


def test_the_pytorch_twin_has_the_same_shapes_and_parameters():
    torch = pytest.importorskip("torch")
    import jax
    from families.torch_net import TorchNet, same_params

    from core.model import build

    for name in ("dense", "inverted", "text-wide", "text-transformer", "text-cnn"):
        family = FAMILIES[name]
        spec = family.spec()
        variables = jax.eval_shape(build(spec).init, jax.random.key(0))  # shapes only: no compilation
        ours = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(variables["params"]))
        twin = TorchNet(spec)
        assert same_params(ours, twin) == ours
        (x, _), *_ = batches(family.info, 2)
        tensor = torch.from_numpy(x).permute(0, 3, 1, 2) if x.ndim == 4 else torch.from_numpy(x).long()
        assert tuple(twin(tensor).shape) == (2, family.info.num_classes)
    twin = TorchNet(FAMILIES["hand-cnn"].spec())
    with pytest.raises(AssertionError, match="parameters"):
        same_params(1, twin)
