"""The footprint of an on-chip buffer: how many elements its storage holds, and how a
shared-memory buffer is aligned.

Every target stores an on-chip buffer over all the axes its layout reaches (``m``, and
lanes, warps or partitions for a tile laid out over threads), row-major without a layout:
per axis the range of coordinates the shard and offset reach, ``m`` counted from
the buffer's start. The exception is a per-thread kernel's private buffer laid out over
threads (:func:`held_per_thread`): each thread holds only the elements its layout gives it,
so its storage leaves the thread axes out (``thread_private``): the reach on ``m`` alone
for a GPU's layouts, which a GPU keeps in registers. A swizzled layout rounds ``m`` up to
whole swizzle periods, because the swizzle permutes addresses within aligned periods. The
addressing's ``Storage`` (``ir/addressing.py``) sizes storage the same way;
``tests/passes/test_shared_plan.py`` checks that the two agree.

Alignment of a shared buffer: 128 bytes, or a swizzled layout's whole period when that is
larger (1024 bytes for a 128-byte swizzle), so that a hardware swizzle, which XORs address
bits, permutes within the buffer.
"""
from __future__ import annotations

import math

from tilejit.layout import Axis, AxisKind, ComposeLayout

from .scope import WARPS_PER_WARPGROUP
from .types import MemScope, TeamKind

__all__ = ["SHARED_ALIGNMENT", "held_per_thread", "layout_reach", "on_threads",
           "reaches_threads", "shared_alignment", "storage_bytes", "storage_elements",
           "stored_reach", "swizzle_period", "team_copies"]

SHARED_ALIGNMENT = 128  # bytes: every shared buffer starts at a multiple of this


def layout_reach(tile) -> dict[str, tuple[int, int]]:
    """Per axis the lowest and highest coordinate ``tile`` places an element at (``m``
    from 0 at the latest: its coordinates are offsets from the buffer's start). Targets
    store a layout over these ranges (``ir.addressing.Storage``)."""
    reach: dict[str, tuple[int, int]] = {}
    for it in tile.shard:  # replicas are copies of the base location: not stored
        low, high = reach.get(it.axis.name, (0, 0))
        step = (it.extent - 1) * it.stride
        reach[it.axis.name] = (low + min(step, 0), high + max(step, 0))
    for name, value in tile.offset.items():
        low, high = reach.get(name, (0, 0))
        reach[name] = (low + value, high + value)
    low, high = reach.get("m", (0, 0))
    reach["m"] = (min(low, 0), high)  # m coordinates are offsets from the buffer's start
    return reach


def reaches_threads(layout) -> bool:
    """Whether ``layout`` places elements on axes other than memory (lanes, warps, ...)."""
    if layout is None:
        return False
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    return set(layout_reach(tile)) != {"m"}


def _is_thread_axis(name: str) -> bool:
    return Axis(name).kind is AxisKind.THREAD


def on_threads(layout) -> bool:
    """Whether ``layout`` places elements on thread axes (lanes, warps, ...; Trainium's
    partitions are memory), its base or its copies: a row's result held by every lane
    (``1:1@m + R[32:1@laneid]``) is on threads although only ``m`` is stored."""
    if layout is None:
        return False
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    return any(_is_thread_axis(name) for name in layout_reach(tile)) \
        or any(_is_thread_axis(it.axis.name) for it in tile.replica)


def held_per_thread(scope: MemScope, layout) -> bool:
    """Whether a per-thread kernel's buffer of ``scope`` laid out by ``layout`` is held by
    each thread in its own storage (a GPU's registers): private memory laid out over
    threads. ``place-fragments`` makes every fragment laid out over threads one."""
    return scope is MemScope.LOCAL and on_threads(layout)


def stored_reach(tile, thread_private: bool = False) -> dict[str, tuple[int, int]]:
    """The axes and coordinates storage of ``tile`` spans: all it reaches, or with
    ``thread_private`` (one thread's part, :func:`held_per_thread`) all but the thread
    axes, which say which thread holds an element, not where: ``m`` alone on a GPU."""
    reach = layout_reach(tile)
    if not thread_private:
        return reach
    return {name: span for name, span in reach.items() if not _is_thread_axis(name)}


def swizzle_period(layout) -> int:
    """Elements over which a swizzled layout's permutation repeats (1: no swizzle)."""
    if not isinstance(layout, ComposeLayout) or layout.swizzle_len == 0:
        return 1
    return 1 << (layout.per_element + layout.swizzle_len + layout.atom_len)


def storage_elements(shape, layout, thread_private: bool = False) -> int:
    """Elements the storage of a buffer of ``shape`` laid out by ``layout`` holds (one
    thread's part with ``thread_private``: :func:`stored_reach`)."""
    if layout is None:
        return math.prod(shape)
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    reach = stored_reach(tile, thread_private)
    if isinstance(layout, ComposeLayout):
        block = swizzle_period(layout)
        low, high = reach["m"]
        reach["m"] = (low, -(-(high + 1) // block) * block - 1)
    return math.prod(high - low + 1 for low, high in reach.values())


def storage_bytes(dtype, shape, layout) -> int:
    return storage_elements(shape, layout) * dtype.itemsize


def team_copies(per_team, num_warps: int) -> int:
    """Copies of a buffer with one per instance of ``per_team`` (None: one) in a CTA."""
    if per_team is None:
        return 1
    warps = WARPS_PER_WARPGROUP if per_team is TeamKind.WARPGROUP else 1
    return -(-num_warps // warps)


def shared_alignment(dtype, layout) -> int:
    """Bytes a shared buffer's offset must be a multiple of."""
    return max(SHARED_ALIGNMENT, swizzle_period(layout) * dtype.itemsize)
