"""Lossless byte streams of the compressed model format: bitmaps, gap varints, bit-packed indices, codecs.

Every function pair here is an exact inverse (``unpack_bits(pack_bits(v, b), b, len(v)) == v``).
Codecs: 0 = stored, 1 = zlib (deflate, level 9), 2 = LZMA2 raw stream (preset 9 extreme), 3 = the stream's
4-byte words split into byte planes (all first bytes, then all second bytes, ...; a tail shorter than a word
stays last) and then LZMA2 as codec 2, which suits float32 values, whose sign and exponent bytes repeat while
their low mantissa bytes do not; :func:`squeeze` keeps whichever is shortest, so a stream never grows by more
than its codec byte in the header.

References: LEB128 varints (DWARF 5, section 7.6); relative-index sparse storage as in Han et al., "Deep
Compression", ICLR 2016 (https://arxiv.org/abs/1510.00149).
"""

from __future__ import annotations

import lzma
import zlib
from collections.abc import Callable

import numpy as np

STORED, ZLIB, LZMA, PLANES_LZMA = 0, 1, 2, 3
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
WORD = 4


def planes(data: bytes) -> bytes:
    """``data``'s whole 4-byte words as byte planes (every word's byte 0, then byte 1, ...), then the tail."""
    whole = len(data) - len(data) % WORD
    words = np.frombuffer(data[:whole], np.uint8).reshape(-1, WORD)
    return words.T.tobytes() + data[whole:]


def unplanes(data: bytes) -> bytes:
    """The inverse of :func:`planes`."""
    whole = len(data) - len(data) % WORD
    return np.frombuffer(data[:whole], np.uint8).reshape(WORD, -1).T.tobytes() + data[whole:]


def _lzma(data: bytes) -> bytes:
    # preset 9's dictionary is 64 MiB, and setting one up costs ~30 ms, more than a small stream's whole encoding;
    # no dictionary longer than the stream finds more matches, so the output is the same byte for byte
    size = 1 << max(12, (len(data) - 1).bit_length())
    filters = [{**_LZMA_FILTERS[0], "dict_size": min(size, 1 << 26)}]
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=filters)


def _unlzma(data: bytes) -> bytes:
    return lzma.decompress(data, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)

_ENCODERS: dict[int, Callable[[bytes], bytes]] = {
    STORED: lambda b: b,
    ZLIB: lambda b: zlib.compress(b, 9),
    LZMA: _lzma,
    PLANES_LZMA: lambda b: _lzma(planes(b)),
}
_DECODERS: dict[int, Callable[[bytes], bytes]] = {
    STORED: lambda b: b,
    ZLIB: zlib.decompress,
    LZMA: _unlzma,
    PLANES_LZMA: lambda b: unplanes(_unlzma(b)),
}


LZMA_MOST = 4 << 20
"""The longest stream that :func:`squeeze` tries the LZMA codecs on: LZMA at preset 9 extreme takes about a
second per MiB on one core (a dense 33 MB embedding table: over half a minute), zlib some 25 times less."""


def squeeze(data: bytes) -> tuple[int, bytes]:
    """Return ``(codec, payload)``: the shortest of the stored, zlib and LZMA forms of ``data`` (no LZMA for
    streams over LZMA_MOST bytes)."""
    if not data:
        return STORED, data
    codecs = [c for c in _ENCODERS if len(data) <= LZMA_MOST or c in (STORED, ZLIB)]
    forms = [(len(out), codec, out) for codec in codecs for out in (_ENCODERS[codec](data),)]
    _, codec, out = min(forms)
    return codec, out


def unsqueeze(codec: int, payload: bytes) -> bytes:
    """Return the bytes that :func:`squeeze` turned into ``(codec, payload)``."""
    if codec not in _DECODERS:
        raise ValueError(f"unknown codec {codec}")
    return _DECODERS[codec](payload)


def bits_for(k: int) -> int:
    """Bits of one index into a codebook of ``k`` entries: ``ceil(log2 k)`` (0 for k = 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return (k - 1).bit_length()


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Pack non-negative integers below ``2**bits`` into ``bits`` bits each, least significant bit first."""
    v = np.asarray(values, np.int64).ravel()
    if bits == 0 or v.size == 0:
        return b""
    if v.min() < 0 or v.max() >= 1 << bits:
        raise ValueError(f"values must lie in [0, 2**{bits})")
    planes = ((v[:, None] >> np.arange(bits)) & 1).astype(np.uint8)
    return np.packbits(planes.ravel(), bitorder="little").tobytes()


def unpack_bits(data: bytes, bits: int, count: int) -> np.ndarray:
    """Return the ``count`` integers (int64) that :func:`pack_bits` packed at ``bits`` bits each."""
    if bits == 0 or count == 0:
        return np.zeros(count, np.int64)
    need = -(-count * bits // 8)
    if len(data) != need:
        raise ValueError(f"expected {need} bytes of {bits}-bit indices, got {len(data)}")
    flat = np.unpackbits(np.frombuffer(data, np.uint8), count=count * bits, bitorder="little")
    out: np.ndarray = flat.reshape(count, bits).astype(np.int64) @ (np.int64(1) << np.arange(bits))
    return out


def pack_bitmap(live: np.ndarray) -> bytes:
    """One bit per entry (1 = kept), least significant bit first."""
    return np.packbits(np.asarray(live, bool).ravel(), bitorder="little").tobytes()


def unpack_bitmap(data: bytes, count: int) -> np.ndarray:
    """Return the ``count`` booleans of :func:`pack_bitmap`."""
    if len(data) != -(-count // 8):
        raise ValueError(f"a bitmap of {count} entries has {-(-count // 8)} bytes, got {len(data)}")
    return np.unpackbits(np.frombuffer(data, np.uint8), count=count, bitorder="little").astype(bool)


def pack_gaps(live: np.ndarray) -> bytes:
    """The kept entries' flat positions as LEB128 varints of their gaps (first: its position)."""
    pos = np.flatnonzero(np.asarray(live, bool).ravel()).astype(np.int64)
    gaps = np.diff(pos, prepend=0) if pos.size else pos
    gaps[1:] -= 1  # consecutive entries have gap 0
    return _varints(gaps)


def unpack_gaps(data: bytes, count: int) -> np.ndarray:
    """Return the ``count`` booleans whose kept positions :func:`pack_gaps` wrote."""
    gaps = _unvarints(data)
    if gaps.size:
        gaps[1:] += 1
    pos = np.cumsum(gaps)
    if pos.size and (pos[-1] >= count or pos.min() < 0):
        raise ValueError("gap positions run past the parameter")
    live = np.zeros(count, bool)
    live[pos] = True
    return live


def _varints(values: np.ndarray) -> bytes:
    v = np.asarray(values, np.int64)
    if v.size == 0:
        return b""
    nbytes = np.maximum(1, (np.floor(np.log2(np.maximum(v, 1))).astype(np.int64) // 7) + 1)
    total = int(nbytes.sum())
    owner = np.repeat(np.arange(v.size), nbytes)
    start = np.cumsum(nbytes) - nbytes
    group = np.arange(total) - start[owner]
    out = (v[owner] >> (7 * group)) & 0x7F
    out |= np.where(group < nbytes[owner] - 1, 0x80, 0)
    return bytes(out.astype(np.uint8).tobytes())


def _unvarints(data: bytes) -> np.ndarray:
    b = np.frombuffer(data, np.uint8).astype(np.int64)
    if b.size == 0:
        return np.zeros(0, np.int64)
    ends = (b & 0x80) == 0
    if not ends[-1]:
        raise ValueError("truncated varint stream")
    value_of = np.concatenate([[0], np.cumsum(ends)[:-1]])
    starts = np.flatnonzero(np.concatenate([[True], ends[:-1]]))
    group = np.arange(b.size) - starts[value_of]
    out = np.zeros(int(value_of[-1]) + 1, np.int64)
    np.add.at(out, value_of, (b & 0x7F) << (7 * group))
    return out
