"""Run an exported network with onnxruntime, from raw numpy input to class probabilities: the one runner of the
API's predict, `netsynth predict`, the engine's export parity check and the benchmarks.

Example::

    clf = OnnxClassifier("model.onnx")
    proba = clf.predict_proba(image_uint8)     # [1, num_classes]; batches work too

Needs only numpy and onnxruntime (no JAX). Reference: onnxruntime Python API,
https://onnxruntime.ai/docs/api/python/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

INPUT_NAME, PROBABILITIES = "input", "probabilities"
"""Tensor names of a netsynth export's input and class probabilities (:mod:`core.onnx_export` writes them)."""

_INT32 = np.iinfo(np.int32)


class OnnxClassifier:
    """An exported netsynth model loaded into an onnxruntime CPU session."""

    def __init__(self, model: str | os.PathLike[str] | bytes) -> None:
        """Load an ONNX model from a file path or from its serialised bytes.

        Raises ``ValueError`` when it is not an ONNX model or not a netsynth export.
        """
        data = bytes(model) if isinstance(model, bytes | bytearray) else Path(model).read_bytes()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(data, sess_options=options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types (InvalidProtobuf, Fail, ...)
            raise ValueError(f"not a loadable ONNX model: {exc}") from exc
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name: o for o in self.session.get_outputs()}
        if INPUT_NAME not in inputs or PROBABILITIES not in outputs:
            raise ValueError(f"not a netsynth export: needs an input '{INPUT_NAME}' and an output "
                             f"'{PROBABILITIES}', has {sorted(inputs)} -> {sorted(outputs)}")
        inp = inputs[INPUT_NAME]
        self.input_shape: tuple[int, ...] = tuple(int(d) for d in inp.shape[1:])
        """Shape of one example (without the batch axis)."""
        self.input_dtype = np.dtype(np.int32 if inp.type == "tensor(int32)" else np.float32)
        """Element dtype the graph reads: float32, or int32 for token ids."""
        self.num_classes = int(outputs[PROBABILITIES].shape[-1])
        """Number of classes (the length of each probability vector)."""

    def predict_proba(self, x: Any) -> np.ndarray:
        """Return class probabilities ``[N, num_classes]`` (float32) for one example or a batch.

        ``x`` of the model's example rank gets a batch axis of 1; values are cast to the graph's
        dtype (e.g. uint8 pixels to float32, int64 ids to int32). Raises ``ValueError`` when the
        shape does not fit or token ids are not integers.
        """
        batch = self._prepare(x)
        if batch.shape[0] == 0:
            return np.zeros((0, self.num_classes), np.float32)
        (proba,) = self.session.run([PROBABILITIES], {INPUT_NAME: batch})
        return np.asarray(proba, np.float32)

    def predict(self, x: Any) -> np.ndarray:
        """Return the most probable class of each example, ``[N]`` int64."""
        return np.asarray(np.argmax(self.predict_proba(x), axis=-1), np.int64)

    def _prepare(self, x: Any) -> np.ndarray:
        arr = np.asarray(x)
        rank = len(self.input_shape)
        if arr.ndim == rank:
            arr = arr[None]
        if arr.ndim != rank + 1 or tuple(arr.shape[1:]) != self.input_shape:
            raise ValueError(f"expected one example of shape {list(self.input_shape)} or a batch "
                             f"[N, {', '.join(map(str, self.input_shape))}], got {list(arr.shape)}")
        if self.input_dtype == np.float32:
            if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
                raise ValueError(f"expected numeric input, got dtype {arr.dtype}")
            return np.ascontiguousarray(arr, np.float32)
        if np.issubdtype(arr.dtype, np.floating):
            if not np.all(np.isfinite(arr)) or not np.array_equal(arr, np.round(arr)):
                raise ValueError("token ids must be integers")
        elif not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
            raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
        # ids beyond int32 are out of any vocabulary: clip so that they stay out of it
        floaty = arr.dtype.kind == "f" or arr.dtype == np.uint64
        wide = arr.astype(np.float64 if floaty else np.int64)
        return np.ascontiguousarray(np.clip(wide, _INT32.min, _INT32.max), np.int32)
