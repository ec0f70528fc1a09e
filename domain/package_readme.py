"""The README.md a model package ships with: what each file is and how to load the model, per variant."""

from __future__ import annotations

README = """\
# A netsynth model

| File | What it holds |
|---|---|
| `spec.json` | The network spec: input, graph of layers, output (netsynth's JSON model format). |
WEIGHTS_ROW
| `model.onnx` | The same network exported to ONNX, runnable without netsynth. |
| `preprocessing.json` | How raw inputs become the network's input (image shape, or the text encoder). |
| `labels.json` | The class names, in the order of the model's outputs. |
| `metrics.json` | What training measured (e.g. accuracy on held-out data). |
| `report/` | The explainability report (when the job had time for it): `report.html`, `report.json`, images. |

## Predicting with the netsynth command line

```
netsynth predict MODEL_DIR INPUT --output preds.csv
```

`MODEL_DIR` is this folder (or this zip); `INPUT` a zip or folder of PNG / JPEG images or an `.npz` with `x`
for an image model, a CSV with a `text` column or a TSV / TXT of texts for a text model. Labels (class
folders, `y`, a `label` column, `text<TAB>label`) are optional; with them the accuracy is printed.

LOADING

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
  `preprocessing.json` (C = 1 for grayscale, 3 for RGB). The graph normalises the pixels itself (per
  channel). An image of another size is first brought to `H x W` as `resize` in `preprocessing.json`
  says: `centre-crop` scales it (Pillow, bilinear) to the smallest size covering `H x W` with its aspect
  ratio kept and cuts out the centre; `stretch` (or no `resize`) scales each axis on its own.
- Text: `x` is int32 token ids `[N, L]` from the encoder in `preprocessing.json`: each text is
  lower-cased and split into words (regular expression `\\w+`); a word's id is its index in `words`
  plus 2 (0 = padding, 1 = unknown word); a word outside `words` becomes up to four ids of its hashed
  character trigrams (`subword_buckets` ids after the words; see `domain.ingest.text.TextEncoder`); the ids
  are cut or right-padded with 0 to `max_length`. Encoders of version 3 with `ngram_buckets` > 0 append
  `bag_length` more ids: the text's distinct word 1-2-grams and character 2-5-grams (words padded with a
  space), each `1 + crc32(feature) % ngram_buckets` (features spelt `w word`, `b word word`, `c chars`),
  sorted, cut or right-padded with 0 (`domain.ingest.text.ngram_features`). Version 4 with `word_buckets` > 0
  hashes word features to `1 + crc32(feature) % word_buckets` and character features to
  `1 + word_buckets + crc32(feature) % (ngram_buckets - word_buckets)`. Version 5 hashes nothing: a feature's
  id is 1 + its index in `features` (the word features first, `word_buckets` of them), and a feature not in
  `features` is left out.
"""

VARIANT_README = {
    "dense": ("| `weights.safetensors` | The trained weights, with the spec in the safetensors metadata. |",
              """## Loading the weights with netsynth

```python
from core import checkpoint, model

ckpt = checkpoint.load("weights.safetensors")  # or checkpoint.from_bytes(data)
net = model.build(ckpt.spec)
logits, _ = net.apply(ckpt.variables, x)
```
"""),
    "compressed": ("| `model.nsz` | The compressed model (pruned, weight-shared; netsynth's compressed format): "
                   "its size is the model's bytes. |",
                   """## Loading the compressed model with netsynth

`model.nsz` holds the spec, the masks of the pruned weights, each layer's codebook of shared values and the
bit-packed indices (the byte layout is `docs/compressed-format.md` in netsynth's repository). Decoding gives
back the dense-equivalent weights bit for bit (pruned weights are zero); `model.onnx` is the same network.
`metrics.json` has the compression's before / after figures.

```python
from core import artifact, model

ckpt = artifact.decode(open("model.nsz", "rb").read())
net = model.build(ckpt.spec)
logits, _ = net.apply(ckpt.variables, x)
```
"""),
}


def readme(variant: str) -> str:
    """The README of a package of ``variant`` (a key of :data:`VARIANT_README`)."""
    row, loading = VARIANT_README[variant]
    return README.replace("WEIGHTS_ROW", row).replace("LOADING", loading)
