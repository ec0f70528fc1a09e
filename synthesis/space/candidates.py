"""The search space as the search sees it: seeds, random draws, mutations and specs of candidates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.analysis import analyse
from core.spec import Spec
from synthesis.space import image, text
from synthesis.space.hparams import mutate_hparams, sample_hparams, seed_hparams
from synthesis.space.types import Candidate, SpaceInfo

Arch = dict[str, Any]
HPARAM_SHARE = 0.25
"""Share of mutations that change a training hyper-parameter rather than the architecture."""


@dataclass(frozen=True)
class _Space:
    seeds: dict[str, Arch]
    sample: Callable[[np.random.Generator], Arch]
    mutate: Callable[[np.random.Generator, Arch], Arch]
    shrink: Callable[[np.random.Generator, Arch], Arch | None]
    to_spec: Callable[[Arch, SpaceInfo, str], Spec]


_SPACES = {"image": _Space(image.SEEDS, image.sample, image.mutate, image.shrink, image.to_spec),
           "text": _Space(text.SEEDS, text.sample, text.mutate, text.shrink, text.to_spec)}


def seeds(info: SpaceInfo) -> list[Candidate]:
    """Return the known-good designs of ``info``'s modality, with the default training hyper-parameters (for text
    with an n-gram bag, the linear floor first: `synthesis.linear`)."""
    designs = _SPACES[info.modality].seeds
    if info.modality == "text" and info.bag_vocab:  # the linear floor first, where the input has its n-gram bag
        designs = {"linear": text.LINEAR, **designs}
    rng = np.random.default_rng(0)  # a seed too big for the task shrinks the same way every time
    return [Candidate(copy.deepcopy(arch), replace(seed_hparams(info, name), label_smoothing=0.0), f"seed:{name}")
            if text.is_fitted(arch) else Candidate(_sized(rng, copy.deepcopy(arch), info), seed_hparams(info, name),
                                                   f"seed:{name}")
            for name, arch in designs.items()]


def _sized(rng: np.random.Generator, arch: Arch, info: SpaceInfo) -> Arch:
    """A text genome shrunk step by step until its network fits `text.network_limit` (images: `arch` itself)."""
    if info.modality != "text":
        return arch
    limit = text.network_limit(info)
    while analyse(text.to_spec(arch, info, "sized")).params > limit:
        smaller = text.shrink(rng, arch)
        if smaller is None:
            break
        arch = smaller
    return arch


def sample(rng: np.random.Generator, info: SpaceInfo) -> Candidate:
    """Return a random valid candidate of ``info``'s modality."""
    return Candidate(_sized(rng, _SPACES[info.modality].sample(rng), info), sample_hparams(rng, info), "random")


def mutate(rng: np.random.Generator, parent: Candidate, info: SpaceInfo) -> Candidate:
    """Return a valid child of ``parent`` that differs from it in one or two genes (architecture or training)."""
    space = _SPACES[info.modality]
    while True:
        arch, hparams = parent.arch, parent.hparams
        for _ in range(1 if rng.random() < 0.7 else 2):
            if rng.random() < HPARAM_SHARE:
                hparams = mutate_hparams(rng, hparams, info)
            else:
                arch = space.mutate(rng, arch)
        child = Candidate(_sized(rng, arch, info), hparams, f"mutation:{parent.id}")
        if child.id != parent.id:
            return child


def shrink(rng: np.random.Generator, candidate: Candidate, info: SpaceInfo) -> Candidate | None:
    """Return ``candidate`` with its architecture one step smaller (same origin and training), or None when
    no smaller genome of its kind exists."""
    arch = _SPACES[info.modality].shrink(rng, candidate.arch)
    return None if arch is None else Candidate(arch, candidate.hparams, candidate.origin)


def is_fitted(candidate: Candidate) -> bool:
    """Whether ``candidate``'s weights are fitted outside the search's training (the text floor, an ensemble):
    the search neither trains, extrapolates nor mutates it."""
    return candidate.arch.get("kind") == "text" and text.is_fitted(candidate.arch)


def to_spec(candidate: Candidate, info: SpaceInfo) -> Spec:
    """Return the core spec of ``candidate`` for the task ``info`` describes."""
    kind = candidate.arch.get("kind")
    if kind != info.modality:
        raise ValueError(f"candidate {candidate.id} is a {kind!r} genome, the task is {info.modality!r}")
    return _SPACES[info.modality].to_spec(candidate.arch, info, f"candidate-{candidate.id}")
