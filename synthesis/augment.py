"""Which label-preserving augmentations suit a dataset, decided on its own validation rows.

Left-right flips are right for photos of objects and clothes and wrong for digits and letters (a mirrored 2 is
not a 2). Whether a dataset's labels survive mirroring is measured, not assumed: a network trained without flips
is compared on the validation images and on their mirror images. When mirroring keeps most of what the network
learned above chance, the classes look alike both ways round and flips are a fair augmentation (Simard et al.,
"Best Practices for Convolutional Neural Networks Applied to Visual Document Analysis", ICDAR 2003, on choosing
transformations the labels are invariant to; Cubuk et al., "AutoAugment", CVPR 2019, on searching them per
dataset). The test costs one evaluation pass over the mirrored validation rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from core.spec import Spec

FLIP_RETAINED = 0.8
"""The least share of its accuracy above chance a network trained without flips must keep on the mirrored
validation images for flips to be used. Measured (bench/README.md): digits and MNIST keep far less, natural
photos nearly all."""
MIN_ROWS = 100
"""Fewer validation rows than this decide nothing: flips stay off."""


@dataclass(frozen=True)
class FlipTest:
    """A network's validation accuracy on the images as they are and mirrored left-right, and the accuracy of
    always answering the commonest class."""

    accuracy: float
    mirrored: float
    chance: float

    @property
    def retained(self) -> float:
        """The share of the accuracy above chance that survives mirroring (0 when there is none to keep)."""
        above = self.accuracy - self.chance
        return max(self.mirrored - self.chance, 0.0) / above if above > 0 else 0.0

    @property
    def flip(self) -> bool:
        """Whether flips preserve the labels well enough to train with them."""
        return self.retained >= FLIP_RETAINED

    def to_dict(self) -> dict[str, Any]:
        """The figures and the decision, as the search log's `augmentation` event shows them."""
        return {"flip": self.flip, "val_accuracy": round(self.accuracy, 4),
                "mirrored_val_accuracy": round(self.mirrored, 4), "chance": round(self.chance, 4),
                "retained": round(self.retained, 4), "threshold": FLIP_RETAINED}


def flip_test(spec: Spec, variables: dict[str, Any], accuracy: float, data: Dataset) -> FlipTest | None:
    """The flip test of a network trained without flips whose validation accuracy on images `data` ([N, H, W, C])
    was measured as `accuracy` (only the mirrored images are evaluated here); None when the data is not images or
    has too few validation rows to tell."""
    if data.x_val.ndim != 4 or len(data.y_val) < MIN_ROWS:
        return None
    mirrored = evaluate(build(spec), variables, np.ascontiguousarray(data.x_val[:, :, ::-1, :]),
                        data.y_val)["accuracy"]
    chance = float(np.bincount(data.y_val).max() / len(data.y_val))
    return FlipTest(accuracy, mirrored, chance)
