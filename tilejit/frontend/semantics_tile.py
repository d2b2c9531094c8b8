"""Tile semantics: the primitives (``copy``, ``gemm``, ``reduce``, pointwise) and fragment
expressions.

Primitives write their destination (first argument). Their operands are checked here, so
a wrong call is reported at the user's line: shapes broadcast like numpy (a ``(BM, 1)``
source against a ``(BM, BN)`` destination; run-time dims of global buffers match anything),
``reduce`` writes the source shape with ``axis`` removed or kept as 1, ``gemm`` needs
``M x K @ K x N = M x N`` after the transposes.

Fragment expressions (``a + b``, ``-a``, ``tj.exp(a)``) allocate a new fragment of the
broadcast shape and promoted dtype and fill it with one ``tile.pointwise``.

Reductions and scans live in ``semantics_reduce.py``, building, converting and indexing
tiles in ``semantics_build.py`` (mixins of :class:`TileSemantics`).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from tilejit.errors import CompilationError
from tilejit.ir.ops_native import APPROX_UNARY_OPS
from tilejit.ir.ops_tma import MULTICAST_CTAS
from tilejit.ir.ops_tile import (POINTWISE_ARITY, POINTWISE_COMPARISONS, POINTWISE_FLOAT_ONLY,
                                  POINTWISE_INT_ONLY, POINTWISE_RANDOM)
from tilejit.ir.types import MemScope, ScalarType, f32, i1, i32, i64, promote

from .semantics_build import BuildSemantics
from .semantics_reduce import ReductionSemantics
from .tile_shapes import IndexedTile, broadcast_shapes, broadcasts_to, shape_text
from .values import (contains_value, describe, is_int_number, is_number, is_scalar, is_tile,
                     python_number_type)

if TYPE_CHECKING:
    from .semantics import Semantics

__all__ = ["TileSemantics"]

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


def _check_bool_op(op: str, dtype: ScalarType) -> None:
    if dtype.is_bool and op in NOT_ON_BOOL:
        raise CompilationError(f"tj.{op} is not defined on bool tiles (as in numpy and torch); "
                               f"use {NOT_ON_BOOL[op]}, or cast to an integer dtype first")


def _check_approx(op: str, dtype: ScalarType, config: dict) -> None:
    """``config={"approx": True}`` asks for a target's fast approximate math function: one
    that has one, computed in single precision or narrower."""
    if "approx" not in config:
        return
    if type(config["approx"]) is not bool:
        raise CompilationError(f"tj.{op}: config['approx'] is True or False, got "
                               f"{config['approx']!r}")
    if config["approx"] and op not in APPROX_UNARY_OPS:
        raise CompilationError(f"tj.{op} has no approximate form: config={{'approx': True}} "
                               f"applies to {', '.join(f'tj.{o}' for o in APPROX_UNARY_OPS)}")
    if config["approx"] and (not dtype.is_float or dtype.bits > 32):
        raise CompilationError(f"tj.{op}: approximate math computes in float32 or narrower, "
                               f"this computes in {dtype}")


class TileSemantics(ReductionSemantics, BuildSemantics):
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
    def copy(self, dst, src, barrier, dispatch, config, is_async=False, mask=None, other=None,
             multicast=None):
        name = "copy_async" if is_async else "copy"
        if isinstance(src, IndexedTile) or isinstance(dst, IndexedTile):
            if is_async or mask is not None:
                raise CompilationError(f"tj.{name} of a tile indexed by an integer tile takes "
                                       "no mask= or barrier; the index masks itself")
            return self.indexed_copy(dst, src, other, dispatch, config)
        dst, src = self._tile(dst, "dst", name), self._tile(src, "src", name)
        if not broadcasts_to(src.type.shape, dst.type.shape):
            raise CompilationError(f"tj.{name}: src of shape {shape_text(src.type.shape)} does "
                                   f"not fit dst of shape {shape_text(dst.type.shape)}")
        barrier_operands = () if barrier is None else self.sem.memory.barrier_operands(barrier)
        attrs = self._attrs(dispatch, config)
        if multicast is not None:
            attrs["config"]["multicast"] = self._multicast(multicast, dispatch, barrier)
        if is_async:
            return self.b.tile(name, dst, src, *barrier_operands, **attrs)
        masks = () if mask is None else (self._mask(mask, dst),)
        return self.b.tile(name, dst, src, *masks, other=self._other(other, attrs, dst, src),
                           **attrs)

    @staticmethod
    def _multicast(mask, dispatch, barrier) -> int:
        """``multicast=``: a compile-time mask of CTA ranks, for a TMA load."""
        if not is_int_number(mask) or isinstance(mask, bool) \
                or not 0 < mask < 1 << MULTICAST_CTAS:
            raise CompilationError(f"tj.copy_async: multicast= is a compile-time mask of CTA "
                                   f"ranks in the cluster (bit r: rank r; at most "
                                   f"{MULTICAST_CTAS}), got {describe(mask)}")
        if dispatch != "tma" or barrier is None:
            raise CompilationError("tj.copy_async: multicast= is a TMA load's: pass "
                                   "dispatch=\"tma\" and barrier=")
        return int(mask)

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
            raise CompilationError(f"tj.copy: mask of shape {shape_text(mask.type.shape)} does "
                                   f"not broadcast to dst of shape {shape_text(dst.type.shape)}")
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
                raise CompilationError(f"{name}: val {shape_text(val.type.shape)} does not "
                                       f"broadcast to the tile {shape_text(dst.type.shape)}")
        elif is_scalar(val) or is_number(val):
            val = self.sem.to_ir(val, dst.type.dtype)
        else:
            raise CompilationError(f"{name}: val must be a tile or a scalar, got {describe(val)}")
        return self.b.tile("atomic", dst, val, op=op, order=order, sync_scope=sync_scope,
                           **self._attrs(None, None))

    def gemm(self, C, A, B, transpose_a, transpose_b, accum, dispatch, config, is_async=False,
             wait=True, barrier=None):
        name = "gemm_async" if is_async else "gemm"
        tiles = {role: self._tile(x, role, name) for role, x in (("C", C), ("A", A), ("B", B))}
        for role, x in tiles.items():
            if x.type.rank != 2:
                raise CompilationError(f"tj.{name}: {role} must be a rank-2 tile, got shape "
                                       f"{shape_text(x.type.shape)}")
        flags = {"transpose_a": self._flag(transpose_a, "transpose_a", name),
                 "transpose_b": self._flag(transpose_b, "transpose_b", name),
                 "accum": self._flag(accum, "accum", name)}
        if is_async:
            flags["wait"] = self._flag(wait, "wait", name)
            if not wait and dispatch != "wgmma":
                raise CompilationError(f"tj.gemm_async(wait=False) leaves its group in flight "
                                       f"for a later tj.wgmma_wait(n): it needs "
                                       f"dispatch=\"wgmma\", got dispatch={dispatch!r}")
        a, b, c = (tiles[r].type.shape for r in "ABC")
        m, k = a[::-1] if transpose_a else a
        k2, n = b[::-1] if transpose_b else b
        if None not in (k, k2) and k != k2:
            transposed = " after the transposes" if transpose_a or transpose_b else ""
            raise CompilationError(f"tj.{name}: A{shape_text(a)} and B{shape_text(b)} disagree "
                                   f"on K ({k} vs {k2}){transposed}")
        if not broadcasts_to(c, (m, n)) or not broadcasts_to((m, n), c):
            raise CompilationError(f"tj.{name}: C has shape {shape_text(c)} but A @ B has shape "
                                   f"{shape_text((m, n))}")
        da, db, dc = (tiles[r].type.dtype for r in "ABC")
        if da.is_float != db.is_float or dc.is_float != da.is_float:
            raise CompilationError(f"tj.{name}: A, B and C must be all float or all integer, "
                                   f"got {da!r}, {db!r} and {dc!r}")
        # an async gemm may complete on an mbarrier (tcgen05.commit's arrive)
        barrier_operands = () if barrier is None else self.sem.memory.barrier_operands(barrier)
        return self.b.tile(name, tiles["C"], tiles["A"], tiles["B"], *barrier_operands, **flags,
                           **self._attrs(dispatch, config))

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
                                           f"{shape_text(src.type.shape)} does not broadcast to "
                                           f"dst of shape {shape_text(dst.type.shape)}")
                operands.append(src)
            else:
                operands.append(self._scalar_operand(op, index, src, dtype))
        attrs = self._attrs(dispatch, config)
        _check_approx(op, dtype, attrs["config"])
        return self.b.tile("pointwise", dst, *operands, op=op, **attrs)

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
            shapes = " and ".join(shape_text(x.type.shape) for x in tiles)
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
        attrs = self._attrs(dispatch, config)
        _check_approx(op, dst.type.dtype, attrs["config"])
        self.b.tile("pointwise", dst, *srcs, op=op, **attrs)
        return dst
