"""The text search space: token embeddings, an encoder, global pooling and a head, as a core spec.

Genome (JSON)::

    {"kind": "text", "embed": 32-256, "encoder": "bag" | "cnn" | "transformer" | "ngrams",
     "pool": "max" | "avg" | "both", "hidden": 0 | units, "dropout": rate, "wide": bool (not for "ngrams"),
     bag: "ngram": 1-3 and, when ngram > 1, "filters";  cnn: "kernels": [2-5, ...], "filters";
     transformer: "blocks": 1-2, "heads": 1-8, "ff": 1-4 (feed-forward width / embedding size)}

Encoders: a bag of n-grams (embeddings, an optional 1-D convolution of width n as n-gram detector,
then pooling, as in fastText: Joulin et al., 2017); a multi-width 1-D CNN (parallel convolutions of
several widths, each pooled, concatenated: Kim, 2014); a small pre-norm transformer encoder (learned
positions, self-attention and feed-forward blocks with residual connections: Vaswani et al., 2017); a bag of
hashed n-gram features — word 1-2-grams and character 2-5-grams, those of a TF-IDF linear classifier — whose
embeddings are summed over the square root of their count (fastText's hashed bigrams, Joulin et al., 2017;
over the word ids when the input has no bag; "pool" plays no part). The sequence encoders read the word
sequence only, unless the genome is ``wide``: then the n-gram bag's summed embeddings are concatenated with
their pooled features before the head, a wide part beside the deep one (Cheng et al., "Wide & Deep Learning for
Recommender Systems", 2016, https://arxiv.org/abs/1606.07792). On SMS Spam at split seeds 0 / 1 / 2 (12 epochs,
the seeds' hyper-parameters), the wide trigram CNN erred on 0.87 / 0.77 / 0.77 % of the test texts, the hashed
n-gram bag alone on 1.26 / 0.97 / 0.68 % and the trigram CNN alone on 1.93 / 1.35 / 1.84 %.
There is no recurrent encoder: core has no recurrent op, and one that steps through the sequence costs
far more time per example than these parallel encoders; it stays out until it earns that cost.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from core.spec import Spec
from synthesis.space.blocks import DROPOUTS, HIDDEN, POOLINGS, Net
from synthesis.space.genes import change, lower_moves, pick
from synthesis.space.types import SpaceInfo

ENCODERS = ("bag", "cnn", "transformer", "ngrams")
EMBEDS = (32, 48, 64, 96, 128, 192, 256)
"""Embedding sizes: multiples of 16, so every head count below divides them."""
FILTERS = (32, 48, 64, 96, 128, 192, 256)
NGRAMS = (1, 2, 3)
CNN_KERNELS = (2, 3, 4, 5)
BLOCKS = (1, 2)
HEADS = (1, 2, 4, 8)
FFS = (1, 2, 4)
ENCODER_GENES = {"bag": ("ngram", "filters"), "cnn": ("kernels", "filters"), "transformer": ("blocks", "heads", "ff"),
                 "ngrams": (), "linear": ()}
SIZES = {"embed": EMBEDS, "filters": FILTERS, "ngram": NGRAMS, "blocks": BLOCKS, "ff": FFS, "hidden": HIDDEN}
"""The genes whose grids run from small to large networks."""
GRIDS = {**SIZES, "heads": HEADS}
MODEL_PARAMS = 2_000_000
"""The most parameters a dense text model holds: the network, and the linear floor beside it in an ensemble."""
NETWORK_PARAMS = 250_000
"""The parameters a text network may always hold, however large the floor beside it."""
TABLE_PARAMS = 640_000
"""The most parameters a text network's embedding table holds: its word table and its n-gram table, and the linear
floor beside it in an ensemble, then stay within the 2 M parameters of a dense text model (a genome's `embed` is cut
where a table has more rows than it fits)."""

Arch = dict[str, Any]


def arch(embed: int, encoder: str, pool: str = "max", hidden: int = 0, dropout: float = 0.3, **genes: Any) -> Arch:
    """Return a text genome; ``genes`` are the encoder's own (see the module docstring)."""
    return {"kind": "text", "embed": embed, "encoder": encoder, **genes, "pool": pool, "hidden": hidden,
            "dropout": dropout}


SEEDS: dict[str, Arch] = {
    "wide-text-cnn": arch(64, "bag", hidden=64, wide=True, ngram=3, filters=128),
    "default-text-cnn": arch(64, "bag", ngram=3, filters=128),
    "hashed-ngrams": arch(64, "ngrams", pool="avg", hidden=64, dropout=0.0),
    "fasttext": arch(64, "bag", pool="avg", dropout=0.0, ngram=1),
    "kim-cnn": arch(128, "cnn", dropout=0.5, kernels=[3, 4, 5], filters=100),
    "transformer": arch(64, "transformer", pool="avg", dropout=0.1, blocks=1, heads=4, ff=2),
}
"""Known-good designs, likely winners first: the trigram text CNN with the n-gram bag beside it (wide, one hidden
layer of 64), a trigram text CNN (embedding 64, trigram convolution of 128 filters, max pooling), a bag of hashed
n-gram features (embedding 64, one hidden layer of 64), a fastText-like bag of word embeddings, Kim's CNN, and a
one-block transformer."""


LINEAR: Arch = {"kind": "text", "encoder": "linear"}
"""The linear floor (`synthesis.linear`): one weight per n-gram feature and class, fitted by logistic regression, not
trained by the search; it needs the n-gram bag, is never drawn or mutated, and is the first seed where it can be."""


def is_fitted(genome: Arch) -> bool:
    """Whether a genome's weights are fitted outside the search's training (the linear floor, an ensemble)."""
    return genome.get("encoder") in ("linear", "ensemble")


def ensemble(members: list[Arch], weights: list[float]) -> Arch:
    """The genome of the networks ``members`` whose logits are summed with ``weights`` (folded into each member's
    output layer by `synthesis.ensemble`)."""
    return {"kind": "text", "encoder": "ensemble", "members": copy.deepcopy(members),
            "weights": [round(float(w), 6) for w in weights]}


def sample(rng: np.random.Generator) -> Arch:
    """Return a random text genome."""
    genome = arch(pick(rng, EMBEDS), pick(rng, ENCODERS), pick(rng, POOLINGS),
                  pick(rng, HIDDEN) if rng.random() < 0.4 else 0, pick(rng, DROPOUTS))
    genome["wide"] = bool(rng.random() < 0.5)
    return _tidy(rng, genome)


def mutate(rng: np.random.Generator, parent: Arch) -> Arch:
    """Return a copy of ``parent`` with one gene changed: the embedding size, the encoder or one of its
    genes (n-gram, filters, kernel widths, blocks, heads, feed-forward size), the pooling, head, dropout or
    whether the n-gram bag sits beside the encoder (``wide``)."""
    child = copy.deepcopy(parent)
    wide = ["wide"] if child["encoder"] != "ngrams" else []
    gene = pick(rng, ["embed", "encoder", "pool", "hidden", "dropout", *wide, *_relevant(child), *_relevant(child)])
    if gene == "kernels":
        child["kernels"] = _toggle_kernel(rng, child["kernels"])
    elif gene == "wide":
        child["wide"] = not child.get("wide", False)
    else:
        change(rng, child, gene, {**GRIDS, "encoder": ENCODERS, "pool": POOLINGS, "dropout": DROPOUTS}[gene])
    return _tidy(rng, child)


def shrink(rng: np.random.Generator, parent: Arch) -> Arch | None:
    """Return a copy of ``parent`` made smaller by one step, or None when it is the smallest genome."""
    child = copy.deepcopy(parent)
    moves: list[Callable[[], object]] = [*lower_moves(child, SIZES)]
    if len(child.get("kernels", ())) > 2:
        moves.append(child["kernels"].pop)
    if not moves:
        return None
    pick(rng, moves)()
    return _tidy(rng, child)


def to_spec(genome: Arch, info: SpaceInfo, name: str) -> Spec:
    """Return the core spec of a text genome over ``info``'s sequence length, vocabulary and classes."""
    if genome["encoder"] == "ensemble":
        return _ensemble_spec(genome, info, name)
    net = Net()
    if genome["encoder"] == "linear":  # logits = each block's bag of idf-weighted coefficients, then the intercepts
        blocks = [(1, info.bag_words), (info.bag_words, info.bag_vocab)] if info.bag_words else [(1, info.bag_vocab)]
        bags = [net.add(f"bag{i}" if len(blocks) > 1 else "bag", "embedding_bag", "input", vocab_size=vocab,
                        lowest=lowest, start=info.bag_start, dim=info.num_classes, norm="sqrt")
                for i, (lowest, vocab) in enumerate(blocks)]
        net.head(net.join("bag", "add", bags), 0, 0.0, info.num_classes)
        return net.spec(name, {"shape": list(info.input_shape), "dtype": "int32", "modality": "text"},
                        info.num_classes)
    if genome["encoder"] == "ngrams":
        x = _bag(net, genome, info)
    else:
        wide = [_bag(net, genome, info)] if genome.get("wide") else []
        x = net.join("pool", "concat", [*_pools(net, genome, info), *wide])
    net.head(x, genome["hidden"], genome["dropout"], info.num_classes)
    return net.spec(name, {"shape": list(info.input_shape), "dtype": "int32", "modality": "text"}, info.num_classes)


def member_prefix(index: int) -> str:
    """The prefix of ensemble member `index`'s node ids (and of its weights' names)."""
    return f"m{index}_"


def _ensemble_spec(genome: Arch, info: SpaceInfo, name: str) -> Spec:
    """The members' networks side by side on one input, their node ids prefixed, and their logits summed."""
    nodes: list[dict[str, Any]] = []
    outputs = []
    for i, member in enumerate(genome["members"]):
        spec = to_spec(member, info, name).to_dict()
        prefix = member_prefix(i)
        for node in spec["nodes"]:
            inputs = node["inputs"] if isinstance(node["inputs"], list) else [node["inputs"]]
            nodes.append({**node, "id": prefix + node["id"],
                          "inputs": [x if x == "input" else prefix + x for x in inputs]})
        outputs.append(prefix + spec["output"]["node"])
    nodes.append({"id": "logits", "op": "add", "inputs": outputs})
    return Spec.from_dict({"format": "netsynth.spec", "version": 1, "name": name,
                           "input": {"shape": list(info.input_shape), "dtype": "int32", "modality": "text"},
                           "nodes": nodes, "output": {"node": "logits", "num_classes": info.num_classes}})


def floor_params(info: SpaceInfo) -> int:
    """The linear floor's parameters: one weight per n-gram feature and class, and the intercepts."""
    return (info.bag_vocab + 1) * info.num_classes


def network_limit(info: SpaceInfo) -> int:
    """The most parameters a text network of `info` holds: what MODEL_PARAMS leaves beside the floor, at least
    NETWORK_PARAMS."""
    return max(MODEL_PARAMS - floor_params(info), NETWORK_PARAMS)


def table_dim(embed: int, rows: int, step: int) -> int:
    """The embedding size of a table of `rows` rows: `embed`, cut to a multiple of `step` (at least `step`) that
    keeps the table within TABLE_PARAMS."""
    return min(embed, max(TABLE_PARAMS // max(rows, 1) // step * step, step))


def _bag(net: Net, genome: Arch, info: SpaceInfo) -> str:
    """The n-gram bag's summed embeddings (the word ids' when the input has no bag); any size of 4 or more, as the
    bag feeds no attention heads."""
    ids = {"vocab_size": info.bag_vocab, "start": info.bag_start} if info.bag_vocab else {"vocab_size": info.vocab_size}
    dim = table_dim(genome["embed"], ids["vocab_size"], 4)
    return net.add("bag", "embedding_bag", "input", dim=dim, norm="sqrt", **ids)


def _pools(net: Net, genome: Arch, info: SpaceInfo) -> list[str]:
    """The word sequence embedded, encoded and globally pooled."""
    words = {"length": info.sequence_length} if info.bag_vocab else {}
    dim = table_dim(genome["embed"], info.vocab_size, 16)  # a multiple of 16: every head count divides it
    x = net.add("embed", "embedding", "input", vocab_size=info.vocab_size, dim=dim, **words)
    encoder, pooling = genome["encoder"], genome["pool"]
    if encoder == "cnn":
        return [p for k in genome["kernels"]
                for p in net.global_pools(_ngrams(net, x, str(k), genome["filters"], k), pooling, str(k))]
    if encoder == "transformer":
        x = _transformer(net, x, genome, dim)
    elif genome["ngram"] > 1:
        x = _ngrams(net, x, "", genome["filters"], genome["ngram"])
    return net.global_pools(x, pooling)


def _ngrams(net: Net, x: str, suffix: str, filters: int, width: int) -> str:
    conv = net.add(f"conv{suffix}", "conv1d", x, filters=filters, kernel_size=width)
    return net.add(f"relu{suffix}", "activation", conv, fn="relu")


def _transformer(net: Net, x: str, genome: Arch, d: int) -> str:
    x = net.add("pos", "position_embedding", x)
    for b in range(genome["blocks"]):
        y = net.add(f"t{b}_att", "self_attention", net.add(f"t{b}_ln1", "layer_norm", x), num_heads=genome["heads"])
        x = net.add(f"t{b}_res1", "add", [x, y])
        y = net.add(f"t{b}_ff1", "dense", net.add(f"t{b}_ln2", "layer_norm", x), units=genome["ff"] * d)
        y = net.add(f"t{b}_ff2", "dense", net.add(f"t{b}_gelu", "activation", y, fn="gelu"), units=d)
        x = net.add(f"t{b}_res2", "add", [x, y])
    return net.add("ln_out", "layer_norm", x)


def _relevant(genome: Arch) -> list[str]:
    genes = list(ENCODER_GENES[genome["encoder"]])
    return genes[:1] if genome["encoder"] == "bag" and genome.get("ngram", 1) == 1 else genes


def _tidy(rng: np.random.Generator, genome: Arch) -> Arch:
    """Keep exactly the encoder genes that matter, drawing any that are missing."""
    if genome["encoder"] == "bag" and "ngram" not in genome:
        genome["ngram"] = pick(rng, NGRAMS)
    if genome["encoder"] == "ngrams":
        genome.pop("wide", None)
    relevant = _relevant(genome)
    for gene in {g for genes in ENCODER_GENES.values() for g in genes} - set(relevant):
        genome.pop(gene, None)
    for gene in relevant:
        if gene not in genome:
            genome[gene] = _random_kernels(rng) if gene == "kernels" else pick(rng, GRIDS[gene])
    return genome


def _random_kernels(rng: np.random.Generator) -> list[int]:
    return sorted(int(k) for k in rng.choice(CNN_KERNELS, size=int(rng.integers(2, 5)), replace=False))


def _toggle_kernel(rng: np.random.Generator, kernels: list[int]) -> list[int]:
    options = [sorted([*kernels, k]) for k in CNN_KERNELS if k not in kernels]
    options += [[k for k in kernels if k != drop] for drop in kernels] if len(kernels) > 2 else []
    return pick(rng, options)
