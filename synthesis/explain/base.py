"""The one small interface every attribution method implements, and the registry that names them.

A method explains a batch of images (one float per pixel, ``[N, H, W]``) or of texts (one float per
whitespace-separated word), always for a given target class per input; positive is evidence for the target.
A new method is one module: a class with these members, added to :data:`METHODS` by :func:`register`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from synthesis.explain.subject import Subject


class Explainer(Protocol):
    """An attribution method: its name, the modalities it explains, and one function per modality."""

    name: str
    modalities: frozenset[str]

    def images(self, subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """``[N, H, W]`` float32 attributions of images ``[N, H, W, C]`` (raw pixels) to the target classes."""
        ...

    def texts(self, subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
        """Per text, float32 attributions of its words (``text.split()``) to the target class."""
        ...


METHODS: dict[str, Explainer] = {}
"""The registered methods by name (`netsynth explain --method`)."""

E = TypeVar("E", bound=Explainer)


def register(explainer: E) -> E:
    """Add a method to :data:`METHODS` under its name."""
    if explainer.name in METHODS:
        raise ValueError(f"an explanation method named {explainer.name!r} is registered already")
    METHODS[explainer.name] = explainer
    return explainer


def method(name: str, modality: str) -> Explainer:
    """The registered method `name` for inputs of `modality`; ValueError naming the choices otherwise."""
    found = METHODS.get(name)
    names = sorted(n for n, m in METHODS.items() if modality in m.modalities)
    if found is None or modality not in found.modalities:
        raise ValueError(f"{name!r} does not explain {modality} models; choose one of {', '.join(names)}")
    return found
