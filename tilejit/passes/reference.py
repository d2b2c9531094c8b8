"""Reference semantics of the tile primitives (SPEC §5), in numpy.

Every target is tested against these: each function returns the new value of the
destination tile (``dst`` gives its shape and dtype; gemm's ``C`` also its old value).

* Sources broadcast to the destination like numpy and are converted to the destination's
  dtype before computing; the result is computed in that dtype.
* Integer ``div`` truncates toward zero (C semantics); ``floordiv`` and ``mod`` are
  Python's (numpy's) ``//`` and ``%``. An integer division by zero gives 0.
* ``rand``/``randn``/``randint`` are Philox 4x32-10 (:func:`philox4x32`, docs/language.md).
* ``iota`` (``tj.arange``) writes a 1-D tile ``start, start + 1, ...``.
* A masked ``copy``: where the mask is False, a tile on chip takes ``other`` (a load) and
  a tensor keeps its value (a store).
* Bools compute like numpy: ``add``/``maximum`` are or, ``mul``/``div``/``minimum`` and;
  ``sub`` and ``neg`` raise (the frontend refuses them on bool tiles).
* ``reduce`` folds in the destination's dtype; ``dst`` has ``src``'s shape with ``axis``
  removed or kept as 1. ``argmax``/``argmin`` compare in the source's dtype and give the
  lowest index of the extreme; a NaN counts as the extreme (numpy's and torch's rule).
* ``scan`` is the inclusive scan along ``axis`` (``dst[..., i, ...]`` combines elements
  ``0..i``), computed in the destination's dtype; ``dst`` has ``src``'s shape.
* ``gemm`` multiplies and accumulates in C's dtype: ``C + op(A) @ op(B)`` (``accum``) or
  ``op(A) @ op(B)``.
* ``permute`` is ``np.transpose(src, dims)``; ``gather`` is ``torch.gather`` along ``axis``
  (the index broadcast to dst) and ``scatter`` torch's ``scatter_`` (index and src broadcast
  together), in row-major order, so the last of duplicate indices wins. An index outside
  the indexed tile (negative too) is masked: a gather reads ``other``, a scatter skips it.
* :func:`read_region` / :func:`write_region` give a region of a tensor that may run past
  its end: reads fill the missing part, writes skip it.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["copy", "gather", "gemm", "permute", "pointwise", "read_region", "reduce", "scan",
           "scatter", "write_region"]

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
           "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
           "floordiv": np.floor_divide, "mod": np.remainder, "bitwise_and": np.bitwise_and,
           "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "shl": np.left_shift,
           "shr": np.right_shift}
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "sqrt": np.sqrt,
          "rsqrt": lambda x: 1 / np.sqrt(x), "neg": np.negative, "abs": np.abs,
          "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil,
          "log2": np.log2, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
          "erf": lambda x: np.vectorize(math.erf, otypes=[np.float64])(x),
          "bitwise_not": np.invert}
# Philox 4x32-10 (tilejit/passes/rules/philox.py builds the same stream in IR)
_PHILOX_ROUNDS, _PHILOX_MULTIPLIERS, _PHILOX_WEYL = 10, (0xD2511F53, 0xCD9E8D57), (0x9E3779B9,
                                                                                  0xBB67AE85)
_FLOAT_PRECISION = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8,
                    "float8_e4m3fn": 4, "float8_e5m2": 3}


def _fit(value, dst) -> np.ndarray:
    return np.broadcast_to(np.asarray(value), np.shape(dst)).astype(dst.dtype)


def copy(dst: np.ndarray, src, mask=None, other=0, store=False) -> np.ndarray:
    """``src`` converted to ``dst``'s dtype. Where ``mask`` (broadcast like a source) is
    False, elements take ``other`` -- a load into a tile on chip -- or, with ``store`` (the
    destination is a tensor), keep ``dst``'s value: masked-off elements are not written."""
    value = _fit(np.asarray(src).astype(dst.dtype), dst)
    if mask is None:
        return value
    masked_off = dst if store else np.asarray(other).astype(dst.dtype)
    return _fit(np.where(np.asarray(mask, dtype=bool), value, masked_off), dst)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def philox4x32(seed: int, offsets) -> np.ndarray:
    """The four u32 words (last axis) of Philox 4x32-10 for key ``(seed lo, seed hi)``
    (seed as 64-bit two's complement) and counters ``(offset lo, offset hi or 0, 0, 0)``
    (the high word only for 64-bit offsets)."""
    offsets = np.asarray(offsets)
    wide = offsets.astype(np.int64).astype(np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    key = [np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)]
    zero = np.zeros_like(wide)
    high = wide >> np.uint64(32) if offsets.dtype.itemsize == 8 else zero
    c = [wide & mask, high, zero, zero]
    for round_index in range(_PHILOX_ROUNDS):
        if round_index:
            key = [(k + np.uint64(w)) & mask for k, w in zip(key, _PHILOX_WEYL)]
        p0 = c[0] * np.uint64(_PHILOX_MULTIPLIERS[0])   # < 2^64: exact in uint64
        p1 = c[2] * np.uint64(_PHILOX_MULTIPLIERS[1])
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ key[0], p1 & mask,
             (p0 >> np.uint64(32)) ^ c[3] ^ key[1], p0 & mask]
    return np.stack(c, axis=-1).astype(np.uint32)


def _random(op: str, dtype: np.dtype, seed, offsets) -> np.ndarray:
    """``randint``: word 0; ``rand``: word 0's top ``p`` bits (``p``: the dtype's precision,
    at most 32) times ``2^-p``; ``randn``: Box-Muller on words 0 and 1 in f64."""
    words = philox4x32(int(np.asarray(seed)), offsets).astype(np.uint64)
    if op == "randint":
        return words[..., 0].astype(np.uint32).astype(dtype)
    if op == "rand":
        bits = min(32, _FLOAT_PRECISION[np.dtype(dtype).name])
        return ((words[..., 0] >> np.uint64(32 - bits)).astype(np.float64) * 2.0 ** -bits)
    u1 = (words[..., 0] + np.uint64(1)).astype(np.float64) * 2.0 ** -32
    u2 = words[..., 1].astype(np.float64) * 2.0 ** -32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * math.pi * u2)


def pointwise(op: str, dst: np.ndarray, *srcs) -> np.ndarray:
    dtype = dst.dtype
    with np.errstate(all="ignore"):
        if op in ("rand", "randn", "randint"):
            return _fit(np.asarray(_random(op, dtype, *srcs)).astype(dtype), dst)
        if op == "iota":
            return (int(srcs[0]) + np.arange(dst.shape[0])).astype(dtype)
        if op == "select":
            cond, a, b = (np.asarray(s) for s in srcs)
            return _fit(np.where(cond != 0, np.asarray(a).astype(dtype),
                                 np.asarray(b).astype(dtype)), dst)
        if op in _COMPARE:
            a, b = (np.asarray(s) for s in srcs)
            common = np.result_type(a, b)
            return _fit(_COMPARE[op](a.astype(common), b.astype(common)), dst)
        values = [np.asarray(s).astype(dtype) for s in srcs]
        if op in ("cast", "fill"):
            result = values[0]
        elif op == "fma":
            result = values[0] * values[1] + values[2]
        elif op == "div":
            result = _divide(*values)
        elif op in _BINARY:
            result = _BINARY[op](*values)
        else:
            result = _UNARY[op](values[0])
    return _fit(np.asarray(result).astype(dtype), dst)


def reduce(dst: np.ndarray, src, op: str, axis: int) -> np.ndarray:
    if op in ("argmax", "argmin"):
        fn = np.argmax if op == "argmax" else np.argmin
        return fn(np.asarray(src), axis=axis).reshape(np.shape(dst)).astype(dst.dtype)
    fn = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    values = np.asarray(src).astype(dst.dtype)
    return np.asarray(fn(values, axis=axis)).reshape(np.shape(dst)).astype(dst.dtype)


def scan(dst: np.ndarray, src, op: str, axis: int) -> np.ndarray:
    fn = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate,
          "min": np.minimum.accumulate}[op]
    with np.errstate(all="ignore"):   # integer products wrap, as on the targets
        return fn(np.asarray(src).astype(dst.dtype), axis=axis, dtype=dst.dtype)


def gemm(C: np.ndarray, A, B, transpose_a: bool = False, transpose_b: bool = False,
         accum: bool = True) -> np.ndarray:
    a = np.asarray(A).astype(C.dtype)
    b = np.asarray(B).astype(C.dtype)
    product = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    return (C + product if accum else product).astype(C.dtype)


def permute(dst: np.ndarray, src, dims) -> np.ndarray:
    return _fit(np.transpose(np.asarray(src), dims), dst)


def gather(dst: np.ndarray, src, index, axis: int, other=0) -> np.ndarray:
    """``dst[i] = src[i with i[axis] = index[i]]``; ``other`` where that is outside ``src``."""
    src, index = np.asarray(src), np.broadcast_to(np.asarray(index), np.shape(dst))
    inside = (index >= 0) & (index < src.shape[axis])
    for d in range(src.ndim):   # dst dims past src's extent read other too
        if d != axis:
            shape = [1] * src.ndim
            shape[d] = dst.shape[d]
            inside = inside & (np.arange(dst.shape[d]).reshape(shape) < src.shape[d])
    positions = list(np.indices(np.shape(dst), sparse=True))
    positions[axis] = np.where(inside, index, 0)
    positions = [np.minimum(p, n - 1) for p, n in zip(positions, src.shape)]
    return _fit(np.where(inside, src[tuple(positions)].astype(dst.dtype), other), dst)


def scatter(dst: np.ndarray, index, src, axis: int) -> np.ndarray:
    """``dst[j with j[axis] = index[j]] = src[j]`` for every ``j`` of the broadcast shape of
    ``index`` and ``src``, in row-major order; positions outside ``dst`` are skipped."""
    out = np.array(dst, copy=True)
    index, src = np.broadcast_arrays(np.asarray(index), np.asarray(src))
    for j in np.ndindex(index.shape):
        position = list(j)
        position[axis] = int(index[j])
        if all(0 <= p < n for p, n in zip(position, out.shape)):
            out[tuple(position)] = src[j]
    return out


def _valid_slices(shape, starts, sizes):
    """(slices into the tensor, slices into the tile) of the part that exists."""
    outer, inner = [], []
    for n, start, size in zip(shape, starts, sizes):
        count = max(0, min(size, n - start))
        outer.append(slice(start, start + count))
        inner.append(slice(0, count))
    return tuple(outer), tuple(inner)


def read_region(array: np.ndarray, starts, sizes, keep=None, fill=0) -> np.ndarray:
    """The ``sizes`` region at ``starts`` (dims with ``keep[d] False`` dropped); elements
    past the end of ``array`` read as ``fill``."""
    keep = keep or (True,) * len(sizes)
    tile = np.full(sizes, fill, dtype=array.dtype)
    outer, inner = _valid_slices(array.shape, starts, sizes)
    tile[inner] = array[outer]
    return tile.reshape([n for n, k in zip(sizes, keep) if k])


def write_region(array: np.ndarray, starts, tile, keep=None) -> None:
    """Store ``tile`` at ``starts`` into ``array``; the part past its end is skipped."""
    keep = keep or (True,) * len(starts)
    sizes = []
    kept = iter(np.shape(tile))
    for k in keep:
        sizes.append(next(kept) if k else 1)
    outer, inner = _valid_slices(array.shape, starts, sizes)
    array[outer] = np.asarray(tile).reshape(sizes)[inner]
