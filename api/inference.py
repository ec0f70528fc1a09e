"""Class probabilities from a stored model's ONNX export, with one onnxruntime session kept per recent model."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

import numpy as np
import onnxruntime as ort

_INPUT, _OUTPUT = "input", "probabilities"


class SessionCache:
    """onnxruntime CPU sessions of immutable models, by model id; the least recently used goes past `size`."""

    def __init__(self, size: int = 8) -> None:
        if size < 1:
            raise ValueError("a session cache needs room for at least one session")
        self.size = size
        self._sessions: OrderedDict[uuid.UUID, ort.InferenceSession] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def session(self, model_id: uuid.UUID, onnx: bytes) -> ort.InferenceSession:
        """The session of `model_id`, created from `onnx` unless it is cached."""
        with self._lock:
            found = self._sessions.get(model_id)
            if found is not None:
                self._sessions.move_to_end(model_id)
                return found
        created = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
        with self._lock:
            kept = self._sessions.setdefault(model_id, created)
            self._sessions.move_to_end(model_id)
            while len(self._sessions) > self.size:
                self._sessions.popitem(last=False)
        return kept

    def probabilities(self, model_id: uuid.UUID, onnx: bytes, batch: np.ndarray) -> np.ndarray:
        """The model's class probabilities [N, classes] (float32) for an input batch of the graph's dtype."""
        (out,) = self.session(model_id, onnx).run([_OUTPUT], {_INPUT: batch})
        return np.asarray(out, dtype=np.float32)


SESSIONS = SessionCache()
"""The API process's sessions."""
