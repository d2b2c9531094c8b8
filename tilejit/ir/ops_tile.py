"""Catalogue entries: tile primitives (destination first; dispatched to instructions later).

Every tile op carries the common attributes ``team`` (set by a scoped spelling such as
``tj.wg.copy``), ``dispatch`` (a forced instruction family), ``config``, ``scope``
(the ExecScope filled in by the scope-analysis pass) and ``rule`` / ``inst_shape`` (the
instruction family and shape chosen by the dispatch pass).
"""
from __future__ import annotations

import math

from .attrs import (BOOL, CONFIG, EXEC_SCOPE, INT, SCALAR, STR, Attr, Choice, Enum, Optional,
                    Steps, Tuple)
from .opdef import OpGroup, register
from .ops_native import ATOMIC_ATTRS, ATOMIC_OPS
from .types import BarrierType, MemScope, ScalarType, TeamKind, i1

TILE = OpGroup.TILE

COMMON_ATTRS = {
    "team": Attr(Optional(Enum(TeamKind)), None),
    "dispatch": Attr(Optional(STR), None),
    "config": Attr(CONFIG, {}),
    "scope": Attr(Optional(EXEC_SCOPE), None),
    # Filled by the dispatch pass: the chosen instruction family and shape.
    "rule": Attr(Optional(STR), None),
    "inst_shape": Attr(Optional(Tuple(INT)), None),
}
REDUCE_OPS = ("sum", "max", "min", "argmax", "argmin")
# Reductions whose result is the position (along the axis) of the extreme element, not a
# value of the source: their destination is an integer tile.
INDEX_REDUCE_OPS = ("argmax", "argmin")
# Inclusive scans along one axis (tj.cumsum, tj.cumprod, tj.associative_scan).
SCAN_OPS = ("sum", "prod", "max", "min")
# Pointwise op -> number of sources.
POINTWISE_ARITY = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "maximum": 2, "minimum": 2,
    "exp": 1, "exp2": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "neg": 1, "abs": 1,
    "cast": 1, "fill": 1, "fma": 3, "select": 3,
    # comparisons: computed in the promoted source type, stored as the dst dtype (1/0)
    "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2,
    # math (float), Python's // and % (floor division, remainder with the divisor's sign)
    "tanh": 1, "sigmoid": 1, "erf": 1, "sin": 1, "cos": 1, "floor": 1, "ceil": 1, "log2": 1,
    "pow": 2, "floordiv": 2, "mod": 2,
    # integer bits (the Python operators & | ^ ~ << >>)
    "bitwise_and": 2, "bitwise_or": 2, "bitwise_xor": 2, "bitwise_not": 1, "shl": 2, "shr": 2,
    # counter-based random numbers from (seed, offset): Philox 4x32-10 (docs/language.md)
    "rand": 2, "randn": 2, "randint": 2,
    # index tiles (tj.arange): dst[i] = start + i, a 1-D tile; the source is the scalar start
    "iota": 1,
}
# A pointwise op made by the fuse-pointwise pass (passes/fusion.py): its ``steps`` attribute
# is a chain of the ops above over its sources, computed per element in registers.
FUSED = "expr"
POINTWISE_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
POINTWISE_RANDOM = ("rand", "randn", "randint")
# Ops defined on one kind of destination dtype only (the others are refused at the user's
# line, or promoted to f32 in a fragment expression for FLOAT_ONLY).
POINTWISE_FLOAT_ONLY = ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin",
                        "cos", "floor", "ceil", "log2", "pow", "rand", "randn")
POINTWISE_INT_ONLY = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shl", "shr",
                      "randint")


def _shape(value):
    return value.type.shape


def _check_barrier(op, first: int, after: str) -> str | None:
    barrier = op.operands[first:]
    if not barrier:
        return None
    if len(barrier) != 2 or not isinstance(barrier[0].type, BarrierType) \
            or not getattr(barrier[1].type, "is_int", False):
        return f"{op.name.removeprefix('tile.')} takes an optional (barrier, index) pair " \
               f"after {after}"
    return None


def _check_copy_async(op):
    return _check_barrier(op, 2, "dst and src")


def _check_gemm(op):
    why = _check_barrier(op, 3, "C, A and B")   # gemm_async's completion (tcgen05)
    if why:
        return why
    c, a, b = (_shape(v) for v in op.operands[:3])
    if not len(c) == len(a) == len(b) == 2:
        return f"gemm needs rank-2 tiles, got C{list(c)} A{list(a)} B{list(b)}"
    m, k = a[::-1] if op.attrs["transpose_a"] else a
    k2, n = b[::-1] if op.attrs["transpose_b"] else b
    if None in (m, n, k, k2):
        return None
    if k != k2 or tuple(c) != (m, n):
        return f"gemm shapes do not agree: C{list(c)} = A{list(a)} @ B{list(b)}"
    return None


def _check_reduce(op):
    dst, src = _shape(op.operands[0]), _shape(op.operands[1])
    axis = op.attrs["axis"]
    if not 0 <= axis < len(src):
        return f"axis {axis} out of range for a rank-{len(src)} source"
    dropped = src[:axis] + src[axis + 1:]
    kept = src[:axis] + (1,) + src[axis + 1:]
    if tuple(dst) not in (dropped, kept):
        return f"reduce of {list(src)} over axis {axis} cannot write {list(dst)}"
    index_type = op.operands[0].type.dtype
    if op.attrs["op"] in INDEX_REDUCE_OPS and (not index_type.is_int or index_type.is_bool):
        return f"{op.attrs['op']} writes indices: its dst must be an integer tile, not {index_type}"
    srcs, steps = op.operands[2:], op.attrs["steps"]
    if srcs and steps is None:
        return "a reduce reads more than src only through steps"
    for extra in srcs:
        if not isinstance(extra.type, ScalarType) and not _broadcasts_to(_shape(extra), src):
            return f"source shape {list(_shape(extra))} does not broadcast to {list(src)}"
    return check_steps(steps, 1 + len(srcs), op.operands[1].type.dtype)


def _check_scan(op):
    dst, src = _shape(op.operands[0]), _shape(op.operands[1])
    axis = op.attrs["axis"]
    if not 0 <= axis < len(src):
        return f"axis {axis} out of range for a rank-{len(src)} source"
    if tuple(dst) != tuple(src):
        return f"a scan writes a dst of its src's shape {list(src)}, not {list(dst)}"
    return None


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) or None in (s, t) for s, t in zip(reversed(shape), reversed(target)))


def check_steps(steps, sources: int, result_dtype) -> str | None:
    """Why ``steps`` over ``sources`` values is not a valid chain ending in
    ``result_dtype`` (None when it is)."""
    if steps is None:
        return None
    for k, (name, _, *args) in enumerate(steps):
        if name == "iota":
            return "a fused chain cannot hold iota (its value is its position)"
        if len(args) != POINTWISE_ARITY[name]:
            return f"step {k} ({name}) takes {POINTWISE_ARITY[name]} value(s), got {len(args)}"
        if any(a >= sources + k for a in args):
            return f"step {k} ({name}) reads a value defined at or after it: {list(args)}"
    if steps[-1][1] != result_dtype:
        return f"the last step computes {steps[-1][1]}, not the {result_dtype} it must give"
    return None


def _check_pointwise(op):
    name, srcs = op.attrs["op"], op.operands[1:]
    steps = op.attrs["steps"]
    if (name == FUSED) != (steps is not None):
        return f"pointwise {FUSED} (and only it) carries steps"
    if name == FUSED:
        why = check_steps(steps, len(srcs), op.operands[0].type.dtype)
        if why:
            return why
    elif len(srcs) != POINTWISE_ARITY[name]:
        return f"pointwise {name} takes {POINTWISE_ARITY[name]} source(s), got {len(srcs)}"
    dst = _shape(op.operands[0])
    if name == "iota" and (len(dst) != 1 or not isinstance(srcs[0].type, ScalarType)
                           or not srcs[0].type.is_int):
        return f"iota writes a 1-D tile from an integer scalar start, got dst {list(dst)}"
    for src in srcs:
        if not isinstance(src.type, ScalarType) and not _broadcasts_to(_shape(src), dst):
            return f"source shape {list(_shape(src))} does not broadcast to {list(dst)}"
    return None


def _check_copy(op):
    dst, mask = op.operands[0].type, op.operands[2:]
    if len(mask) > 1:
        return f"copy takes at most one mask after dst and src, got {len(mask)}"
    if mask:
        mask_type = mask[0].type
        is_scalar = isinstance(mask_type, ScalarType)
        mask_dtype = mask_type if is_scalar else mask_type.dtype
        if mask_dtype != i1:
            return f"a copy's mask must be bool (i1), got {mask_dtype}"
        if not is_scalar and not _broadcasts_to(_shape(mask[0]), dst.shape):
            return f"mask shape {list(_shape(mask[0]))} does not broadcast to {list(dst.shape)}"
    other = op.attrs["other"]
    for tile in op.operands[:2]:
        if other is not None and not tile.type.dtype.is_float and not math.isfinite(other):
            return f"other={other} does not fit the {tile.type.dtype} of dst and src"
    return None


def _tile(name, operands, attrs=None, check=None):
    register(name, TILE, operands, {**(attrs or {}), **COMMON_ATTRS},
             results=lambda types, a: (), check=check)


STEPS = Steps(*POINTWISE_ARITY)
GEMM_ATTRS = {"transpose_a": Attr(BOOL, False), "transpose_b": Attr(BOOL, False),
              "accum": Attr(BOOL, True)}

# mask: elements of dst where it is False are written with ``other`` when dst is on chip (a
# load) and left alone when dst is a tensor (a store); ``other`` (default: config "fill",
# else 0) is also what source elements past the end of their tensor read as.
_tile("tile.copy", "dst:memory src:memory *mask:tile_or_scalar",
      {"other": Attr(Optional(SCALAR), None)}, _check_copy)
_tile("tile.copy_async", "dst:memory src:memory *barrier", check=_check_copy_async)
_tile("tile.gemm", "C:memory A:memory B:memory", GEMM_ATTRS, _check_gemm)
# wait: the primitive waits for its own multiplies; False leaves them in flight (family
# wgmma: the kernel retires the group with wgmma_wait, passes/wgmma_groups.py checks it)
_tile("tile.gemm_async", "C:memory A:memory B:memory *barrier", {**GEMM_ATTRS, "wait": Attr(BOOL, True)},
      _check_gemm)
# steps: the reduced elements are computed from src (value 0) and srcs (broadcast to src)
# by a fused chain (passes/fusion.py) instead of read from src alone.
_tile("tile.reduce", "dst:memory src:memory *srcs:tile_or_scalar",
      {"op": Attr(Choice(*REDUCE_OPS)), "axis": Attr(INT), "steps": Attr(Optional(STEPS), None)},
      _check_reduce)
_tile("tile.scan", "dst:memory src:memory",
      {"op": Attr(Choice(*SCAN_OPS)), "axis": Attr(INT)}, _check_scan)
_tile("tile.pointwise", "dst:memory *srcs:tile_or_scalar",
      {"op": Attr(Choice(*POINTWISE_ARITY, FUSED)), "steps": Attr(Optional(STEPS), None)},
      _check_pointwise)


def _check_atomic(op):
    dst, src = op.operands
    if dst.type.scope not in (MemScope.GLOBAL, MemScope.SHARED):
        return f"a tile atomic updates global or shared memory, not {dst.type.scope}"
    if dst.type.dtype.is_bool:
        return "atomics on bool elements are not supported"
    if not isinstance(src.type, ScalarType) and not _broadcasts_to(_shape(src), _shape(dst)):
        return f"source shape {list(_shape(src))} does not broadcast to {list(_shape(dst))}"
    return None


# Each element of dst atomically combined with the broadcast src (tj.atomic_add on a tile):
# one native atomic per element, in no particular order.
_tile("tile.atomic", "dst:memory src:tile_or_scalar",
      {"op": Attr(Choice(*ATOMIC_OPS)), **ATOMIC_ATTRS}, _check_atomic)


# Copies that move elements to other positions (docs/language.md "Building, converting and
# indexing tiles"). permute: dst[i] = src[j] with j[dims[k]] = i[k] (tj.trans, x.T).
# gather: dst[i] = src[i with i[axis] replaced by index[i]] (torch.gather; index broadcasts
# to dst). scatter: dst[j with j[axis] replaced by index[j]] = src[j] for every j of the
# broadcast shape of index and src (torch's scatter_), in row-major order. An index outside
# the indexed operand's extent (or a position past its end) is masked: gather reads
# ``other`` (default 0), scatter writes nothing.
def _check_permute(op):
    dst, src, dims = _shape(op.operands[0]), _shape(op.operands[1]), op.attrs["dims"]
    if sorted(dims) != list(range(len(src))):
        return f"dims {list(dims)} is not a permutation of the {len(src)} dims of src"
    if not _broadcasts_to(tuple(src[d] for d in dims), dst) or len(dst) != len(src):
        return f"permuting src {list(src)} by {list(dims)} cannot write dst {list(dst)}"
    return None


def _check_index_operand(index, indexed, axis, what):
    dtype = index.type.dtype
    if not dtype.is_int or dtype.is_bool:
        return f"the index of a {what} must be an integer tile, got {dtype}"
    if len(_shape(index)) != len(_shape(indexed)):
        return (f"the index of a {what} has rank {len(_shape(index))} but the tile it indexes "
                f"has rank {len(_shape(indexed))}")
    if not 0 <= axis < len(_shape(indexed)):
        return f"axis {axis} out of range for a rank-{len(_shape(indexed))} tile"
    return None


def _check_gather(op):
    dst, src, index = op.operands
    why = _check_index_operand(index, src, op.attrs["axis"], "gather")
    if why is None and not _broadcasts_to(_shape(index), _shape(dst)):
        why = f"index shape {list(_shape(index))} does not broadcast to dst {list(_shape(dst))}"
    if why is None and len(_shape(dst)) != len(_shape(src)):
        why = f"a gather writes a dst of its src's rank {len(_shape(src))}, not {len(_shape(dst))}"
    return why


def _check_scatter(op):
    dst, index, src = op.operands
    why = _check_index_operand(index, dst, op.attrs["axis"], "scatter")
    if why is None and not isinstance(src.type, ScalarType) and not all(
            a == b or 1 in (a, b) for a, b in zip(_shape(src)[::-1], _shape(index)[::-1])):
        why = (f"src shape {list(_shape(src))} and index shape {list(_shape(index))} do not "
               "broadcast")
    return why


_tile("tile.permute", "dst:memory src:memory", {"dims": Attr(Tuple(INT))}, _check_permute)
_tile("tile.gather", "dst:memory src:memory index:memory",
      {"axis": Attr(INT), "other": Attr(Optional(SCALAR), None)}, _check_gather)
_tile("tile.scatter", "dst:memory index:memory src:tile_or_scalar", {"axis": Attr(INT)},
      _check_scatter)
