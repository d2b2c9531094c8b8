"""TMA: a ``copy_async`` between a global tensor and shared memory as bulk tensor copies
of boxes (``tma_load`` / ``tma_store``, ``ir/ops_tma.py``), one lowering that every target
registering the family shares (the CUDA target prints PTX ``cp.async.bulk.tensor`` with a
tensor map per (tensor, box, swizzle); the CPU's per-thread mode runs the same IR).

The tile is cut into boxes of one shape, the largest (most elements, then the widest inner
dim) that every condition below allows; one thread issues them all. Legal, else a decline
saying which condition fails, when the call keeps TMA's contract
(``async_contracts.tma_reasons``: global <-> shared, no conversion, a load with a barrier,
a store without) and:

* one thread of its team issues it (under ``tj.elect_sync()`` or a one-thread filter);
* the global side has the shared side's shape, is a region (or the whole) of a kernel
  argument proved ``aligned16`` whose static strides are multiples of 16 bytes (the ones
  known only at launch are checked there: the tensor map's encoding refuses others), and
  a load fills zeros past the tensor's end (the hardware's fill);
* the shared side is a (region of a) shared allocation that stores each box exactly as
  TMA writes it: row-major, its 16-byte chunks permuted by the allocation's swizzle (a
  ``ComposeLayout`` of a TMA mode: ``SwizzleMode``), starting at a multiple of 128 bytes
  (of the swizzle's period when swizzled) -- proved by enumerating the storage offsets of
  the whole tile (``ir.addressing.ArrayArith``); a region's run-time starts must move the
  tile by aligned whole periods (checked over every start);
* each box keeps cuTensorMapEncodeTiled's limits (``ops_tma.box_problem``): dims of at most
  256, an inner dim of a multiple of 16 bytes, within the swizzle span.

A load with ``config["multicast"]`` (``tj.copy_async(..., multicast=mask)``) writes every
box into the CTAs of the mask (``ops_tma``), each box completing on each one's barrier.
A load's boxes complete their bytes (the whole tile: ``tile_bytes``) on the barrier; a
store's boxes form one bulk group (``bulk_commit``), which the kernel waits for with
``tj.bulk_wait(n)`` -- after a ``tj.fence_proxy_async()`` by the threads that wrote the
tile and a barrier, as PTX's memory model asks.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ...ir.addressing import ArrayArith
from ...ir.core import Operation
from ...ir.ops_tma import TMA_MAX_BOX, box_problem, swizzled_byte
from ...ir.storage import SHARED_ALIGNMENT
from ...ir.types import MemScope
from ...layout import ComposeLayout, SwizzleMode
from ..addresses import buffer_addressing
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import Decline, Plan
from ..loopgen import Emitter
from .async_contracts import tma_reasons

__all__ = ["check_tma", "lower_tma"]


def _sides(call: PrimitiveCall) -> tuple[Operand, Operand]:
    """(shared side, global side)."""
    dst, src = call["dst"], call["src"]
    return (dst, src) if dst.role is MemScope.SHARED else (src, dst)


def _issuer_reasons(call: PrimitiveCall) -> list[str]:
    if call.scope.team_size == 1:
        return []
    return [f"a tma copy is issued by one thread of its team (here {call.scope.team_size}): "
            "issue it under tj.elect_sync() or a one-thread filter"]


def _global_reasons(call: PrimitiveCall, tensor: Operand) -> list[str]:
    region = tensor.value.owner if tensor.is_region else None
    root = region.operands[0] if region is not None else tensor.value
    if isinstance(root.owner, Operation):
        return [f"{tensor.name} is not a region of a kernel argument (a view of one): a tensor "
                "map describes an argument"]
    reasons = []
    flags = call.arg_flags.get(root, ())
    if "aligned16" not in flags:
        reasons.append(f"{tensor.name}'s tensor is not known to start 16-byte aligned, as a "
                       f"tensor map's address must (its specialization: "
                       f"{', '.join(flags) or 'none'})")
    itemsize = tensor.dtype.itemsize
    for d, stride in enumerate(root.type.strides[:-1]):
        if isinstance(stride, int) and stride * itemsize % 16:
            reasons.append(f"{tensor.name}'s tensor has a stride of {stride * itemsize} bytes "
                           f"in dim {d}, not a multiple of 16 as a tensor map's strides must")
    if root.type.rank > 5:
        reasons.append(f"a tensor map describes tensors of rank 1 to 5, not {root.type.rank}")
    return reasons


def _swizzle(shared: Operand, root) -> tuple[int, str | None]:
    """(the swizzle span in bytes of the shared allocation's layout, why it is no TMA
    mode)."""
    layout = root.type.layout
    if not isinstance(layout, ComposeLayout) or layout.swizzle_len == 0:
        return 0, None
    modes = {m.swizzle_len: m for m in SwizzleMode if m is not SwizzleMode.NONE}
    mode = modes.get(layout.swizzle_len)
    tma = ComposeLayout.for_mode(mode, shared.dtype.itemsize, layout.tile_layout) if mode else None
    if tma is None or (tma.per_element, tma.atom_len) != (layout.per_element, layout.atom_len):
        return 0, (f"{shared.name}'s swizzle ({layout.per_element},{layout.swizzle_len},"
                   f"{layout.atom_len}) is no TMA swizzle mode for {shared.dtype} elements")
    return mode.bytes, None


def _tile_offsets(shared: Operand, itemsize: int, period: int):
    """(the storage offsets of the tile's elements with the region's run-time starts at 0,
    as an array of the tile's shape; why none can be proved)."""
    region = shared.value.owner if shared.is_region else None
    root = region.operands[0] if region is not None else shared.value
    if getattr(root.owner, "name", None) != "alloc":
        return None, f"{shared.name} is not a region of a shared allocation (a view of one)"
    if root.owner.attrs.get("per_team") is not None:   # copies at unaligned offsets
        return None, f"{shared.name}'s allocation has one copy per team, not one per CTA"
    addressing = buffer_addressing(root)
    if addressing is None:
        return None, f"{shared.name}'s allocation has no addressing every target shares"
    shape = root.type.shape
    grid = np.indices(shape).reshape(len(shape), -1)
    offsets = np.asarray(addressing.element_offset(ArrayArith, list(grid), shape)).reshape(shape)
    if region is None:
        return offsets, None
    index = []
    for d, (start, size, kept) in enumerate(zip(region.operands[1:], region.attrs["sizes"],
                                               region.attrs["keep"])):
        static = getattr(start.owner, "attrs", {}).get("value")
        if isinstance(static, int):
            index.append(slice(static, static + size) if kept else static)
            continue
        # a run-time start: every start moves the tile by whole aligned periods
        moved = np.moveaxis(offsets, d, 0)
        step = moved[1:] - moved[:-1] if shape[d] > 1 else np.zeros((0,), dtype=np.int64)
        if step.size and (np.any(step != step.flat[0]) or step.flat[0] * itemsize % period):
            return None, (f"{shared.name}'s run-time start in dim {d} does not move the tile by "
                          f"whole {period}-byte periods")
        index.append(slice(0, size) if kept else 0)
    return offsets[tuple(index)], None


def _box_reason(tile, box, itemsize: int, swizzle: int, period: int) -> str | None:
    """Why the tile's storage is not boxes of ``box`` stored as TMA writes them."""
    rank = len(box)
    blocks = tile.reshape([n for t, b in zip(tile.shape, box) for n in (t // b, b)])
    blocks = blocks.transpose([*range(0, 2 * rank, 2), *range(1, 2 * rank, 2)])
    blocks = blocks.reshape(-1, math.prod(box))
    bases = blocks[:, :1]
    if np.any(bases * itemsize % period):
        return f"a box does not start at a multiple of {period} bytes"
    linear = np.arange(math.prod(box)) * itemsize
    expected = swizzled_byte(linear, swizzle) // itemsize
    if np.any(blocks - bases != expected):
        kind = f"{swizzle}-byte swizzled " if swizzle else ""
        return f"the tile does not store boxes of {list(box)} {kind}row-major"
    return None


def _boxes(shape, dtype, swizzle: int):
    """Candidate boxes dividing ``shape`` within the encoding's limits, largest first."""
    def divisors(n: int):
        return [d for d in range(1, min(n, TMA_MAX_BOX) + 1) if n % d == 0]
    found = [box for box in itertools.product(*(divisors(n) for n in shape))
             if box_problem(dtype, box, swizzle) is None]
    return sorted(found, key=lambda box: (-math.prod(box), -box[-1]))


def check_tma(call: PrimitiveCall) -> Plan | Decline:
    reasons = tma_reasons(call)
    if reasons:
        return Decline(*reasons)
    shared, tensor = _sides(call)
    reasons = _issuer_reasons(call) + _global_reasons(call, tensor)
    if tuple(tensor.shape) != tuple(shared.shape):
        reasons.append(f"tma copies {tensor.name} {list(tensor.shape)} and {shared.name} of one "
                       f"shape, not {list(shared.shape)}")
    fill = call.attrs.get("other")
    fill = call.config.get("fill", 0) if fill is None else fill
    if fill != 0:
        reasons.append(f"tma fills zeros past the tensor's end, not {fill}")
    region = shared.value.owner if shared.is_region else None
    root = region.operands[0] if region is not None else shared.value
    swizzle, why = _swizzle(shared, root)
    if why:
        reasons.append(why)
    if reasons:
        return Decline(*reasons)
    itemsize = shared.dtype.itemsize
    period = max(SHARED_ALIGNMENT, 8 * swizzle)
    tile, why = _tile_offsets(shared, itemsize, period)
    if why:
        return Decline(why)
    why = []
    for box in _boxes(shared.shape, shared.dtype, swizzle):
        problem = _box_reason(tile, box, itemsize, swizzle, period)
        if problem is None:
            return Plan([tuple(box)], {"swizzle": swizzle})
        why.append(f"box {list(box)}: {problem}")
    if not why:
        return Decline(f"no TMA box divides {list(shared.shape)} with an inner dim of a "
                       f"multiple of 16 bytes" + (f" within {swizzle} bytes" if swizzle else ""))
    return Decline(*why[:3], *([f"... ({len(why) - 3} smaller boxes)"] if len(why) > 3 else []))


def lower_tma(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src, box = call["dst"], call["src"], plan.shape
    attrs = {"box": tuple(box), "swizzle": plan.details["swizzle"]}
    load_attrs = {**attrs, "multicast": call.config.get("multicast", 0)}
    origins = itertools.product(*(range(0, n, b) for n, b in zip(dst.shape, box)))
    load = dst.role is MemScope.SHARED
    for origin in origins:
        place = [em.const(i) for i in origin]
        if load:
            bar, index = call.extras
            em.b.create("tma_load", (dst.value, src.value, bar, index, *place, *place),
                        load_attrs)
        else:
            em.b.create("tma_store", (dst.value, src.value, *place, *place), attrs)
    if not load:
        em.b.create("bulk_commit")

