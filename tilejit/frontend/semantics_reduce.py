"""Reductions and scans: ``tj.reduce`` (statement form) and the expression forms
``tj.sum/max/min/argmax/argmin`` and ``tj.cumsum/cumprod/associative_scan``.

A mixin of ``TileSemantics`` (``semantics_tile.py``): the methods use its operand checks
(``_tile``, ``_flag``, ``_attrs``) and ``copy``.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.ops_tile import INDEX_REDUCE_OPS, REDUCE_OPS, SCAN_OPS
from tilejit.ir.types import MemScope, ScalarType, f32, i32, u32

from .tile_shapes import shape_text
from .values import describe, is_int_number, is_number, is_scalar, is_tile

__all__ = ["ReductionSemantics"]


class ReductionSemantics:
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
            raise CompilationError(f"tj.reduce: reducing {shape_text(shape)} over axis {axis} "
                                   f"gives {shape_text(dropped)} or {shape_text(kept)}, but dst "
                                   f"has shape {shape_text(out)}")
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
                                       f"{shape_text(later.type.shape)}, got {describe(combined)}")
            step = self.b.alloc(MemScope.FRAGMENT, dtype, shape)
            self.copy(window(step, 0, d), window(acc, 0, d), None, None, None)
            self.copy(window(step, d, n), combined, None, None, None)
            acc, d = step, 2 * d
        return acc
