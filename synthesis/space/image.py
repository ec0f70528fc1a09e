"""The image search space: a genome of stages of blocks, and its translation to a core spec.

Genome (JSON)::

    {"kind": "image", "downsample": "max_pool" | "conv", "norm": "batch_norm" | "none",
     "hidden": 0 | units, "dropout": rate,
     "stages": [{"block": "plain" | "residual" | "inverted" | "dense", "depth": 1-4, "width": 16-256,
                 "kernel": 3 | 5, "expand": 1 | 3 | 6 (inverted only), "growth": 12-32 (dense only)}]}

Blocks: ``plain`` conv-BN-ReLU; ``residual`` two convolutions plus an identity (or 1x1 projection)
shortcut (He et al., 2016); ``inverted`` the MobileNetV2 inverted residual, expand 1x1 -> depthwise ->
project 1x1, residual when shapes match (Sandler et al., 2018); ``dense`` DenseNet connectivity, each
layer's ``growth`` channels concatenated to its input, then a 1x1 transition to ``width`` (Huang et al.,
2017). Stages are separated by downsampling (2x2 max pooling or a stride-2 convolution) while the
smaller side is at least 4 px; inputs larger than 64 px first pass a strided stem, as in the default CNN.
The head is global average pooling, an optional hidden dense layer, dropout and the classifier.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from core.spec import Spec
from synthesis.space.blocks import DROPOUTS, HIDDEN, Net
from synthesis.space.genes import change, lower_moves, pick, pick_other, step
from synthesis.space.types import SpaceInfo

BLOCKS = ("plain", "residual", "inverted", "dense")
WIDTHS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
DEPTHS = (1, 2, 3, 4)
KERNELS = (3, 5)
EXPANDS = (1, 3, 6)
GROWTHS = (12, 16, 24, 32)
DOWNSAMPLES = ("max_pool", "conv")
NORMS = ("batch_norm", "none")
STAGE_GRIDS = {"depth": DEPTHS, "width": WIDTHS, "kernel": KERNELS, "expand": EXPANDS, "growth": GROWTHS}
NETWORK_GRIDS = {"downsample": DOWNSAMPLES, "norm": NORMS, "hidden": HIDDEN, "dropout": DROPOUTS}
MAX_STAGES = 5
STEM_FILTERS = 32
MAX_BLOCK_SIDE = 64
"""Inputs whose smaller side exceeds this pass stride-2 stem convolutions first."""
LETTERS = "abcd"

Stage = dict[str, Any]
Arch = dict[str, Any]


def stage(block: str, depth: int, width: int, kernel: int = 3, extra: int | None = None) -> Stage:
    """Return a stage gene; ``extra`` is the expansion (inverted) or growth rate (dense), defaulted when None."""
    gene: Stage = {"block": block, "depth": depth, "width": width, "kernel": kernel}
    if block == "inverted":
        gene["expand"] = 6 if extra is None else extra
    if block == "dense":
        gene["growth"] = 16 if extra is None else extra
    return gene


def arch(stages: list[Stage], downsample: str = "max_pool", norm: str = "batch_norm", hidden: int = 0,
         dropout: float = 0.2) -> Arch:
    """Return an image genome."""
    return {"kind": "image", "stages": stages, "downsample": downsample, "norm": norm, "hidden": hidden,
            "dropout": dropout}


SEEDS: dict[str, Arch] = {
    "hand-cnn": arch([stage("plain", 2, 32), stage("plain", 2, 64), stage("plain", 1, 128)]),
    "resnet": arch([stage("residual", 2, 32), stage("residual", 2, 64), stage("residual", 2, 128)],
                   downsample="conv", dropout=0.1),
    "mobilenet": arch([stage("plain", 1, 32), stage("inverted", 2, 24), stage("inverted", 3, 32),
                       stage("inverted", 2, 64)]),
    "lenet": arch([stage("plain", 1, 16, 5), stage("plain", 1, 32, 5)], norm="none", hidden=128, dropout=0.0),
}
"""Known-good designs, in the order the search tries them (the likeliest winner first, so a short budget still
delivers it): the hand-written small CNN an engineer writes first (the benchmark's peer, bench/peers/hand_cnn.py), a
small ResNet, a MobileNetV2-like, LeNet-like."""


def sample(rng: np.random.Generator) -> Arch:
    """Return a random image genome: 1-4 stages of mostly one block type, widths that do not shrink."""
    main, index = pick(rng, BLOCKS), int(rng.integers(5))
    stages = []
    for _ in range(int(rng.integers(1, 5))):
        block = main if rng.random() < 0.75 else pick(rng, BLOCKS)
        stages.append(_random_stage(rng, block, WIDTHS[index]))
        index = min(index + int(rng.integers(3)), len(WIDTHS) - 1)
    return arch(stages, pick(rng, DOWNSAMPLES), "batch_norm" if rng.random() < 0.8 else "none",
                pick(rng, HIDDEN) if rng.random() < 0.4 else 0, pick(rng, DROPOUTS))


def _random_stage(rng: np.random.Generator, block: str, width: int) -> Stage:
    extra = pick(rng, EXPANDS) if block == "inverted" else pick(rng, GROWTHS)
    return stage(block, pick(rng, DEPTHS), width, 3 if rng.random() < 0.7 else 5, extra)


def mutate(rng: np.random.Generator, parent: Arch) -> Arch:
    """Return a copy of ``parent`` with one gene changed: a stage's depth, width, block type, kernel,
    expansion or growth; a stage added or removed; the downsampling, normalisation, head or dropout."""
    child = copy.deepcopy(parent)
    stages: list[Stage] = child["stages"]
    moves = ["stage", "stage", "stage", "downsample", "norm", "hidden", "dropout"]
    moves += ["add_stage"] if len(stages) < MAX_STAGES else []
    moves += ["remove_stage"] if len(stages) > 1 else []
    move = pick(rng, moves)
    i = int(rng.integers(len(stages)))
    if move == "stage":
        stages[i] = _mutate_stage(rng, stages[i])
    elif move == "add_stage":
        stages.insert(i + 1, {**stages[i], "width": step(WIDTHS, stages[i]["width"], int(rng.integers(2)))})
    elif move == "remove_stage":
        del stages[i]
    else:
        change(rng, child, move, NETWORK_GRIDS[move])
    return child


def _mutate_stage(rng: np.random.Generator, gene: Stage) -> Stage:
    field = pick(rng, [k for k in gene if k != "block"] + ["block"])
    if field == "block":
        return _random_stage(rng, pick_other(rng, BLOCKS, gene["block"]), gene["width"]) | {
            "depth": gene["depth"], "kernel": gene["kernel"]}
    child = dict(gene)
    change(rng, child, field, STAGE_GRIDS[field])
    return child


def shrink(rng: np.random.Generator, parent: Arch) -> Arch | None:
    """Return a copy of ``parent`` made smaller by one step (narrower, shallower, fewer stages, smaller
    kernel, expansion, growth or head), or None when it is the smallest genome of its kind."""
    child = copy.deepcopy(parent)
    stages: list[Stage] = child["stages"]
    moves = [move for gene in stages for move in lower_moves(gene, STAGE_GRIDS)]
    moves += lower_moves(child, {"hidden": HIDDEN}) + ([stages.pop] if len(stages) > 1 else [])
    if not moves:
        return None
    pick(rng, moves)()
    return child


def to_spec(genome: Arch, info: SpaceInfo, name: str) -> Spec:
    """Return the core spec of an image genome for ``info``'s input shape, scaling and class count."""
    net, x = Net(), "input"
    side = min(info.input_shape[:2])
    while side > MAX_BLOCK_SIDE:
        x = net.add(f"stem{len(net.nodes)}", "conv2d", x, filters=STEM_FILTERS, kernel_size=[3, 3], strides=[2, 2])
        side = (side + 1) // 2
    norm, channels = genome["norm"] == "batch_norm", info.input_shape[2]
    stages: list[Stage] = genome["stages"]
    for i, gene in enumerate(stages):
        x, channels = _BUILDERS[gene["block"]](net, x, f"s{i}", gene, channels, norm)
        if i < len(stages) - 1 and side >= 4:
            if genome["downsample"] == "max_pool":
                x, side = net.add(f"pool{i}", "max_pool2d", x), side // 2
            else:
                x, side = net.conv(x, f"down{i}", channels, 3, norm=norm, strides=2), (side + 1) // 2
    net.head(net.global_pools(x, "avg")[0], genome["hidden"], genome["dropout"], info.num_classes)
    inputs = {"shape": list(info.input_shape), "dtype": "float32", "modality": "image", "scale": info.scale,
              "offset": info.offset}
    return net.spec(name, inputs, info.num_classes)


Builder = Callable[[Net, str, str, Stage, int, bool], tuple[str, int]]


def _plain(net: Net, x: str, prefix: str, gene: Stage, channels: int, norm: bool) -> tuple[str, int]:
    for letter in LETTERS[:gene["depth"]]:
        x = net.conv(x, prefix + letter, gene["width"], gene["kernel"], norm=norm)
    return x, gene["width"]


def _residual(net: Net, x: str, prefix: str, gene: Stage, channels: int, norm: bool) -> tuple[str, int]:
    width, kernel = gene["width"], gene["kernel"]
    for letter in LETTERS[:gene["depth"]]:
        name = prefix + letter
        y = net.conv(net.conv(x, f"{name}_c1", width, kernel, norm=norm), f"{name}_c2", width, kernel,
                     norm=norm, act=None)
        shortcut = x if channels == width else net.conv(x, f"{name}_proj", width, 1, norm=norm, act=None)
        x = net.add(f"{name}_relu", "activation", net.add(f"{name}_add", "add", [shortcut, y]), fn="relu")
        channels = width
    return x, width


def _inverted(net: Net, x: str, prefix: str, gene: Stage, channels: int, norm: bool) -> tuple[str, int]:
    width = gene["width"]
    for letter in LETTERS[:gene["depth"]]:
        name, y = prefix + letter, x
        if gene["expand"] != 1:
            y = net.conv(y, f"{name}_exp", channels * gene["expand"], 1, norm=norm, act="relu6")
        y = net.conv(y, f"{name}_dw", 0, gene["kernel"], norm=norm, act="relu6", op="depthwise_conv2d")
        y = net.conv(y, f"{name}_proj", width, 1, norm=norm, act=None)
        x = net.add(f"{name}_add", "add", [x, y]) if channels == width else y
        channels = width
    return x, width


def _dense(net: Net, x: str, prefix: str, gene: Stage, channels: int, norm: bool) -> tuple[str, int]:
    for letter in LETTERS[:gene["depth"]]:
        y = net.conv(x, prefix + letter, gene["growth"], gene["kernel"], norm=norm)
        x = net.add(f"{prefix}{letter}_cat", "concat", [x, y])
    return net.conv(x, f"{prefix}_trans", gene["width"], 1, norm=norm), gene["width"]


_BUILDERS: dict[str, Builder] = {"plain": _plain, "residual": _residual, "inverted": _inverted, "dense": _dense}
