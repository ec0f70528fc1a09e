"""The native download of a trained model: one zip with its spec, weights, ONNX graph, labels and instructions."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from store.models import TrainedModel

README = """\
# A netsynth model

| File | What it holds |
|---|---|
| `spec.json` | The network spec: input, graph of layers, output (netsynth's JSON model format). |
| `weights.safetensors` | The trained weights, with the spec in the safetensors metadata. |
| `model.onnx` | The same network exported to ONNX, runnable without netsynth. |
| `preprocessing.json` | How raw inputs become the network's input (image shape, or the text encoder). |
| `labels.json` | The class names, in the order of the model's outputs. |
| `metrics.json` | What training measured (e.g. accuracy on held-out data). |

## Loading the weights with netsynth

```python
from core import checkpoint, model

ckpt = checkpoint.load("weights.safetensors")  # or checkpoint.from_bytes(data)
net = model.build(ckpt.spec)
logits, _ = net.apply(ckpt.variables, x)
```

## Running model.onnx with onnxruntime

```python
import json
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
labels = json.load(open("labels.json"))
(probabilities,) = session.run(["probabilities"], {"input": x})
predicted = [labels[i] for i in probabilities.argmax(axis=-1)]
```

The graph's input is named `input`; its output `probabilities` is `[N, classes]` (softmax; `logits` is
there too).

- Images: `x` is raw pixel values 0-255 as float32 `[N, H, W, C]`, with `[H, W, C]` the `shape` in
  `preprocessing.json` (C = 1 for grayscale, 3 for RGB). The graph scales the pixels itself.
- Text: `x` is int32 token ids `[N, L]` from the encoder in `preprocessing.json`: each text is
  lower-cased and split into words (regular expression `\\w+`); a word's id is its index in `words`
  plus 2 (0 = padding, 1 = unknown word); the ids are cut or right-padded with 0 to `max_length`.
"""


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")


def native_package(model: TrainedModel) -> bytes:
    """The zip of `model`: spec.json, weights.safetensors, model.onnx, preprocessing.json, labels.json,
    metrics.json and README.md."""
    files = {
        "README.md": README.encode("utf-8"),
        "spec.json": _json(model.spec),
        "weights.safetensors": bytes(model.weights),
        "model.onnx": bytes(model.onnx),
        "preprocessing.json": _json(model.preprocessing),
        "labels.json": _json(list(model.classes)),
        "metrics.json": _json(model.metrics),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()
