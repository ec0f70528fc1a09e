"""Random candidates and chains of mutations: always valid networks, serialisable, with stable ids."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.graph import validate
from core.train_config import TrainConfig
from synthesis.space import Candidate, HParams, SpaceInfo, genome_id, mutate, sample, seeds, shrink, to_spec

images = st.builds(lambda h, w, c, k: SpaceInfo("image", (h, w, c), k, scale=1 / 255),
                   st.integers(1, 130), st.integers(1, 130), st.sampled_from([1, 3]), st.integers(2, 20))
texts = st.builds(lambda length, vocab, k: SpaceInfo("text", (length,), k, vocab_size=vocab),
                  st.integers(1, 300), st.integers(2, 30000), st.integers(2, 20))
infos = st.one_of(images, texts)
rng_seeds = st.integers(0, 2**32 - 1)


def assert_valid(candidate: Candidate, info: SpaceInfo) -> None:
    spec = to_spec(candidate, info)
    assert validate(spec).output_type.shape == (info.num_classes,)
    assert spec.input.shape == info.input_shape and spec.num_classes == info.num_classes
    assert candidate.arch["kind"] == info.modality
    hp = candidate.hparams
    low, high = (1e-2, 0.3) if hp.optimizer == "sgd" else (3e-4, 1e-2)
    assert low <= hp.learning_rate <= high and 1e-5 <= hp.weight_decay <= 1e-2
    assert hp.optimizer == "adamw" or (hp.optimizer == "sgd" and info.modality == "image")
    assert 0 <= hp.label_smoothing <= 0.15 and hp.batch_size in (32, 64, 128)
    assert 0 <= hp.max_shift <= info.max_shift <= 3


@settings(max_examples=150)
@given(infos, rng_seeds)
def test_random_candidates_are_valid_networks(info: SpaceInfo, seed: int) -> None:
    candidate = sample(np.random.default_rng(seed), info)
    assert candidate.origin == "random"
    assert_valid(candidate, info)


@settings(max_examples=100)
@given(infos, rng_seeds, st.booleans())
def test_mutation_chains_stay_valid_and_always_change_the_genome(info: SpaceInfo, seed: int, from_seed: bool) -> None:
    rng = np.random.default_rng(seed)
    candidate = seeds(info)[int(rng.integers(4))] if from_seed else sample(rng, info)
    for _ in range(8):
        child = mutate(rng, candidate, info)
        assert child.id != candidate.id and child.origin == f"mutation:{candidate.id}"
        assert (child.arch, child.hparams) != (candidate.arch, candidate.hparams)
        assert_valid(child, info)
        candidate = child


@settings(max_examples=100)
@given(infos, rng_seeds)
def test_candidates_round_trip_through_json_exactly(info: SpaceInfo, seed: int) -> None:
    rng = np.random.default_rng(seed)
    candidate = mutate(rng, sample(rng, info), info)
    text = candidate.to_json()
    back = Candidate.from_json(text)
    assert back == candidate and back.id == candidate.id and back.to_json() == text
    assert to_spec(back, info) == to_spec(candidate, info)
    assert json.loads(text)["id"] == candidate.id


@settings(max_examples=50)
@given(infos, rng_seeds)
def test_shrinking_ends_at_a_smallest_valid_genome(info: SpaceInfo, seed: int) -> None:
    rng = np.random.default_rng(seed)
    candidate: Candidate | None = sample(rng, info)
    steps = 0
    while candidate is not None:
        assert_valid(candidate, info)
        last, candidate, steps = candidate, shrink(rng, candidate, info), steps + 1
        assert steps < 200
    for stage in last.arch.get("stages", []):
        assert stage["depth"] == 1 and stage["width"] == 16 and stage["kernel"] == 3
    assert len(last.arch.get("stages", [0])) == 1 and last.arch["hidden"] == 0


def test_equal_genomes_share_an_id_whatever_their_origin() -> None:
    info = SpaceInfo("image", (28, 28, 1), 10)
    hand = seeds(info)[1]
    copy = Candidate(json.loads(json.dumps(hand.arch)), hand.hparams, "random")
    assert copy.id == hand.id == genome_id(hand.arch, hand.hparams) and len(hand.id) == 12
    assert seeds(info)[1].id == hand.id  # stable across calls
    assert len({c.id for c in seeds(info)}) == 4
    other = Candidate(hand.arch, HParams(2e-3, 1e-4, 2, 0.1, 64), "random")
    assert other.id != hand.id


def test_ids_do_not_depend_on_key_order() -> None:
    info = SpaceInfo("text", (20,), 2, vocab_size=100)
    candidate = sample(np.random.default_rng(3), info)
    reordered = dict(reversed(list(candidate.arch.items())))
    assert Candidate(reordered, candidate.hparams, "random").id == candidate.id


def test_a_tampered_id_is_rejected() -> None:
    doc = seeds(SpaceInfo("image", (8, 8, 1), 2))[0].to_dict()
    doc["arch"]["dropout"] = 0.5
    with pytest.raises(ValueError, match="does not match"):
        Candidate.from_dict(doc)


def test_sampling_and_mutation_reach_every_block_type_and_encoder() -> None:
    rng = np.random.default_rng(0)
    image, text = SpaceInfo("image", (32, 32, 3), 10), SpaceInfo("text", (50,), 2, vocab_size=500)
    drawn = [sample(rng, image) for _ in range(100)]
    assert {s["block"] for c in drawn for s in c.arch["stages"]} == {"plain", "residual", "inverted", "dense"}
    assert {len(c.arch["stages"]) for c in drawn} == {1, 2, 3, 4}
    texts = [sample(rng, text) for _ in range(60)]
    assert {c.arch["encoder"] for c in texts} == {"bag", "cnn", "transformer", "ngrams"}
    assert {c.arch.get("wide") for c in texts} == {True, False, None}  # None: the n-gram bag itself
    assert all("wide" not in c.arch for c in texts if c.arch["encoder"] == "ngrams")
    narrow = next(c for c in texts if c.arch.get("wide") is False)
    assert any(mutate(rng, narrow, text).arch.get("wide") for _ in range(60))
    candidate, blocks = seeds(image)[1], set()
    for _ in range(300):
        candidate = mutate(rng, candidate, image)
        blocks |= {s["block"] for s in candidate.arch["stages"]}
    assert blocks == {"plain", "residual", "inverted", "dense"}


def test_hparams_give_the_core_training_config() -> None:
    hp = HParams(learning_rate=2e-3, weight_decay=3e-4, max_shift=2, label_smoothing=0.05, batch_size=32)
    config = hp.to_train_config(epochs=12, seed=7, time_limit_s=30.0, patience=4)
    assert config == TrainConfig(epochs=12, batch_size=32, learning_rate=2e-3, weight_decay=3e-4,
                                 label_smoothing=0.05, max_shift=2, patience=4, seed=7, time_limit_s=30.0)


def test_image_searches_draw_both_optimizers_and_text_searches_adamw_alone() -> None:
    image, text = SpaceInfo("image", (28, 28, 1), 10), SpaceInfo("text", (40,), 2, vocab_size=500)
    drawn = {sample(np.random.default_rng(seed), image).hparams.optimizer for seed in range(40)}
    assert drawn == {"adamw", "sgd"}
    rng, candidate, seen = np.random.default_rng(0), sample(np.random.default_rng(1), text), set()
    for _ in range(200):
        candidate = mutate(rng, candidate, text)
        seen.add(candidate.hparams.optimizer)
    assert seen == {"adamw"}
    assert all(sample(np.random.default_rng(seed), text).hparams.optimizer == "adamw" for seed in range(40))


def test_switching_the_optimizer_moves_the_learning_rate_into_the_new_ones_range() -> None:
    image = SpaceInfo("image", (28, 28, 1), 10)
    rng, switches = np.random.default_rng(0), []
    candidate = next(c for c in seeds(image) if c.origin == "seed:resnet")
    assert candidate.hparams.optimizer == "adamw" and candidate.hparams.learning_rate == 1e-3
    for _ in range(400):
        child = mutate(rng, candidate, image)
        if child.hparams.optimizer != candidate.hparams.optimizer:
            switches.append((candidate.hparams, child.hparams))
        candidate = child
    assert {a.optimizer for a, _ in switches} == {"adamw", "sgd"}  # both ways
    for before, after in switches:
        assert after.learning_rate == pytest.approx(
            min(max(before.learning_rate * (100 if after.optimizer == "sgd" else 0.01),
                    1e-2 if after.optimizer == "sgd" else 3e-4), 0.3 if after.optimizer == "sgd" else 1e-2), rel=1e-2)
        assert after.to_train_config(epochs=1, seed=0, time_limit_s=None, patience=None).optimizer == after.optimizer


def test_sgd_candidates_warm_up_longer_and_adamw_ones_keep_cores_default() -> None:
    hp = HParams(learning_rate=0.1, weight_decay=5e-4, max_shift=2, label_smoothing=0.1, batch_size=128,
                 optimizer="sgd")
    config = hp.to_train_config(epochs=10, seed=0, time_limit_s=None, patience=None)
    assert (config.optimizer, config.learning_rate, config.warmup_fraction) == ("sgd", 0.1, 0.15)
    resnet = next(c for c in seeds(SpaceInfo("image", (28, 28, 1), 10)) if c.origin == "seed:resnet")
    assert resnet.hparams.to_train_config(epochs=10, seed=0, time_limit_s=None,
                                          patience=None).warmup_fraction == TrainConfig().warmup_fraction


def test_adamw_genomes_keep_the_ids_they_had_before_the_optimizer_was_a_gene() -> None:
    hp = HParams(learning_rate=2e-3, weight_decay=3e-4, max_shift=2, label_smoothing=0.05, batch_size=32)
    arch = seeds(SpaceInfo("image", (28, 28, 1), 10))[0].arch
    old: dict[str, Any] = {"learning_rate": 2e-3, "weight_decay": 3e-4, "max_shift": 2, "label_smoothing": 0.05,
                           "batch_size": 32}
    text = json.dumps({"arch": arch, "hparams": old}, sort_keys=True, separators=(",", ":"))
    assert genome_id(arch, hp) == hashlib.sha256(text.encode()).hexdigest()[:12]
    sgd = HParams(**{**old, "optimizer": "sgd"})
    assert genome_id(arch, sgd) != genome_id(arch, hp)
    stored = {"id": genome_id(arch, hp), "origin": "random", "arch": arch, "hparams": old}  # a log of before
    assert Candidate.from_dict(stored).hparams == hp
    assert Candidate.from_dict(Candidate(arch, sgd, "random").to_dict()).hparams.optimizer == "sgd"


def test_space_info_rejects_what_no_space_serves() -> None:
    with pytest.raises(ValueError, match="modality"):
        SpaceInfo("tabular", (10,), 2)
    with pytest.raises(ValueError, match="3 positive"):
        SpaceInfo("image", (28, 28), 2)
    with pytest.raises(ValueError, match="vocab_size"):
        SpaceInfo("text", (10,), 2)
    image = seeds(SpaceInfo("image", (8, 8, 1), 2))[0]
    with pytest.raises(ValueError, match="genome"):
        to_spec(image, SpaceInfo("text", (10,), 2, vocab_size=10))
    assert [SpaceInfo("image", (s, s, 1), 2).max_shift for s in (4, 8, 28, 96)] == [1, 1, 3, 3]
