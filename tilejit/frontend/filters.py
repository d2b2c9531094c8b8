"""Thread filters: which ``if`` conditions narrow the active threads (TIRx §4).

An ``if`` whose condition compares a thread id with compile-time constants
(``warp_id() == 0``, ``2 <= warp_id() < 4``, ``warpgroup_id() < 2`` and conjunctions of
those on one axis) or is ``elect_sync()`` gets a ``filter`` attribute naming the thread
range its then-branch keeps. The condition is recognised on the IR already built for it
(a ``cmp`` of a ``thread_index`` with a ``const``), so ``w = tj.warp_id(); if w == 0:``
filters too. ``tj.tfilter(warp=(2, 4))`` builds such a condition itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.errors import ScopeError
from tilejit.ir.attrs import FilterSpec
from tilejit.ir.core import Operation, Value
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP

from .signature import LaunchOptions

if TYPE_CHECKING:
    from .semantics import Semantics

__all__ = ["thread_filter", "filter_condition", "axis_extent"]

# thread_index kind -> filter axis (docs/ir.md "Filters").
FILTER_AXES = {"warp_id": "warp", "warpgroup_id": "warpgroup", "warp_id_in_wg": "warp_in_wg",
               "lane_id": "lane", "thread_id": "thread", "cta_id_in_cluster": "cta"}
FILTER_KINDS = {axis: kind for kind, axis in FILTER_AXES.items()}
FLIPPED = {"eq": "eq", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def axis_extent(axis: str, options: LaunchOptions) -> int:
    """How many ids the thread axis has in one CTA (or cluster, for ``cta``)."""
    warps = options.num_warps
    return {"lane": LANES_PER_WARP, "warp": warps, "warp_in_wg": min(WARPS_PER_WARPGROUP, warps),
            "warpgroup": -(-warps // WARPS_PER_WARPGROUP), "thread": LANES_PER_WARP * warps,
            "cta": options.cluster_size}[axis]


def filter_condition(sem: Semantics, axis: str, lo: int, hi: int) -> Value:
    """The native condition ``lo <= id < hi`` of ``tj.tfilter(axis=(lo, hi))``."""
    if not 0 <= lo < hi:
        raise ScopeError(f"tj.tfilter({axis}=({lo}, {hi})) keeps no thread")
    ident = sem.b.thread_index(FILTER_KINDS[axis])
    if hi == lo + 1:
        return sem.compare("eq", ident, lo)
    upper = sem.compare("lt", ident, hi)
    return upper if lo == 0 else sem.logical("and", sem.compare("ge", ident, lo), upper)


KEEPS_NO_THREAD = object()   # a filter whose range misses every thread: never true


def thread_filter(cond: Value, options: LaunchOptions):
    """The filter an ``if`` on ``cond`` applies, None for a plain run-time ``if``, or
    ``KEEPS_NO_THREAD`` when the condition is a filter that no thread passes
    (``warp_id() >= 4`` with 4 warps, ``thread_id() < LIMIT`` with ``LIMIT = 0``): like
    ``if False:``, its branch is dead code, as it would be in Python or CUDA."""
    found = _filter_range(cond, options)
    if found is None:
        return None
    axis, lo, hi = found
    if axis == "elect":
        return FilterSpec("elect")
    if lo >= hi:
        return KEEPS_NO_THREAD
    return FilterSpec(axis, lo, hi)


def _filter_range(cond: Value, options: LaunchOptions):
    """(axis, lo, hi) kept by ``cond``, clipped to the axis; None when it is no filter."""
    op = _defining_op(cond)
    if op is None:
        return None
    if op.name == "elect_sync":
        return "elect", None, None
    if op.name == "binary" and op.attrs["op"] == "and":
        left, right = (_filter_range(v, options) for v in op.operands)
        if left and right and left[0] == right[0] != "elect":
            return left[0], max(left[1], right[1]), min(left[2], right[2])
        return None
    if op.name != "cmp" or op.attrs["pred"] == "ne":  # != keeps two ranges: not a filter
        return None
    pred, (lhs, rhs) = op.attrs["pred"], op.operands
    axis, bound = _thread_axis(lhs), _const_int(rhs)
    if axis is None:
        axis, bound, pred = _thread_axis(rhs), _const_int(lhs), FLIPPED[pred]
    if axis is None or bound is None:
        return None
    extent = axis_extent(axis, options)
    lo, hi = {"eq": (bound, bound + 1), "lt": (0, bound), "le": (0, bound + 1),
              "gt": (bound + 1, extent), "ge": (bound, extent)}[pred]
    return axis, max(lo, 0), min(hi, extent)


def _defining_op(value: Value) -> Operation | None:
    """The op defining ``value``, looking through integer casts."""
    op = value.owner if isinstance(value.owner, Operation) else None
    while op is not None and op.name == "cast" and op.operands[0].type.is_int:
        inner = op.operands[0].owner
        op = inner if isinstance(inner, Operation) else None
    return op


def _thread_axis(value: Value) -> str | None:
    op = _defining_op(value)
    if op is None or op.name != "thread_index" or op.attrs["dim"] != 0:
        return None
    return FILTER_AXES.get(op.attrs["kind"])


def _const_int(value: Value) -> int | None:
    op = _defining_op(value)
    if op is None or op.name != "const" or isinstance(op.attrs["value"], (bool, float)):
        return None
    return op.attrs["value"]
