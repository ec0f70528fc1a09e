"""Class probabilities from a stored model's ONNX export, with one runner (`domain.onnx_run.OnnxClassifier`) kept per
recent model."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

import numpy as np

from domain.onnx_run import OnnxClassifier


class SessionCache:
    """onnxruntime runners of immutable models, by model id; the least recently used goes past `size`."""

    def __init__(self, size: int = 8) -> None:
        if size < 1:
            raise ValueError("a session cache needs room for at least one session")
        self.size = size
        self._runners: OrderedDict[uuid.UUID, OnnxClassifier] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._runners)

    def runner(self, model_id: uuid.UUID, onnx: bytes) -> OnnxClassifier:
        """The runner of `model_id`, loaded from `onnx` unless it is cached (`ValueError`: not a netsynth export)."""
        with self._lock:
            found = self._runners.get(model_id)
            if found is not None:
                self._runners.move_to_end(model_id)
                return found
        created = OnnxClassifier(onnx)
        with self._lock:
            kept = self._runners.setdefault(model_id, created)
            self._runners.move_to_end(model_id)
            while len(self._runners) > self.size:
                self._runners.popitem(last=False)
        return kept

    def probabilities(self, model_id: uuid.UUID, onnx: bytes, batch: np.ndarray) -> np.ndarray:
        """The model's class probabilities [N, classes] (float32) for an input batch."""
        return self.runner(model_id, onnx).predict_proba(batch)


SESSIONS = SessionCache()
"""The API process's runners."""
