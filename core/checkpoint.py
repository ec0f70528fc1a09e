"""Saved models: the spec as JSON plus every array in one safetensors payload.

Tensor names: ``params/<path>`` and ``batch_stats/<path>`` for dense arrays (paths as in
:mod:`core.tree`), ``masks/<path>`` for pruning masks, and ``codebook/<path>`` + ``indices/<path>``
for a shared-weight leaf, which is stored as its ``k`` codebook values and an index array of the
smallest unsigned dtype that holds ``k`` instead of the dense array. The safetensors metadata holds
the format name and version, the spec JSON and, when there is one, the :class:`Reparam`'s sizes and
original dtypes, so that loading gives back bit-identical arrays.

References: safetensors format, https://huggingface.co/docs/safetensors.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from core import tree
from core.errors import CheckpointError, SpecError
from core.graph import Graph, validate
from core.ops import OPS
from core.reparam import Reparam, codebook_of, materialise
from core.spec import Spec

FORMAT = "netsynth.checkpoint"
FORMAT_VERSION = 1
_KINDS = ("params", "batch_stats")


@dataclass(frozen=True)
class Checkpoint:
    """A loaded model: its spec, dense variables (numpy arrays) and its :class:`Reparam`, if any."""

    spec: Spec
    variables: dict[str, Any]
    reparam: Reparam | None = None


def variable_shapes(graph: Graph) -> dict[str, dict[str, tuple[int, ...]]]:
    """Return a model's variable shapes: ``{"params": {path: shape}, "batch_stats": ...}``."""
    out: dict[str, dict[str, tuple[int, ...]]] = {"params": {}, "batch_stats": {}}
    for node in graph.order:
        op, types = OPS[node.op], graph.input_types(node)
        for kind, shapes in (("params", op.params(node.params, types)),
                             ("batch_stats", op.state(node.params, types))):
            out[kind].update({p: tuple(s) for p, s in tree.flatten({node.id: shapes}).items()})
    return out


def flat_variables(graph: Graph, variables: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Return ``{"params": {path: array}, "batch_stats": ...}`` as numpy arrays.

    Raises :class:`CheckpointError` when a variable is missing, extra or misshapen for the graph.
    """
    expected = variable_shapes(graph)
    dense = {kind: {p: np.asarray(a) for p, a in tree.flatten(variables.get(kind, {})).items()}
             for kind in _KINDS}
    for kind in _KINDS:
        _check_names(kind, set(dense[kind]), set(expected[kind]))
        for path, arr in dense[kind].items():
            _check_shape(f"{kind}/{path}", arr.shape, expected[kind][path])
    return dense


def to_bytes(spec: Spec | Graph, variables: dict[str, Any],
             reparam: Reparam | None = None) -> bytes:
    """Serialise a model (spec, dense variables, optional masks and shared weights) to bytes.

    Raises :class:`CheckpointError` when the variables or the reparam do not fit the spec.
    """
    graph = spec if isinstance(spec, Graph) else _validate(spec)
    dense = flat_variables(graph, variables)
    tensors = {f"batch_stats/{p}": a for p, a in dense["batch_stats"].items()}
    info: dict[str, Any] = {"sizes": {}, "mask_dtypes": {}, "index_dtypes": {}}
    params = dense["params"]
    if reparam is not None:
        unknown = sorted((set(reparam.masks) | set(reparam.indices)) - set(params))
        if unknown:
            raise CheckpointError(f"the reparam names parameters the spec does not have: {unknown}")
        for path, mask in reparam.masks.items():
            m = np.asarray(mask)
            _check_shape(f"masks/{path}", m.shape, params[path].shape)
            binary = bool(np.all((m == 0) | (m == 1)))
            tensors[f"masks/{path}"] = m.astype(np.uint8) if binary else m
            info["mask_dtypes"][path] = m.dtype.name
        for path, idx in reparam.indices.items():
            tensors.update(_shared(path, params, idx, reparam, info))
    tensors.update({f"params/{p}": a for p, a in params.items()})
    original = spec.spec if isinstance(spec, Graph) else spec
    metadata = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
                "spec": original.to_json(indent=None)}
    if reparam is not None:
        metadata["reparam"] = json.dumps(info)
    contiguous = {name: np.ascontiguousarray(a) for name, a in tensors.items()}
    return _ordered_header(bytes(safetensors.numpy.save(contiguous, metadata=metadata)))


def _ordered_header(data: bytes) -> bytes:
    """``data`` (a safetensors file) with its JSON header's keys sorted, padded with spaces to 8 bytes as the format
    asks: safetensors writes the metadata's keys in an order that changes from one process to the next, so the same
    model gave different bytes. The tensors' offsets count from the end of the header and stay valid."""
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + n:]


def _shared(path: str, params: dict[str, np.ndarray], indices: Any, reparam: Reparam,
            info: dict[str, Any]) -> dict[str, np.ndarray]:
    """Return the tensors of one shared leaf; pops its dense array when the codebook rebuilds it."""
    idx = np.asarray(indices)
    dense = params[path]
    _check_shape(f"indices/{path}", idx.shape, dense.shape)
    k = int(reparam.sizes.get(path, 0))
    if k < 1 or (idx.size > 0 and (int(idx.min()) < 0 or int(idx.max()) >= k)):
        raise CheckpointError(f"indices of '{path}' must lie in [0, k) with k = sizes[path] >= 1")
    info["sizes"][path] = k
    info["index_dtypes"][path] = idx.dtype.name
    out = {f"indices/{path}": idx.astype(_index_dtype(k))}
    mask = np.asarray(reparam.masks[path]) if path in reparam.masks else None
    codebook = np.asarray(codebook_of(jnp.asarray(dense), jnp.asarray(idx.astype(np.int32)), k))
    rebuilt = _materialise(path, codebook, idx, mask, k)
    if rebuilt.dtype == dense.dtype and rebuilt.tobytes() == dense.tobytes():
        out[f"codebook/{path}"] = codebook
        del params[path]
    return out


def _materialise(path: str, codebook: np.ndarray, idx: np.ndarray, mask: np.ndarray | None,
                 k: int) -> np.ndarray:
    """Return the dense leaf as training sees it: :func:`core.reparam.materialise`."""
    masks = {} if mask is None else {path: jnp.asarray(mask)}
    one = Reparam(masks, {path: jnp.asarray(idx.astype(np.int32))}, {path: k})
    return np.asarray(materialise({path: jnp.asarray(codebook)}, one)[path])


def _index_dtype(k: int) -> type[np.unsignedinteger[Any]]:
    for dt in (np.uint8, np.uint16, np.uint32):
        if k - 1 <= np.iinfo(dt).max:
            return dt
    return np.uint64


def from_bytes(data: bytes) -> Checkpoint:
    """Read bytes written by :func:`to_bytes`; :class:`CheckpointError` when they are unusable."""
    metadata = _metadata(data)
    data = bytes(data)
    try:
        tensors: dict[str, np.ndarray] = dict(safetensors.numpy.load(data))
    except Exception as exc:  # safetensors raises its own error type for corrupt payloads
        raise CheckpointError(f"corrupt checkpoint: {exc}") from exc
    try:
        spec = Spec.from_json(metadata["spec"])
        graph = validate(spec)
    except (KeyError, SpecError) as exc:
        raise CheckpointError(f"the checkpoint's spec is missing or invalid: {exc}") from exc
    info = _reparam_info(metadata)
    expected = variable_shapes(graph)
    masks = {p: tensors.pop(f"masks/{p}") for p in info["mask_dtypes"] if f"masks/{p}" in tensors}
    _check_names("masks", set(masks), set(info["mask_dtypes"]))
    indices = {p: tensors.pop(f"indices/{p}") for p in info["sizes"] if f"indices/{p}" in tensors}
    _check_names("indices", set(indices), set(info["sizes"]))
    unknown = sorted((set(masks) | set(indices)) - set(expected["params"]))
    if unknown:
        raise CheckpointError(f"the checkpoint's reparam names parameters the spec does not have: "
                              f"{unknown}")
    for path, m in masks.items():
        _check_shape(f"masks/{path}", m.shape, expected["params"][path])
        masks[path] = m.astype(info["mask_dtypes"][path])
    for path, idx in indices.items():
        _check_shape(f"indices/{path}", idx.shape, expected["params"][path])
        k = info["sizes"][path]
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= k):
            raise CheckpointError(f"indices of '{path}' exceed its codebook of {k} entries "
                                  "or are negative")
        indices[path] = idx.astype(info["index_dtypes"][path])
    variables: dict[str, Any] = {}
    for kind in _KINDS:
        flat: dict[str, np.ndarray] = {}
        for path, shape in expected[kind].items():
            name = f"{kind}/{path}"
            if name in tensors:
                flat[path] = tensors.pop(name)
            elif kind == "params" and path in indices and f"codebook/{path}" in tensors:
                flat[path] = _rebuild(path, tensors.pop(f"codebook/{path}"), indices[path],
                                      masks.get(path), info["sizes"][path])
            else:
                raise CheckpointError(f"the checkpoint lacks tensor '{name}' that the spec needs")
            _check_shape(name, flat[path].shape, shape)
        if flat or kind == "params":
            variables[kind] = tree.unflatten(flat)
    if tensors:
        raise CheckpointError(f"the checkpoint has tensors the spec has no use for: "
                              f"{sorted(tensors)}")
    reparam = None
    if "reparam" in metadata:
        reparam = Reparam(masks={p: jnp.asarray(m) for p, m in masks.items()},
                          indices={p: jnp.asarray(i) for p, i in indices.items()},
                          sizes=info["sizes"])
    return Checkpoint(spec, variables, reparam)


def _rebuild(path: str, codebook: np.ndarray, idx: np.ndarray, mask: np.ndarray | None,
             k: int) -> np.ndarray:
    """Return a shared leaf's dense array from its stored codebook (indices already checked)."""
    if codebook.shape != (k,):
        raise CheckpointError(f"codebook of '{path}' has shape {list(codebook.shape)}, "
                              f"expected [{k}]")
    return _materialise(path, codebook, idx, mask, k)


def _metadata(data: bytes) -> dict[str, str]:
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) < 8:
        raise CheckpointError("corrupt checkpoint: too short to be a safetensors payload")
    (size,) = struct.unpack("<Q", bytes(data[:8]))
    if 8 + size > len(data):
        raise CheckpointError("corrupt checkpoint: truncated header")
    try:
        header = json.loads(bytes(data[8:8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"corrupt checkpoint: unreadable header ({exc})") from exc
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"not a netsynth checkpoint (no '{FORMAT}' metadata)")
    version = meta.get("format_version")
    if version != str(FORMAT_VERSION):
        raise CheckpointError(f"unknown checkpoint format version {version!r}; "
                              f"this netsynth reads version {FORMAT_VERSION}")
    return {str(k): str(v) for k, v in meta.items()}


def _reparam_info(metadata: dict[str, str]) -> dict[str, dict[str, Any]]:
    empty: dict[str, dict[str, Any]] = {"sizes": {}, "mask_dtypes": {}, "index_dtypes": {}}
    if "reparam" not in metadata:
        return empty
    try:
        info = json.loads(metadata["reparam"])
        out = {key: dict(info[key]) for key in empty}
        out["sizes"] = {p: int(k) for p, k in out["sizes"].items()}
        for dt in (*out["mask_dtypes"].values(), *out["index_dtypes"].values()):
            np.dtype(dt)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"corrupt checkpoint: unreadable reparam metadata ({exc})") from exc
    if set(out["index_dtypes"]) != set(out["sizes"]):
        raise CheckpointError("corrupt checkpoint: reparam sizes and index dtypes disagree")
    return out


def _validate(spec: Spec) -> Graph:
    try:
        return validate(spec)
    except SpecError as exc:
        raise CheckpointError(f"cannot save a model whose spec is invalid: {exc}") from exc


def _check_names(kind: str, got: set[str], want: set[str]) -> None:
    if got - want:
        raise CheckpointError(f"unexpected {kind} {sorted(got - want)} for this spec")
    if want - got:
        raise CheckpointError(f"missing {kind} {sorted(want - got)} for this spec")


def _check_shape(name: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if tuple(got) != tuple(want):
        raise CheckpointError(f"tensor '{name}' has shape {list(got)}, the spec needs {list(want)}")


def save(path: str | os.PathLike[str], spec: Spec | Graph, variables: dict[str, Any],
         reparam: Reparam | None = None) -> None:
    """Write a model to ``path`` atomically: a failed save leaves no partial file behind."""
    data = to_bytes(spec, variables, reparam)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a model saved by :func:`save`."""
    return from_bytes(Path(path).read_bytes())
