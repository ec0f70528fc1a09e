"""What a search space needs to know about the task, and the candidates it proposes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from core.train_config import TrainConfig

MODALITIES = ("image", "text")
BATCH_SIZES = (32, 64, 128)
SGD_WARMUP = 0.15
"""The share of its steps over which an SGD candidate's learning rate warms up (AdamW: core's default)."""


@dataclass(frozen=True)
class SpaceInfo:
    """The task as the search spaces see it.

    ``input_shape`` is ``(H, W, C)`` for images and ``(L,)`` for text (token ids); float image
    inputs are mapped to ``x * scale + offset`` inside every network (each one number, or a tuple of one
    per channel: see :func:`synthesis.normalise.channel_normalisation`); ``vocab_size`` is the number of
    token ids of a text task's word sequence. A text input may end in a bag of n-gram feature ids from
    position ``bag_start`` on, ids in ``[1, bag_vocab)`` with 0 as padding (``bag_vocab`` 0: no bag); word
    features' ids below ``bag_words`` and character features' from it on (0: one block of both).
    """

    modality: str
    input_shape: tuple[int, ...]
    num_classes: int
    vocab_size: int = 0
    scale: float | tuple[float, ...] = 1.0
    offset: float | tuple[float, ...] = 0.0
    bag_start: int = 0
    bag_vocab: int = 0
    bag_words: int = 0

    def __post_init__(self) -> None:
        rank = {"image": 3, "text": 1}.get(self.modality)
        if rank is None:
            raise ValueError(f"no search space for modality {self.modality!r}; spaces exist for {MODALITIES}")
        if len(self.input_shape) != rank or min(self.input_shape) < 1:
            raise ValueError(f"a {self.modality} input needs {rank} positive dimensions, got {self.input_shape}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
        if self.modality == "text" and self.vocab_size < 1:
            raise ValueError("a text task needs vocab_size >= 1")
        if self.bag_vocab and not 0 < self.bag_start < self.input_shape[0]:
            raise ValueError(f"a bag must start inside the input's {self.input_shape[0]} positions after the word "
                             f"sequence, got bag_start {self.bag_start}")
        if self.bag_words and not 1 < self.bag_words < self.bag_vocab:
            raise ValueError(f"the bag's character block must start inside its ids [1, {self.bag_vocab}), got "
                             f"bag_words {self.bag_words}")

    @property
    def sequence_length(self) -> int:
        """The positions of a text task's word sequence (the input before its bag, if any)."""
        return self.bag_start if self.bag_vocab else self.input_shape[0]

    @property
    def max_shift(self) -> int:
        """The largest random shift (px) worth searching: 0..3, scaled to the smaller image side; 0 for text."""
        if self.modality != "image":
            return 0
        return min(3, max(1, round(min(self.input_shape[:2]) / 10)))


@dataclass(frozen=True)
class HParams:
    """The training hyper-parameters of a candidate: ``optimizer`` is ``"adamw"`` or ``"sgd"`` (Nesterov momentum),
    as core trains with them (:func:`core.training.make_optimizer`); ``learning_rate`` is that optimizer's peak."""

    learning_rate: float
    weight_decay: float
    max_shift: int
    label_smoothing: float
    batch_size: int
    optimizer: str = "adamw"

    def to_train_config(self, epochs: int, seed: int, time_limit_s: float | None,
                        patience: int | None) -> TrainConfig:
        """Return the core training configuration that trains with these hyper-parameters (SGD warms up over
        :data:`SGD_WARMUP` of its steps, as the hand-written CNN does at its high rate)."""
        warmup = SGD_WARMUP if self.optimizer == "sgd" else TrainConfig.warmup_fraction
        return TrainConfig(epochs=epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
                           weight_decay=self.weight_decay, label_smoothing=self.label_smoothing,
                           max_shift=self.max_shift, patience=patience, seed=seed, time_limit_s=time_limit_s,
                           optimizer=self.optimizer, warmup_fraction=warmup)


def genome_id(arch: dict[str, Any], hparams: HParams) -> str:
    """Return a short stable hash of a genome (architecture and hyper-parameters). The default optimizer (AdamW) is
    left out of the hash, so a genome's id is the same whether its optimizer is spelt out or left to the default."""
    genes = asdict(hparams)
    if genes["optimizer"] == "adamw":
        del genes["optimizer"]
    text = json.dumps({"arch": arch, "hparams": genes}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Candidate:
    """One point of a search space: an architecture genome (JSON), training hyper-parameters and where it
    came from (``seed:<name>``, ``random`` or ``mutation:<parent id>``). ``id`` hashes arch and hparams,
    so equal genomes share an id whatever their origin."""

    arch: dict[str, Any]
    hparams: HParams
    origin: str
    id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", genome_id(self.arch, self.hparams))

    def __hash__(self) -> int:
        return hash((self.id, self.origin))

    def to_dict(self) -> dict[str, Any]:
        """Return the candidate as a JSON-ready dictionary."""
        return {"id": self.id, "origin": self.origin, "arch": self.arch, "hparams": asdict(self.hparams)}

    def to_json(self) -> str:
        """Return the candidate as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Candidate:
        """Rebuild a candidate from :meth:`to_dict`'s output; ``ValueError`` when its id does not match."""
        candidate = cls(doc["arch"], HParams(**doc["hparams"]), doc["origin"])
        if "id" in doc and doc["id"] != candidate.id:
            raise ValueError(f"candidate id {doc['id']!r} does not match its genome (hash {candidate.id!r})")
        return candidate

    @classmethod
    def from_json(cls, text: str | bytes) -> Candidate:
        """Parse :meth:`to_json`'s output back into an equal candidate."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("a candidate must be a JSON object")
        return cls.from_dict(doc)
