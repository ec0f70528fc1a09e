"""The seeded designs: valid for many input shapes, runnable, and the hand-written networks among them."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from core.analysis import analyse
from core.graph import validate
from core.model import build
from core.spec import Spec
from synthesis.space import Candidate, SpaceInfo, mutate, sample, seeds, to_spec
from synthesis.space.text import MODEL_PARAMS, NETWORK_PARAMS, TABLE_PARAMS, network_limit

IMAGE_SHAPES = [(8, 8, 1), (28, 28, 1), (32, 32, 3), (96, 96, 3)]
TEXT_LENGTHS = [16, 100]


def image_info(shape: tuple[int, int, int], num_classes: int = 10) -> SpaceInfo:
    return SpaceInfo("image", shape, num_classes, scale=1 / 255, offset=-0.5)


def text_info(length: int, num_classes: int = 3) -> SpaceInfo:
    return SpaceInfo("text", (length,), num_classes, vocab_size=2000)


def seed(info: SpaceInfo, name: str) -> Candidate:
    return next(c for c in seeds(info) if c.origin == f"seed:{name}")


def nodes(spec: Spec) -> dict[str, tuple[object, ...]]:
    """The validated nodes (defaults filled in) keyed by id: what makes two specs the same network."""
    return {n.id: (n.op, n.inputs, n.params) for n in validate(spec).spec.nodes}


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_image_seeds_are_valid_networks_for_each_input_shape(shape: tuple[int, int, int]) -> None:
    info = image_info(shape)
    found = seeds(info)
    # the hand CNN first: the search tries the likeliest winner before anything else
    assert [c.origin for c in found] == ["seed:hand-cnn", "seed:resnet", "seed:mobilenet", "seed:lenet"]
    for candidate in found:
        spec = to_spec(candidate, info)
        assert build(spec).graph.output_type.shape == (10,)
        assert spec.input.shape == shape and spec.input.dtype == "float32"
        assert (spec.input.scale, spec.input.offset) == (1 / 255, -0.5)
        assert candidate.hparams.max_shift <= info.max_shift


@pytest.mark.parametrize("length", TEXT_LENGTHS)
def test_text_seeds_are_valid_networks_for_each_length(length: int) -> None:
    info = text_info(length)
    found = seeds(info)
    assert [c.origin for c in found] == ["seed:wide-text-cnn", "seed:default-text-cnn", "seed:hashed-ngrams",
                                         "seed:fasttext", "seed:kim-cnn", "seed:transformer"]
    for candidate in found:
        spec = to_spec(candidate, info)
        assert build(spec).graph.output_type.shape == (3,)
        assert spec.input.shape == (length,) and spec.input.dtype == "int32"
        assert candidate.hparams.max_shift == 0


@pytest.mark.parametrize("shape", [*IMAGE_SHAPES, (150, 200, 3)])
def test_hand_cnn_seed_is_the_network_an_engineer_writes_first(shape: tuple[int, int, int]) -> None:
    """conv-BN-ReLU 32-32 / max-pool / 64-64 / max-pool / 128, global average pooling, dropout 0.2, dense:
    the small CNN the benchmark's hand-written peer trains (bench/peers/hand_cnn.py), so the search starts from at
    least what a good engineer writes."""
    info = image_info(shape, num_classes=7)
    spec = to_spec(seed(info, "hand-cnn"), info)
    ops = [n.op for n in spec.nodes if n.op != "conv2d" or n.params.get("strides", [1, 1]) in ([1, 1], 1)]
    convs = [n.params["filters"] for n in spec.nodes if n.op == "conv2d"][-5:]
    assert convs == [32, 32, 64, 64, 128]
    assert ops.count("batch_norm") == 5 and ops.count("max_pool2d") == (2 if min(shape[:2]) >= 8 else 1)
    assert ops[-3:] == ["global_avg_pool", "dropout", "dense"] and spec.num_classes == 7
    assert next(n for n in spec.nodes if n.op == "dropout").params["rate"] == 0.2
    assert spec.input.shape == shape and (spec.input.scale, spec.input.offset) == (1 / 255, -0.5)


@pytest.mark.parametrize("length", TEXT_LENGTHS)
def test_the_wide_text_seed_is_the_trigram_cnn_with_the_ngram_bag_beside_it(length: int) -> None:
    info = SpaceInfo("text", (length,), 3, vocab_size=30, bag_start=length // 2, bag_vocab=40)
    spec = to_spec(seed(info, "wide-text-cnn"), info)
    ops = {n.id: n.op for n in spec.nodes}
    assert ops["bag"] == "embedding_bag" and ops["conv"] == "conv1d" and ops["hidden"] == "dense"
    (pool,) = [n for n in spec.nodes if n.op == "concat"]
    assert sorted(pool.inputs) == ["bag", "gmp"]


@pytest.mark.parametrize("length", TEXT_LENGTHS)
def test_default_text_seed_is_a_trigram_cnn(length: int) -> None:
    info = text_info(length)
    spec = to_spec(seed(info, "default-text-cnn"), info)
    assert [n.op for n in spec.nodes] == ["embedding", "conv1d", "activation", "global_max_pool", "dropout",
                                          "dense"]
    assert spec.nodes[0].params["dim"] == 64 and spec.nodes[1].params["filters"] == 128
    assert spec.nodes[1].params["kernel_size"] == 3


def test_the_seeds_are_the_designs_they_are_named_after() -> None:
    info = image_info((32, 32, 3))
    ops = {name: [n.op for n in to_spec(seed(info, name), info).nodes]
           for name in ("lenet", "hand-cnn", "resnet", "mobilenet")}
    assert "add" in ops["resnet"] and "depthwise_conv2d" in ops["mobilenet"] and "add" in ops["mobilenet"]
    assert "batch_norm" not in ops["lenet"] and "add" not in ops["hand-cnn"]
    text = text_info(40)
    assert "self_attention" in [n.op for n in to_spec(seed(text, "transformer"), text).nodes]
    kim = to_spec(seed(text, "kim-cnn"), text)
    assert sorted(n.params["kernel_size"] for n in kim.nodes if n.op == "conv1d") == [3, 4, 5]
    assert [n.op for n in to_spec(seed(text, "fasttext"), text).nodes] == ["embedding", "global_avg_pool", "dense"]
    ngrams = to_spec(seed(text, "hashed-ngrams"), text)  # no bag in the input: a bag of the word ids
    assert (ngrams.nodes[0].op, ngrams.nodes[0].params.get("start", 0)) == ("embedding_bag", 0)


@pytest.mark.parametrize("name", ["hashed-ngrams", "kim-cnn", "transformer", "fasttext", "wide-text-cnn"])
def test_with_a_bag_the_ngram_encoder_reads_only_the_bag_the_wide_one_both_and_the_others_the_words(name: str) -> None:
    info = SpaceInfo("text", (12,), 2, vocab_size=30, bag_start=5, bag_vocab=40)
    model = build(to_spec(seed(info, name), info))
    variables = model.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(0, 30, (3, 5)), rng.integers(0, 40, (3, 7))], axis=1).astype(np.int32)
    other_words, other_bag = x.copy(), x.copy()
    other_words[:, :5] = rng.integers(0, 30, (3, 5))
    other_bag[:, 5:] = rng.integers(0, 40, (3, 7))
    logits = [np.asarray(model.apply(variables, v)[0]) for v in (x, other_words, other_bag)]
    reads_bag, reads_words = name in ("hashed-ngrams", "wide-text-cnn"), name != "hashed-ngrams"
    assert np.array_equal(logits[0], logits[2]) != reads_bag  # the bag changes the n-gram and wide networks only
    assert np.array_equal(logits[0], logits[1]) != reads_words


RUNS = [(image_info((8, 8, 1)), "lenet"), (image_info((28, 28, 1)), "mobilenet"),
        (image_info((32, 32, 3)), "resnet"), (text_info(16), "kim-cnn"), (text_info(16), "transformer"),
        (text_info(16), "hashed-ngrams")]


@pytest.mark.parametrize(("info", "name"), RUNS, ids=[name for _, name in RUNS])
def test_seed_networks_build_and_run(info: SpaceInfo, name: str) -> None:
    model = build(to_spec(seed(info, name), info))
    variables = model.init(jax.random.key(0))
    x = np.random.default_rng(0).integers(0, 255, (2, *info.input_shape))
    logits, _ = model.apply(variables, x.astype(np.int32 if info.modality == "text" else np.float32))
    assert logits.shape == (2, info.num_classes)
    assert bool(np.all(np.isfinite(np.asarray(logits))))


def test_per_channel_normalisation_reaches_the_spec() -> None:
    info = SpaceInfo("image", (8, 8, 3), 4, scale=(0.5, 0.25, 2.0), offset=(-1.0, 0.0, 1.0))
    spec = to_spec(seed(info, "hand-cnn"), info)
    assert (spec.input.scale, spec.input.offset) == ((0.5, 0.25, 2.0), (-1.0, 0.0, 1.0))
    assert Spec.from_json(spec.to_json()) == spec
    x = np.full((2, 8, 8, 3), 128, np.float32)
    model = build(spec)
    logits, _ = model.apply(model.init(jax.random.key(0)), x)
    assert logits.shape == (2, 4) and bool(np.isfinite(np.asarray(logits)).all())


def test_the_hand_written_cnn_seed_trains_with_its_own_recipe_and_the_other_seeds_with_adamw() -> None:
    """The hand CNN's Nesterov SGD recipe (peak 0.2, batch 128, weight decay 5e-4, warm-up 15 %); the other image
    seeds (LeNet has no batch norm) and the text seeds keep AdamW."""
    info = image_info((32, 32, 3))
    hand = seed(info, "hand-cnn").hparams
    assert (hand.optimizer, hand.learning_rate, hand.batch_size, hand.weight_decay) == ("sgd", 0.2, 128, 5e-4)
    assert hand.to_train_config(epochs=1, seed=0, time_limit_s=None, patience=None).warmup_fraction == 0.15
    assert {c.hparams.optimizer for c in seeds(info) if c.origin != "seed:hand-cnn"} == {"adamw"}
    assert {c.hparams.optimizer for c in seeds(text_info(16))} == {"adamw"}


@pytest.mark.parametrize("rows", [(2_050, 3_000), (11_000, 150_001), (22_050, 262_145)])
def test_text_networks_and_the_floor_beside_them_stay_within_the_dense_model_limit(rows: tuple[int, int]) -> None:
    """Seeds, draws and mutations: each embedding table within TABLE_PARAMS (or `step` columns where it has more
    rows than that fits), the network within what MODEL_PARAMS leaves beside the floor."""
    words, bag = rows
    info = SpaceInfo("text", (40,), 2, vocab_size=words, bag_start=20, bag_vocab=bag)
    rng = np.random.default_rng(0)
    networks = [c for c in seeds(info) if c.arch["encoder"] != "linear"]
    networks += [sample(rng, info) for _ in range(60)]
    networks += [mutate(rng, networks[i % len(networks)], info) for i in range(60)]
    for candidate in networks:
        spec = to_spec(candidate, info)
        for node in spec.nodes:
            if node.op in ("embedding", "embedding_bag"):
                step = 16 if node.op == "embedding" else 4
                table = node.params["vocab_size"] * node.params["dim"]
                assert table <= max(TABLE_PARAMS, node.params["vocab_size"] * step)
                assert node.params["dim"] % step == 0 and node.params["dim"] <= candidate.arch["embed"]
        assert analyse(spec).params <= network_limit(info)
    assert network_limit(info) + (bag + 1) * 2 == MODEL_PARAMS or network_limit(info) == NETWORK_PARAMS
    small = SpaceInfo("text", (40,), 2, vocab_size=300, bag_start=20, bag_vocab=500)
    assert to_spec(seed(small, "wide-text-cnn"), small).nodes[0].params["dim"] == 64  # small tables keep `embed`
