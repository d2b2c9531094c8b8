"""Reference semantics of the tile primitives (SPEC §5), in numpy.

Every target is tested against these: each function returns the new value of the
destination tile (``dst`` gives its shape and dtype; gemm's ``C`` also its old value).

* Sources broadcast to the destination like numpy and are converted to the destination's
  dtype before computing; the result is computed in that dtype.
* Integer ``div`` truncates toward zero (C semantics).
* Bools compute like numpy: ``add``/``maximum`` are or, ``mul``/``div``/``minimum`` and;
  ``sub`` and ``neg`` raise (the frontend refuses them on bool tiles).
* ``reduce`` folds in the destination's dtype; ``dst`` has ``src``'s shape with ``axis``
  removed or kept as 1. ``argmax``/``argmin`` compare in the source's dtype and give the
  lowest index of the extreme; a NaN counts as the extreme (numpy's and torch's rule).
* ``scan`` is the inclusive scan along ``axis`` (``dst[..., i, ...]`` combines elements
  ``0..i``), computed in the destination's dtype; ``dst`` has ``src``'s shape.
* ``gemm`` multiplies and accumulates in C's dtype: ``C + op(A) @ op(B)`` (``accum``) or
  ``op(A) @ op(B)``.
* :func:`read_region` / :func:`write_region` give a region of a tensor that may run past
  its end: reads fill the missing part, writes skip it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["copy", "gemm", "pointwise", "read_region", "reduce", "scan", "write_region"]

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
           "maximum": np.maximum, "minimum": np.minimum}
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "sqrt": np.sqrt,
          "rsqrt": lambda x: 1 / np.sqrt(x), "neg": np.negative, "abs": np.abs}


def _fit(value, dst) -> np.ndarray:
    return np.broadcast_to(np.asarray(value), np.shape(dst)).astype(dst.dtype)


def copy(dst: np.ndarray, src) -> np.ndarray:
    return _fit(np.asarray(src).astype(dst.dtype), dst)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def pointwise(op: str, dst: np.ndarray, *srcs) -> np.ndarray:
    dtype = dst.dtype
    with np.errstate(all="ignore"):
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
