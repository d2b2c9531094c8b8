"""Tile semantics: the primitives (``copy``, ``gemm``, ``reduce``, pointwise) and fragment
expressions.

Primitives write their destination (first argument). Their operands are checked here, so
a wrong call is reported at the user's line: shapes broadcast like numpy (a ``(BM, 1)``
source against a ``(BM, BN)`` destination; run-time dims of global buffers match anything),
``reduce`` writes the source shape with ``axis`` removed or kept as 1, ``gemm`` needs
``M x K @ K x N = M x N`` after the transposes.

Fragment expressions (``a + b``, ``-a``, ``tj.exp(a)``) allocate a new fragment of the
broadcast shape and promoted dtype and fill it with one ``tile.pointwise``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilejit.errors import CompilationError
from tilejit.ir.ops_tile import (INDEX_REDUCE_OPS, POINTWISE_ARITY, POINTWISE_COMPARISONS,
                                  POINTWISE_FLOAT_ONLY, POINTWISE_INT_ONLY, POINTWISE_RANDOM,
                                  REDUCE_OPS, SCAN_OPS)
from tilejit.ir.types import BufferType, MemScope, ScalarType, f32, i1, i32, i64, promote, u32

from .values import (contains_value, describe, is_int_number, is_number, is_scalar, is_tile,
                     python_number_type)

if TYPE_CHECKING:
    from .semantics import Semantics

__all__ = ["IndexedTile", "TileSemantics", "broadcast_shapes"]

# Bool tiles compute like numpy (``add`` is ``or``, ``mul`` is ``and``), which, like torch,
# has no bool subtraction or negation; shifts and // % of bools would count in integers.
NOT_ON_BOOL = {"sub": "logical xor (a != b)", "neg": "logical not (a == False)",
               "shl": "an integer tile", "shr": "an integer tile", "floordiv": "logical and",
               "mod": "an integer tile"}
# Python operator (semantics.PY_BINARY / PY_COMPARE / PY_UNARY names) -> pointwise op.
OPERATOR_OPS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "neg": "neg",
                "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
                "floordiv": "floordiv", "mod": "mod", "pow": "pow", "bitand": "bitwise_and",
                "bitor": "bitwise_or", "bitxor": "bitwise_xor", "invert": "bitwise_not",
                "lshift": "shl", "rshift": "shr"}


@dataclass(frozen=True)
class IndexedTile:
    """``table[idx, :]``: a whole buffer with the 1-D integer tile ``idx`` indexing dim
    ``axis`` (the other dims whole). Only ``tj.copy`` takes it: as its src it is a gather of
    rows, as its dst a scatter."""

    buffer: Any
    index: Any
    axis: int

    def __str__(self) -> str:
        return f"a tile indexed by an integer tile on dim {self.axis}"


def broadcast_shapes(shapes) -> tuple | None:
    """numpy broadcasting of static shapes; None when they do not broadcast."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcasts_to(shape, target) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (None dims are run-time and match)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) or None in (s, t) for s, t in zip(reversed(shape), reversed(target)))


def _shape_text(shape) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def _check_bool_op(op: str, dtype: ScalarType) -> None:
    if dtype.is_bool and op in NOT_ON_BOOL:
        raise CompilationError(f"tj.{op} is not defined on bool tiles (as in numpy and torch); "
                               f"use {NOT_ON_BOOL[op]}, or cast to an integer dtype first")


class TileSemantics:
    def __init__(self, sem: Semantics):
        self.sem = sem
        self.b = sem.b

    def _attrs(self, dispatch, config) -> dict:
        if dispatch is not None and not isinstance(dispatch, str):
            raise CompilationError(f"dispatch= must be a string naming an instruction family, "
                                   f"got {describe(dispatch)}")
        config = {} if config is None else config
        if not isinstance(config, dict) or not all(isinstance(k, str) for k in config) \
                or contains_value(config):
            raise CompilationError(f"config= must be a dict of compile-time values with string "
                                   f"keys, got {describe(config)}")
        return {"team": self.sem.team, "dispatch": dispatch, "config": dict(config)}

    @staticmethod
    def _tile(x, role: str, primitive: str):
        if not is_tile(x):
            raise CompilationError(f"tj.{primitive}: {role} must be a buffer or region, got "
                                   f"{describe(x)}")
        return x

    @staticmethod
    def _flag(x, name: str, primitive: str) -> bool:
        if not isinstance(x, bool):
            raise CompilationError(f"tj.{primitive}: {name}= must be a compile-time bool, got "
                                   f"{describe(x)}")
        return x

    # ----------------------------------------------------------------- primitives
    def copy(self, dst, src, barrier, dispatch, config, is_async=False, mask=None, other=None):
        name = "copy_async" if is_async else "copy"
        if isinstance(src, IndexedTile) or isinstance(dst, IndexedTile):
            if is_async or mask is not None:
                raise CompilationError(f"tj.{name} of a tile indexed by an integer tile takes "
                                       "no mask= or barrier; the index masks itself")
            return self.indexed_copy(dst, src, other, dispatch, config)
        dst, src = self._tile(dst, "dst", name), self._tile(src, "src", name)
        if not broadcasts_to(src.type.shape, dst.type.shape):
            raise CompilationError(f"tj.{name}: src of shape {_shape_text(src.type.shape)} does "
                                   f"not fit dst of shape {_shape_text(dst.type.shape)}")
        barrier_operands = () if barrier is None else self.sem.memory.barrier_operands(barrier)
        attrs = self._attrs(dispatch, config)
        if is_async:
            return self.b.tile(name, dst, src, *barrier_operands, **attrs)
        masks = () if mask is None else (self._mask(mask, dst),)
        return self.b.tile(name, dst, src, *masks, other=self._other(other, attrs, dst, src),
                           **attrs)

    def _mask(self, mask, dst):
        """``mask=`` as an i1 operand: a bool tile broadcasting to dst, or a bool scalar."""
        if isinstance(mask, bool) or (is_scalar(mask) and mask.type == i1):
            return self.sem.to_ir(mask, i1)
        if not is_tile(mask):
            raise CompilationError(f"tj.copy: mask= must be a bool tile (such as offs < n) or a "
                                   f"bool scalar, got {describe(mask)}")
        if mask.type.dtype != i1:
            raise CompilationError(f"tj.copy: mask= must be a bool tile, got a "
                                   f"{mask.type.dtype!r} tile; compare it, e.g. m != 0")
        if not broadcasts_to(mask.type.shape, dst.type.shape):
            raise CompilationError(f"tj.copy: mask of shape {_shape_text(mask.type.shape)} does "
                                   f"not broadcast to dst of shape {_shape_text(dst.type.shape)}")
        return mask

    @staticmethod
    def _other(other, attrs, dst, src):
        """``other=``: a compile-time number that both dtypes can hold (None: the default)."""
        if other is None:
            return None
        if "fill" in attrs["config"]:
            raise CompilationError("tj.copy: give other= or config={'fill': ...} (its older "
                                   "spelling), not both")
        if not is_number(other):
            raise CompilationError(f"tj.copy: other= must be a compile-time number, such as 0.0 "
                                   f"or float('-inf'), got {describe(other)}")
        other = int(other) if is_int_number(other) else float(other)  # numpy scalars too
        for role, x in (("dst", dst), ("src", src)):
            if not x.type.dtype.is_float and not math.isfinite(other):
                raise CompilationError(f"tj.copy: other={other} does not fit the "
                                       f"{x.type.dtype!r} {role}")
        return other

    def arange(self, start, end):
        """``tj.arange(start, end)``: a new 1-D int32 fragment ``start .. end - 1`` (an
        ``iota`` pointwise op; the bounds fix the shape, so they are compile-time)."""
        for role, bound in (("start", start), ("end", end)):
            if not is_int_number(bound) or isinstance(bound, bool):
                hint = (": the length is the tile's shape, so add a run-time offset to the "
                        "result instead, e.g. base + tj.arange(0, BLOCK)"
                        if is_scalar(bound) else "")
                raise CompilationError(f"tj.arange(start, end) takes compile-time int bounds, "
                                       f"but {role} is {describe(bound)}{hint}")
        start, end = int(start), int(end)
        if end <= start:
            raise CompilationError(f"tj.arange({start}, {end}) is empty: end must be greater "
                                   "than start")
        if start < -2**31 or end - 1 >= 2**31:
            raise CompilationError(f"tj.arange({start}, {end}) does not fit int32")
        dst = self.b.alloc(MemScope.FRAGMENT, i32, (end - start,))
        self.b.tile("pointwise", dst, self.sem.to_ir(start, i32), op="iota",
                    **self._attrs(None, None))
        return dst

    def atomic(self, op: str, dst, val, *, order: str, sync_scope: str):
        """``tj.atomic_<op>(out[r:r + BM, c:c + BN], tile)``: each element of ``dst`` (global
        or shared) atomically combined with the broadcast ``val`` (a tile or a scalar)."""
        name = f"tj.atomic_{op}"
        if dst.type.scope not in (MemScope.GLOBAL, MemScope.SHARED):
            raise CompilationError(f"{name} on a tile updates global or shared memory; a "
                                   f"{dst.type.scope} tile belongs to its threads (use "
                                   "tj.add etc.)")
        if is_tile(val):
            if not broadcasts_to(val.type.shape, dst.type.shape):
                raise CompilationError(f"{name}: val {_shape_text(val.type.shape)} does not "
                                       f"broadcast to the tile {_shape_text(dst.type.shape)}")
        elif is_scalar(val) or is_number(val):
            val = self.sem.to_ir(val, dst.type.dtype)
        else:
            raise CompilationError(f"{name}: val must be a tile or a scalar, got {describe(val)}")
        return self.b.tile("atomic", dst, val, op=op, order=order, sync_scope=sync_scope,
                           **self._attrs(None, None))

    def gemm(self, C, A, B, transpose_a, transpose_b, accum, dispatch, config, is_async=False):
        name = "gemm_async" if is_async else "gemm"
        tiles = {role: self._tile(x, role, name) for role, x in (("C", C), ("A", A), ("B", B))}
        for role, x in tiles.items():
            if x.type.rank != 2:
                raise CompilationError(f"tj.{name}: {role} must be a rank-2 tile, got shape "
                                       f"{_shape_text(x.type.shape)}")
        flags = {"transpose_a": self._flag(transpose_a, "transpose_a", name),
                 "transpose_b": self._flag(transpose_b, "transpose_b", name),
                 "accum": self._flag(accum, "accum", name)}
        a, b, c = (tiles[r].type.shape for r in "ABC")
        m, k = a[::-1] if transpose_a else a
        k2, n = b[::-1] if transpose_b else b
        if None not in (k, k2) and k != k2:
            transposed = " after the transposes" if transpose_a or transpose_b else ""
            raise CompilationError(f"tj.{name}: A{_shape_text(a)} and B{_shape_text(b)} disagree "
                                   f"on K ({k} vs {k2}){transposed}")
        if not broadcasts_to(c, (m, n)) or not broadcasts_to((m, n), c):
            raise CompilationError(f"tj.{name}: C has shape {_shape_text(c)} but A @ B has shape "
                                   f"{_shape_text((m, n))}")
        da, db, dc = (tiles[r].type.dtype for r in "ABC")
        if da.is_float != db.is_float or dc.is_float != da.is_float:
            raise CompilationError(f"tj.{name}: A, B and C must be all float or all integer, "
                                   f"got {da!r}, {db!r} and {dc!r}")
        return self.b.tile(name, tiles["C"], tiles["A"], tiles["B"], **flags,
                           **self._attrs(dispatch, config))

    @staticmethod
    def _axis(primitive: str, axis, shape) -> int:
        """``axis`` normalized to ``[0, rank)``."""
        if not (is_int_number(axis) and not isinstance(axis, bool)
                and -len(shape) <= axis < len(shape)):
            raise CompilationError(f"tj.{primitive}: axis must be a compile-time int in "
                                   f"[{-len(shape)}, {len(shape)}), got {describe(axis)}")
        return int(axis) % len(shape)

    def reduce(self, dst, src, op, axis, dispatch, config):
        if isinstance(src, str) or op is None:   # the destination forgotten
            form = f"tj.{src if src in REDUCE_OPS else 'max'}(src, axis={axis})"
            raise CompilationError(f"tj.reduce(dst, src, op, axis) writes dst, which comes "
                                   f"first; for a new fragment holding the result use the "
                                   f"expression form {form}")
        dst, src = self._tile(dst, "dst", "reduce"), self._tile(src, "src", "reduce")
        if op not in REDUCE_OPS:
            choices = ", ".join(map(repr, REDUCE_OPS))
            raise CompilationError(f"tj.reduce: op must be one of {choices}, got {describe(op)}")
        index_type = dst.type.dtype
        if op in INDEX_REDUCE_OPS and (not index_type.is_int or index_type.is_bool):
            raise CompilationError(f"tj.reduce: {op} writes indices, so dst must be an integer "
                                   f"tile, got {index_type!r}")
        shape = src.type.shape
        axis = self._axis("reduce", axis, shape)
        dropped, kept = shape[:axis] + shape[axis + 1:], shape[:axis] + (1,) + shape[axis + 1:]
        out = dst.type.shape
        if tuple(out) not in (dropped, kept):   # a run-time size matches only itself
            raise CompilationError(f"tj.reduce: reducing {_shape_text(shape)} over axis {axis} "
                                   f"gives {_shape_text(dropped)} or {_shape_text(kept)}, but dst "
                                   f"has shape {_shape_text(out)}")
        return self.b.tile("reduce", dst, src, op=op, axis=axis, **self._attrs(dispatch, config))

    # ------------------------------------------------- reductions and scans as expressions
    def _expression_source(self, name: str, x, second):
        """The tile a reduction or scan expression reads, with the mistakes worth a lesson:
        ``tj.max`` reduces one tile, ``tj.maximum`` compares two (Triton's tl.max and
        tl.maximum)."""
        pointwise = {"max": "tj.maximum(a, b)", "min": "tj.minimum(a, b)",
                     "sum": "a + b or tj.add(a, b)"}.get(name)
        if pointwise and (is_tile(second) or not is_tile(x) and (is_scalar(x) or is_number(x))):
            raise CompilationError(f"tj.{name}(x, axis) reduces one tile along an axis; for the "
                                   f"elementwise {'sum' if name == 'sum' else name + 'imum'} of "
                                   f"two tiles or values use {pointwise}")
        x = self._tile(x, "its source", name)
        if None in x.type.shape:
            raise CompilationError(f"tj.{name} needs a static shape, but {describe(x)} has a "
                                   "run-time size; slice it to a static size first")
        return x

    @staticmethod
    def _result_dtype(name: str, op: str, source: ScalarType, dtype) -> ScalarType:
        """Indices are i32; ``dtype=`` is taken as given; sums widen narrow dtypes, as
        Triton's tl.sum does (floats to f32, integers and bools to 32 bits)."""
        if op in INDEX_REDUCE_OPS:
            return i32
        if dtype is not None:
            if not isinstance(dtype, ScalarType):
                raise CompilationError(f"tj.{name}: dtype= must be a tj dtype, got "
                                       f"{describe(dtype)}")
            return dtype
        if op == "sum" and source.bits < 32:
            return f32 if source.is_float else u32 if source.kind == "uint" else i32
        return source

    def reduction(self, op: str, x, axis, keep_dims, dtype, dispatch, config):
        """``tj.sum(x, axis)`` etc. (``tj.<op>``): a new fragment holding the reduction.
        ``axis=None`` reduces every axis, innermost first, to a ``(1,)`` fragment
        (``(1, ..., 1)`` with ``keep_dims``)."""
        x = self._expression_source(op, x, axis)
        keep_dims = self._flag(keep_dims, "keep_dims", op)
        if axis is None and op in INDEX_REDUCE_OPS:
            raise CompilationError(f"tj.{op} needs an axis: tj.{op}(x, axis)")
        rank = len(x.type.shape)
        axes = range(rank - 1, -1, -1) if axis is None else [self._axis(op, axis, x.type.shape)]
        out_dtype = self._result_dtype(op, op, x.type.dtype, dtype)
        attrs = self._attrs(dispatch, config)
        src = x
        for step, ax in enumerate(axes):
            shape = src.type.shape
            keep = keep_dims or (axis is None and step == rank - 1)
            dst = self.b.alloc(MemScope.FRAGMENT, out_dtype,
                               shape[:ax] + ((1,) if keep else ()) + shape[ax + 1:])
            self.b.tile("reduce", dst, src, op=op, axis=ax, **attrs)
            src = dst
        return src

    def scan(self, name: str, op: str, x, axis, dtype, dispatch, config):
        """``tj.cumsum(x, axis)`` etc.: a new fragment of ``x``'s shape holding the
        inclusive scan along ``axis``."""
        x = self._expression_source(name, x, axis)
        if op not in SCAN_OPS:
            choices = ", ".join(map(repr, SCAN_OPS))
            raise CompilationError(f"tj.{name}: the combine must be one of {choices} (or "
                                   f"tj.add, tj.mul, tj.maximum, tj.minimum), or an associative "
                                   f"@tj.func of two tiles, got {describe(op)}")
        axis = self._axis(name, axis, x.type.shape)
        dst = self.b.alloc(MemScope.FRAGMENT, self._result_dtype(name, op, x.type.dtype, dtype),
                           x.type.shape)
        self.b.tile("scan", dst, x, op=op, axis=axis, **self._attrs(dispatch, config))
        return dst

    def custom_scan(self, x, axis, combine, dispatch, config):
        """``tj.associative_scan`` with a ``@tj.func`` combine, as log2(n) whole-tile steps
        (Hillis and Steele): after the step of distance ``d``, element ``i`` combines
        elements ``i - 2d + 1 .. i``. ``combine`` is called on tiles, as Triton calls its
        combine_fn, always with the earlier elements first, so it need only be associative."""
        name = "associative_scan"
        if dispatch is not None or config:
            raise CompilationError(f"tj.{name}: dispatch= and config= apply to the named "
                                   "combines; a @tj.func combine runs as tile expressions")
        x = self._expression_source(name, x, axis)
        shape, dtype = x.type.shape, x.type.dtype
        axis = self._axis(name, axis, shape)
        n = shape[axis]

        def window(buf, lo, hi):
            return self.sem.memory.subscript(buf, tuple(
                slice(lo, hi) if d == axis else slice(0, extent) for d, extent in enumerate(shape)))

        acc = self.b.alloc(MemScope.FRAGMENT, dtype, shape)
        self.copy(acc, x, None, None, None)
        d = 1
        while d < n:
            later = window(acc, d, n)
            combined = self.sem.call_function(combine, [window(acc, 0, n - d), later], {})
            if not is_tile(combined) or combined.type.shape != later.type.shape:
                raise CompilationError(f"tj.{name}: the combine {combine.fn.__name__} must "
                                       f"return a tile of its arguments' shape "
                                       f"{_shape_text(later.type.shape)}, got {describe(combined)}")
            step = self.b.alloc(MemScope.FRAGMENT, dtype, shape)
            self.copy(window(step, 0, d), window(acc, 0, d), None, None, None)
            self.copy(window(step, d, n), combined, None, None, None)
            acc, d = step, 2 * d
        return acc

    # ------------------------------------------------ building, converting and indexing
    def full(self, shape, value, dtype, name: str):
        """``tj.zeros``/``tj.full``: a new fragment of ``shape`` holding ``value`` (a fill)."""
        if not (is_scalar(value) or is_number(value)):
            raise CompilationError(f"tj.{name}(shape, value, dtype) fills with a scalar value, "
                                   f"got {describe(value)}")
        dst = self.sem.memory.alloc(MemScope.FRAGMENT, shape, dtype, None)
        self.pointwise("fill", dst, (value,), None, None)
        return dst

    def convert(self, x, dtype):
        """``x.to(dtype)``: a cast, into a new fragment for a tile."""
        if not isinstance(dtype, ScalarType):
            raise CompilationError(f"x.to(dtype) takes a tj dtype such as tj.float16, got "
                                   f"{describe(dtype)}")
        if is_tile(x):
            return self.expression("cast", (self._expression_source("to", x, None),), dtype)
        return self.sem.cast(x, dtype)

    def _whole(self, x, name: str):
        """``x`` as a whole on-chip buffer: itself, or a new fragment holding a copy of it."""
        x = self._expression_source(name, x, None)
        t = x.type
        if isinstance(t, BufferType) and t.scope is not MemScope.GLOBAL:
            return x
        whole = self.b.alloc(MemScope.FRAGMENT, t.dtype, t.shape)
        self.copy(whole, x, None, None, None)
        return whole

    def permute(self, x, dims, name: str):
        """``tj.trans(x, *dims)``, ``tj.permute``, ``x.T``: a new fragment ``dst`` with
        ``dst[i] = x[j]``, ``j[dims[k]] = i[k]``; no dims transposes a 2-D tile. A copy at
        permuted indices (the ``permute`` op), not a view: the result gets the default
        row-major layout whatever ``x``'s layout, and later rules see a plain fragment."""
        x = self._expression_source(name, x, None)
        shape = x.type.shape
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if not dims:
            if len(shape) != 2:
                raise CompilationError(f"tj.{name} without dims transposes a 2-D tile, but "
                                       f"{describe(x)} has rank {len(shape)}; give the order "
                                       f"of its dims, e.g. tj.permute(x, (2, 0, 1))")
            dims = (1, 0)
        dims = tuple(self._axis(name, d, shape) for d in dims)
        if sorted(dims) != list(range(len(shape))):
            raise CompilationError(f"tj.{name}: dims {list(dims)} must name each of the "
                                   f"{len(shape)} dims of {describe(x)} once")
        dst = self.b.alloc(MemScope.FRAGMENT, x.type.dtype, tuple(shape[d] for d in dims))
        self.b.tile("permute", dst, x, dims=dims, **self._attrs(None, None))
        return dst

    def broadcast_to(self, x, shape):
        """``tj.broadcast_to(x, shape)``: a new fragment of ``shape`` (numpy broadcasting)."""
        shape = self.sem.memory.static_shape(shape)
        if not is_tile(x):
            if not (is_scalar(x) or is_number(x)):
                raise CompilationError(f"tj.broadcast_to takes a tile or a scalar, got "
                                       f"{describe(x)}")
            return self.full(shape, x, x.type if is_scalar(x) else python_number_type(x),
                             "broadcast_to")
        x = self._expression_source("broadcast_to", x, None)
        if not broadcasts_to(x.type.shape, shape):
            raise CompilationError(f"tj.broadcast_to: {_shape_text(x.type.shape)} does not "
                                   f"broadcast to {_shape_text(shape)}")
        dst = self.b.alloc(MemScope.FRAGMENT, x.type.dtype, shape)
        self.copy(dst, x, None, None, None)
        return dst

    def expand_dims(self, x, axis):
        """``tj.expand_dims(x, axis)``: ``x[:, None]`` with the new dims at ``axis`` (an int
        or a tuple); a view of ``x`` (a region is copied into a fragment first)."""
        x = self._whole(x, "expand_dims")
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        rank = x.type.rank + len(axes)
        axes = {self._axis("expand_dims", a, (None,) * rank) for a in axes}
        if len(axes) != rank - x.type.rank:
            raise CompilationError(f"tj.expand_dims: axis {axis!r} names a dim twice")
        items = tuple(None if d in axes else slice(None) for d in range(rank))
        return self.sem.memory.expand_dims(x, items)

    def reshape(self, x, shape):
        """``tj.reshape(x, shape)``: the same elements in row-major order. A view of ``x``
        (a region is copied into a fragment first): a layout places the row-major flat
        index whatever the shape, so nothing moves."""
        shape = self.sem.memory.static_shape(shape)
        x = self._whole(x, "reshape")
        if math.prod(shape) != math.prod(x.type.shape):
            raise CompilationError(f"tj.reshape: {_shape_text(x.type.shape)} has "
                                   f"{math.prod(x.type.shape)} elements, "
                                   f"{_shape_text(shape)} has {math.prod(shape)}")
        return self.b.view(x, shape, x.type.layout)

    def _index(self, index, name: str):
        if not (is_tile(index) and index.type.dtype.is_int and not index.type.dtype.is_bool):
            raise CompilationError(f"tj.{name}: the index must be an integer tile, got "
                                   f"{describe(index)}")
        if None in index.type.shape:
            raise CompilationError(f"tj.{name}: the index needs a static shape, got "
                                   f"{describe(index)}")
        return index

    @staticmethod
    def _same_rank(name: str, index, role: str, tile):
        if index.type.rank != tile.type.rank:
            raise CompilationError(f"tj.{name}: the index has rank {index.type.rank} but {role} "
                                   f"has rank {tile.type.rank}; they must match (as in "
                                   f"torch.{name}); add size-1 dims with x[:, None]")

    def gather(self, args, axis, other, dispatch, config):
        """``tj.gather(src, index, axis)`` (a new fragment of index's shape) or
        ``tj.gather(dst, src, index, axis)``: ``dst[i] = src[i with i[axis] = index[i]]``,
        ``other`` (default 0) where the index is outside ``src``."""
        if axis is None and args:
            args, axis = args[:-1], args[-1]
        if len(args) not in (2, 3):
            raise CompilationError("tj.gather is called as tj.gather(src, index, axis) or "
                                   "tj.gather(dst, src, index, axis)")
        src = self._tile(args[-2], "src", "gather")
        index = self._index(args[-1], "gather")
        self._same_rank("gather", index, "src", src)
        axis = self._axis("gather", axis, src.type.shape)
        if len(args) == 2:
            dst = self.b.alloc(MemScope.FRAGMENT, src.type.dtype, index.type.shape)
        else:
            dst = self._tile(args[0], "dst", "gather")
            if dst.type.rank != src.type.rank:
                raise CompilationError(f"tj.gather: dst has rank {dst.type.rank} but src has "
                                       f"rank {src.type.rank}")
            if not broadcasts_to(index.type.shape, dst.type.shape):
                raise CompilationError(f"tj.gather: index of shape "
                                       f"{_shape_text(index.type.shape)} does not broadcast to "
                                       f"dst of shape {_shape_text(dst.type.shape)}")
        for d, (n, m) in enumerate(zip(dst.type.shape, src.type.shape)):
            if d != axis and None not in (n, m) and n > m:
                raise CompilationError(f"tj.gather: dim {d} of the result ({n}) is larger than "
                                       f"that of src ({m}); only dim {axis} is indexed")
        attrs = self._attrs(dispatch, config)
        self.b.tile("gather", dst, src, index, axis=axis,
                    other=self._other(other, attrs, dst, src), **attrs)
        return dst if len(args) == 2 else None

    def scatter(self, dst, index, src, axis, dispatch, config):
        """``tj.scatter(dst, index, src, axis)``: ``dst[j with j[axis] = index[j]] = src[j]``
        for every ``j`` of the broadcast shape of index and src, in row-major order;
        indices outside ``dst`` write nothing."""
        dst = self._tile(dst, "dst", "scatter")
        index = self._index(index, "scatter")
        self._same_rank("scatter", index, "dst", dst)
        axis = self._axis("scatter", axis, dst.type.shape)
        domain = index.type.shape
        if is_tile(src):
            src = self._expression_source("scatter", src, None)
            domain = broadcast_shapes([domain, src.type.shape])
            if domain is None or len(domain) != index.type.rank:
                raise CompilationError(f"tj.scatter: src of shape {_shape_text(src.type.shape)} "
                                       f"does not broadcast with the index's "
                                       f"{_shape_text(index.type.shape)}")
        elif is_scalar(src) or is_number(src):
            src = self.sem.to_ir(src, dst.type.dtype)
        else:
            raise CompilationError(f"tj.scatter: src must be a tile or a scalar, got "
                                   f"{describe(src)}")
        for d, (n, m) in enumerate(zip(domain, dst.type.shape)):
            if d != axis and m is not None and n > m:
                raise CompilationError(f"tj.scatter: dim {d} of the index and src ({n}) is "
                                       f"larger than that of dst ({m}); only dim {axis} is "
                                       "indexed")
        return self.b.tile("scatter", dst, index, src, axis=axis,
                           **self._attrs(dispatch, config))

    def indexed_copy(self, dst, src, other, dispatch, config):
        """``tj.copy(dst, table[idx, :])`` (a gather of rows) or ``tj.copy(out[idx, :],
        src)`` (a scatter): the 1-D index viewed with its extent on the indexed axis."""
        indexed = src if isinstance(src, IndexedTile) else dst
        index = self._whole(indexed.index, "copy")
        rank = indexed.buffer.type.rank
        shape = tuple(index.type.shape[0] if d == indexed.axis else 1 for d in range(rank))
        index = self.b.view(index, shape, index.type.layout)
        if isinstance(src, IndexedTile):
            return self.gather((dst, src.buffer, index), src.axis, other, dispatch, config)
        if other is not None:
            raise CompilationError("tj.copy into a tile indexed by an integer tile takes no "
                                   "other=")
        return self.scatter(dst.buffer, index, src, dst.axis, dispatch, config)

    # ------------------------------------------------------------------ pointwise
    def pointwise_call(self, op: str, args, dispatch, config):
        """``tj.<op>(dst, *srcs)`` (statement) or ``tj.<op>(*srcs)`` (expression)."""
        arity = POINTWISE_ARITY[op]
        if op == "cast" and len(args) == 2 and isinstance(args[1], ScalarType):
            if is_tile(args[0]):
                return self.expression("cast", args[:1], args[1], dispatch, config)
            return self._scalar_only(op, dispatch, config) or self.sem.cast(*args)
        if op in POINTWISE_RANDOM and len(args) == arity:
            return self.random(op, *args, dispatch=dispatch, config=config)
        if len(args) == arity + 1:
            return self.pointwise(op, args[0], args[1:], dispatch, config)
        if len(args) == arity and op not in ("fill", "cast"):
            if any(is_tile(a) for a in args):
                return self.expression(op, args, None, dispatch, config)
            return self._scalar_only(op, dispatch, config) or self._scalar(op, args)
        srcs = ", ".join(f"src{i}" for i in range(arity)) if arity > 1 else "src"
        forms = {"fill": "tj.fill(dst, value)", "cast": "tj.cast(dst, src) or tj.cast(x, dtype)"}
        raise CompilationError(f"tj.{op} is called as "
                               f"{forms.get(op, f'tj.{op}(dst, {srcs}) or tj.{op}({srcs})')}, "
                               f"got {len(args)} argument(s)")

    @staticmethod
    def _scalar_only(op, dispatch, config) -> None:
        if dispatch is not None or config:
            raise CompilationError(f"tj.{op}: dispatch= and config= apply to tile operands only")

    def _scalar(self, op: str, args):
        sem = self.sem
        if op in ("add", "sub", "mul", "div"):
            return sem.binary("truediv" if op == "div" else op, *args)
        if op in ("maximum", "minimum"):
            return sem.min_max(op[:3], *args)
        if op == "neg":
            return sem.unary("neg", *args)
        if op == "fma":
            return sem.binary("add", sem.binary("mul", args[0], args[1]), args[2])
        if op == "select":
            return sem.select(*args)
        if op == "pow":
            return sem.binary("pow", *args)
        return sem.math(op, *args)

    def pointwise(self, op: str, dst, srcs, dispatch, config):
        dst = self._tile(dst, "dst", op)
        dtype = dst.type.dtype
        if op in POINTWISE_FLOAT_ONLY and not dtype.is_float:
            raise CompilationError(f"tj.{op} needs a float destination, got {dtype!r}")
        if op in POINTWISE_INT_ONLY and not dtype.is_int:
            raise CompilationError(f"tj.{op} needs an integer destination, got {dtype!r}")
        _check_bool_op(op, dtype)
        if op in POINTWISE_RANDOM:
            self._check_random(op, *srcs)
        if op == "fill" and not (is_scalar(srcs[0]) or is_number(srcs[0])):
            raise CompilationError("tj.fill(dst, value) takes a scalar value, got "
                                   f"{describe(srcs[0])}")
        operands = []
        for index, src in enumerate(srcs):
            if is_tile(src):
                if not broadcasts_to(src.type.shape, dst.type.shape):
                    raise CompilationError(f"tj.{op}: source {index} of shape "
                                           f"{_shape_text(src.type.shape)} does not broadcast to "
                                           f"dst of shape {_shape_text(dst.type.shape)}")
                operands.append(src)
            else:
                operands.append(self._scalar_operand(op, index, src, dtype))
        return self.b.tile("pointwise", dst, *operands, op=op, **self._attrs(dispatch, config))

    def _scalar_operand(self, op: str, index: int, x, dtype):
        if not (is_scalar(x) or is_number(x)):
            raise CompilationError(f"tj.{op}: operand {index} must be a tile or a scalar, got "
                                   f"{describe(x)}")
        if op == "select" and index == 0:
            return self.sem.to_i1(x)
        if op in POINTWISE_RANDOM and index == 0:
            if isinstance(x, bool) or not (is_int_number(x) or is_scalar(x) and x.type.is_int):
                raise CompilationError(f"tj.{op}: the seed must be an integer, got {describe(x)}")
            return self.sem.to_ir(x, i64)
        return self.sem.to_ir(x, dtype)

    @staticmethod
    def _check_random(op: str, seed, offsets):
        """A scalar seed (a tile of seeds would quietly give each element its own stream)
        and an integer tile of offsets."""
        if is_tile(seed):
            raise CompilationError(f"tj.{op}(seed, offsets): the seed must be a scalar, got "
                                   f"{describe(seed)}")
        if not (is_tile(offsets) and offsets.type.dtype.is_int and not offsets.type.dtype.is_bool):
            raise CompilationError(f"tj.{op}(seed, offsets): offsets must be an integer tile (one "
                                   f"counter per element), got {describe(offsets)}")

    def random(self, op: str, seed, offsets, dispatch=None, config=None):
        """``tj.rand/randn/randint(seed, offsets)``: a new fragment of ``offsets``' shape,
        f32 (``randint``: i32 holding Philox's raw 32-bit word)."""
        self._check_random(op, seed, offsets)
        return self.expression(op, (seed, offsets), i32 if op == "randint" else f32,
                               dispatch, config)

    def operator(self, op: str, symbol: str, operands):
        """A Python operator on tiles (``a + b``, ``-a``, ``a < b``) as a fragment expression."""
        if op == "pos":
            return operands[0]
        name = OPERATOR_OPS.get(op)
        if name is None:
            hint = "; use tj.gemm(C, A, B)" if op == "matmul" else ""
            raise CompilationError(f"'{symbol}' is not supported on tiles{hint}")
        if name not in POINTWISE_ARITY:
            raise CompilationError(f"'{symbol}' on tiles needs a pointwise '{name}' op, which the "
                                   "IR does not provide yet")
        return self.expression(name, operands, i1 if name in POINTWISE_COMPARISONS else None)

    def _operand_dtype(self, op: str, operands) -> ScalarType:
        """The dtype the operation computes in: tiles promote; a float scalar makes ints
        float; without tile operands (``tj.select(mask, 0, 1.0)``) the scalars promote."""
        for x in operands:
            if not (is_tile(x) or is_scalar(x) or is_number(x)):
                raise CompilationError(f"tile expression operands must be tiles or scalars, "
                                       f"got {describe(x)}")
        tile_types = [x.type.dtype for x in operands if is_tile(x)]
        scalar_types = [x.type if is_scalar(x) else python_number_type(x)
                        for x in operands if not is_tile(x)]
        dtype = functools.reduce(promote, tile_types or scalar_types)
        for scalar_type in scalar_types if tile_types else ():
            if scalar_type.is_float and not dtype.is_float:
                dtype = promote(dtype, scalar_type)
        if (op in POINTWISE_FLOAT_ONLY or op == "div") and not dtype.is_float:
            dtype = f32
        if op in POINTWISE_INT_ONLY and not dtype.is_int:
            raise CompilationError(f"tj.{op} needs integer operands, got {dtype!r}")
        return dtype

    def expression(self, op: str, operands, dtype=None, dispatch=None, config=None):
        """A new fragment holding ``op(*operands)`` (numpy broadcasting, promoted dtype)."""
        tiles = [x for x in operands if is_tile(x)]
        for x in tiles:
            if None in x.type.shape:
                raise CompilationError(f"a tile expression needs static shapes, but {describe(x)} "
                                       "has a run-time size; slice it to a static size first")
        shape = broadcast_shapes([x.type.shape for x in tiles])
        if shape is None:
            shapes = " and ".join(_shape_text(x.type.shape) for x in tiles)
            raise CompilationError(f"tile shapes {shapes} do not broadcast")
        computed = operands[1:] if op == "select" else operands
        if op == "cast" or op in POINTWISE_RANDOM:  # the sources keep their own dtypes
            operand_dtype = tiles[0].type.dtype
        else:
            operand_dtype = self._operand_dtype(op, computed)
        _check_bool_op(op, operand_dtype)
        dst = self.b.alloc(MemScope.FRAGMENT, dtype or operand_dtype, shape)
        srcs = [x if is_tile(x) else self._scalar_operand(op, i, x, operand_dtype)
                for i, x in enumerate(operands)]
        self.b.tile("pointwise", dst, *srcs, op=op, **self._attrs(dispatch, config))
        return dst
