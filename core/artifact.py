"""The compressed model format: a pruned, weight-shared network in as few bytes as exact decoding allows.

Layout (``docs/compressed-format.md`` has the byte-level description)::

    "NSCZ"  version (u8 = 3)  header length H (u32 LE)  header (H bytes, zlib of compact JSON)  sections...

The header holds the spec and, for every variable in the canonical order (``params`` then ``batch_stats``,
paths sorted as :func:`core.tree.flatten` sorts them; shapes follow from the spec), one entry
``[mask, k, codecs, lengths]`` or ``[mask, k, codecs, lengths, width]``: ``mask`` 0 = every entry kept,
1 = bitmap, 2 = LEB128 gaps between kept positions, 3 = a bitmap of the rows (first axis) with any entry kept,
then a bitmap of the entries of those rows (whichever is smallest for the leaf; a table pruned by whole rows costs
about one bit per row); ``k`` 0 = the kept values stored as float32, else a codebook of ``k`` float32 values and
one index per kept entry, packed at ``width`` bits (absent: ``ceil(log2 k)``; where that does not divide a byte the
encoder also tries one byte per index, which the codecs' entropy coding compresses better: 32 k-means
buckets of Laplace-distributed weights take 3.7 bits per index instead of 4.6). Each section (mask, values or
codebook + indices) is stored, zlib'd, LZMA'd or byte-plane shuffled then LZMA'd, whichever is shortest
(:mod:`core.packing`). Versions 1 (no row masks, no shuffle) and 2 (no index width) are read too.
Pruned entries decode to +0.0, kept ones to their stored or codebook value, so decoding gives back the
dense variables bit for bit. Only float32 variables are supported (what the core trains).

References: Han et al., "Deep Compression: Compressing Deep Neural Networks with Pruning, Trained
Quantization and Huffman Coding", ICLR 2016 (https://arxiv.org/abs/1510.00149).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from core import packing, tree
from core.checkpoint import Checkpoint, flat_variables, variable_shapes
from core.errors import CheckpointError, SpecError
from core.graph import validate
from core.reparam import Reparam
from core.spec import Spec

MAGIC = b"NSCZ"
VERSION = 3
READS = (1, 2, 3)
BYTE = 8
NONE, BITMAP, GAPS, ROWS = 0, 1, 2, 3
_KINDS = ("params", "batch_stats")


def encode(spec: Spec, variables: Mapping[str, Any], reparam: Reparam | None = None) -> bytes:
    """Return the compressed bytes of a model: dense variables plus the masks and codebooks of ``reparam``.

    A masked parameter must be exactly +0.0 wherever its mask is 0, and a shared one equal to one codebook
    value per bucket where kept (as :func:`core.reparam.materialise` makes them); a shared leaf that is not
    falls back to stored values. Raises :class:`CheckpointError` when the variables do not fit the spec,
    are not float32, or are non-zero where masked.
    """
    try:
        graph = validate(spec)
    except SpecError as exc:
        raise CheckpointError(f"cannot encode a model whose spec is invalid: {exc}") from exc
    dense = flat_variables(graph, variables)
    r = reparam or Reparam()
    entries: list[list[Any]] = []
    sections: list[bytes] = []
    for kind in _KINDS:
        for path, arr in dense[kind].items():
            if arr.dtype != np.float32:
                raise CheckpointError(f"'{kind}/{path}' is {arr.dtype}; the format stores float32 only")
            mask = r.masks.get(path) if kind == "params" else None
            idx = r.indices.get(path) if kind == "params" else None
            k = int(r.sizes.get(path, 0)) if idx is not None else 0
            entry, parts = _encode_leaf(f"{kind}/{path}", arr, mask, idx, k)
            entries.append(entry)
            sections += parts
    header = {"spec": json.loads(spec.to_json(indent=None)), "leaves": entries}
    head = zlib.compress(json.dumps(header, separators=(",", ":")).encode(), 9)
    return MAGIC + struct.pack("<BI", VERSION, len(head)) + head + b"".join(sections)


def _encode_leaf(name: str, arr: np.ndarray, mask: Any, idx: Any, k: int) -> tuple[list[Any], list[bytes]]:
    flat = np.ascontiguousarray(arr).ravel()
    live = np.ones(flat.size, bool) if mask is None else np.asarray(mask).ravel() != 0
    if np.any(flat[~live].view(np.uint32) != 0):
        raise CheckpointError(f"'{name}' is not exactly +0.0 where its mask prunes it")
    squeezed: list[tuple[int, bytes]] = []  # (codec, payload) of each stream
    mask_code = NONE
    if not live.all():
        forms = [(sum(len(p) for _, p in packed), code, packed)
                 for code, raw in ((BITMAP, [packing.pack_bitmap(live)]), (GAPS, [packing.pack_gaps(live)]),
                                   (ROWS, _pack_rows(live, arr.shape)))
                 for packed in ([packing.squeeze(b) for b in raw],)]
        _, mask_code, squeezed = min(forms, key=lambda form: form[:2])
    kept = flat[live]
    codebook = _codebook(kept, np.asarray(idx).ravel()[live], k) if k else None
    width = None
    if codebook is None:
        k = 0
        squeezed.append(packing.squeeze(kept.astype("<f4").tobytes()))
    else:
        width, packed = _pack_indices(np.asarray(idx).ravel()[live], k)
        squeezed += [packing.squeeze(codebook.astype("<f4").tobytes()), packed]
    entry = [mask_code, k, [c for c, _ in squeezed], [len(p) for _, p in squeezed]]
    if width is not None and width != packing.bits_for(k):
        entry.append(width)
    return entry, [p for _, p in squeezed]


def _pack_indices(idx: np.ndarray, k: int) -> tuple[int, tuple[int, bytes]]:
    """``(width, (codec, payload))``: the indices packed at ``ceil(log2 k)`` bits or, when that width does not divide
    a byte, at one byte each, whichever is shorter after :func:`core.packing.squeeze` (at 1, 2 and 4 bits the codecs
    already see whole indices in each byte, and one byte each measured no shorter, ``docs/compressed-format.md``)."""
    bits = packing.bits_for(k)
    widths = {bits, BYTE} if 0 < bits < BYTE and BYTE % bits else {bits}
    forms = [(len(out[1]), w, out) for w in sorted(widths) for out in (packing.squeeze(packing.pack_bits(idx, w)),)]
    _, width, packed = min(forms)
    return width, packed


def _pack_rows(live: np.ndarray, shape: tuple[int, ...]) -> list[bytes]:
    """The ``ROWS`` mask streams: which rows (first axis) keep anything, then which entries of those rows."""
    by_row = live.reshape(shape[0] if shape else 1, -1)
    rows = np.asarray(by_row.any(axis=1))
    return [packing.pack_bitmap(rows), packing.pack_bitmap(by_row[rows])]


def _unpack_rows(streams: list[bytes], count: int, n_rows: int) -> np.ndarray:
    rows = packing.unpack_bitmap(streams.pop(0), n_rows)
    width = count // max(n_rows, 1)
    by_row = np.zeros((n_rows, width), bool)
    by_row[rows] = packing.unpack_bitmap(streams.pop(0), int(rows.sum()) * width).reshape(-1, width)
    return by_row.reshape(-1)


def _codebook(kept: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray | None:
    """Each bucket's one value (0 when empty), or None when a bucket holds two different values."""
    if idx.size and (idx.min() < 0 or idx.max() >= k):
        return None
    codebook = np.zeros(k, np.float32)
    codebook[idx[::-1]] = kept[::-1]  # the first kept entry of each bucket wins
    if codebook[idx].view(np.uint32).tobytes() != kept.view(np.uint32).tobytes():
        return None
    return codebook


def decode(data: bytes) -> Checkpoint:
    """Return the model :func:`encode` wrote: spec, dense variables (bit-exact) and the masks and shared
    weights as a :class:`Reparam` (indices 0 at pruned entries). Raises :class:`CheckpointError` for bytes
    that are not a valid artifact."""
    data = bytes(data)
    if len(data) < 9 or data[:4] != MAGIC:
        raise CheckpointError("not a netsynth compressed model (bad magic)")
    version, head_len = struct.unpack("<BI", data[4:9])
    if version not in READS:
        raise CheckpointError(f"unknown compressed format version {version}; this netsynth reads {READS}")
    try:
        header = json.loads(zlib.decompress(data[9:9 + head_len]))
        spec = Spec.from_dict(header["spec"])
        graph = validate(spec)
        entries = list(header["leaves"])
    except (zlib.error, ValueError, KeyError, TypeError, SpecError) as exc:
        raise CheckpointError(f"corrupt compressed model header: {exc}") from exc
    shapes = variable_shapes(graph)
    names = [(kind, path, shape) for kind in _KINDS for path, shape in sorted(shapes[kind].items())]
    if len(entries) != len(names):
        raise CheckpointError(f"the header has {len(entries)} leaves, the spec needs {len(names)}")
    offset = 9 + head_len
    out: dict[str, dict[str, np.ndarray]] = {kind: {} for kind in _KINDS}
    masks: dict[str, Any] = {}
    indices: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    try:
        for (kind, path, shape), entry in zip(names, entries, strict=True):
            mask_code, k, codecs, lengths, *rest = entry
            if len(rest) > (version >= 3):
                raise ValueError(f"a version {version} leaf entry has {4 + len(rest)} fields")
            width = int(rest[0]) if rest else packing.bits_for(int(k)) if k else 0
            streams = []
            for codec, length in zip(codecs, lengths, strict=True):
                if offset + length > len(data):
                    raise CheckpointError("truncated compressed model")
                streams.append(packing.unsqueeze(int(codec), data[offset:offset + length]))
                offset += length
            dense, live, idx = _decode_leaf(shape, mask_code, int(k), width, streams)
            out[kind][path] = dense.reshape(shape)
            if mask_code != NONE:
                masks[path] = jnp.asarray(live.reshape(shape).astype(np.float32))
            if k:
                indices[path], sizes[path] = jnp.asarray(idx.reshape(shape).astype(np.int32)), int(k)
    except (ValueError, IndexError, TypeError, EOFError) as exc:
        raise CheckpointError(f"corrupt compressed model: {exc}") from exc
    if offset != len(data):
        raise CheckpointError("the compressed model has trailing bytes")
    variables: dict[str, Any] = {"params": tree.unflatten(out["params"])}
    if out["batch_stats"]:
        variables["batch_stats"] = tree.unflatten(out["batch_stats"])
    return Checkpoint(spec, variables, Reparam(masks, indices, sizes))


def _decode_leaf(shape: tuple[int, ...], mask_code: int, k: int, width: int, streams: list[bytes]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    count = int(np.prod(shape, dtype=np.int64))
    if mask_code == NONE:
        live = np.ones(count, bool)
    elif mask_code == ROWS:
        live = _unpack_rows(streams, count, shape[0] if shape else 1)
    elif mask_code in (BITMAP, GAPS):
        live = (packing.unpack_bitmap if mask_code == BITMAP else packing.unpack_gaps)(streams.pop(0), count)
    else:
        raise ValueError(f"unknown mask code {mask_code}")
    n = int(live.sum())
    idx = np.zeros(count, np.int64)
    if k:
        codebook = np.frombuffer(streams[0], "<f4")
        if codebook.size != k:
            raise ValueError(f"a codebook of {k} values has {codebook.size}")
        if not packing.bits_for(k) <= width <= 32:
            raise ValueError(f"indices of a codebook of {k} values cannot be {width} bits wide")
        idx[live] = packing.unpack_bits(streams[1], width, n)
        if n and idx[live].max() >= k:
            raise ValueError("an index exceeds its codebook")
        values = codebook[idx[live]]
    else:
        values = np.frombuffer(streams[0], "<f4")
    if values.size != n:
        raise ValueError(f"expected {n} kept values, got {values.size}")
    dense = np.zeros(count, np.float32)
    dense[live] = values
    return dense, live, idx
