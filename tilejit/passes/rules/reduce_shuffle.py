"""Reduction of a fragment whose rows are spread over threads: family ``shuffle``
(``sum``/``max``/``min``, per-thread distributions), tried before the ``tree`` fallback.

The source is laid out over lanes (and warps) along the reduced axis, and the destination
holds each row's result on every thread that holds part of the row: the source's reduced
layout (``layout.fragments.reduced_layout``). The warp-shuffle reduction of a softmax or a
layer norm. Each thread visits the results it holds (``Owned`` over the destination,
every copy) and for each one

1. folds its own elements of the row in the destination's dtype, from the first one, as
   ``tree`` does (so NaN and infinities combine alike);
2. combines that partial with the lanes holding the rest of the row: one
   ``warp_shuffle xor`` per bit of the reduced axis's lane iters (a butterfly), after which
   every one of those lanes holds the warp's total;
3. when warps split the row too, writes the warp's total to a shared scratch slot (result
   element x the warp's digit on the reduced axis); after a ``sync`` each thread folds its
   results' slots in warp order, and a second ``sync`` frees the scratch.

Every owner then stores its own copy. Legal only where the per-thread split keeps whole
warps in step: every thread of the team active and no coordinate guard (the loops run the
same trips on every lane, since a shuffle needs the whole warp), power-of-two lane iters
(an xor pairs lanes), and for warps a CTA team (a ``sync`` every thread of the CTA
reaches). Ownership is compared in closed form, on the layouts' thread iters.

Instruction shape: ``(T,)``, the ``T`` threads that share a row.
"""
from __future__ import annotations

import math

from ...errors import LayoutError
from ...ir.ops_tile import INDEX_REDUCE_OPS
from ...ir.types import MemScope, TeamKind
from ...layout import Axis, AxisKind, Iter, TileLayout, m
from ...layout.fragments import reduced_layout
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter, broadcast_index
from .common import element_access_reasons, verdict
from .reduce import COMBINE, element_loader, fold_slots, lane_butterfly, xor_offsets

__all__ = ["SHUFFLE_REDUCE"]

_WARP_AXES = ("warpid", "wid_in_wg")


def _thread_placement(layout: TileLayout) -> TileLayout:
    """``layout`` with its memory coordinates dropped: which threads hold each element."""
    shard = [Iter(it.extent, 0, m) if it.axis.kind is AxisKind.MEMORY else it
             for it in layout.shard]
    replica = [it for it in layout.replica if it.axis.kind is not AxisKind.MEMORY]
    offset = {name: value for name, value in layout.offset.items()
              if Axis(name).kind is not AxisKind.MEMORY}
    return TileLayout.from_iters(shard, replica, offset)


def _placement_reason(call: PrimitiveCall) -> str | None:
    """Why dst does not hold each row's result on exactly the threads holding the row."""
    dst, src, axis = call["dst"], call["src"], call.attrs["axis"]
    try:
        expected = _thread_placement(reduced_layout(_thread_placement(src.layout), src.shape,
                                                    axis))
    except LayoutError as err:
        return f"src's layout has no reduced layout over axis {axis}: {err.message}"
    if expected.equivalent(_thread_placement(dst.layout)):
        return None
    try:
        wanted = f": use {reduced_layout(src.layout, src.shape, axis)}"
    except LayoutError:
        wanted = ""
    return (f"dst's layout {dst.layout} does not hold each row's result on the threads that "
            f"hold the row, as src's reduced layout does{wanted}")


def _row_threads(call: PrimitiveCall, source: Owned):
    """(the src's thread iters on the reduced axis: lanes, warps; why they cannot be
    combined)."""
    axis, scope, reasons = call.attrs["axis"], call.scope, []
    row = [it for it, dim, _ in source.thread_terms if dim == axis]
    lanes = [it for it in row if it.axis.name == "laneid"]
    warps = [it for it in row if it.axis.name in _WARP_AXES]
    for it in row:
        if it not in lanes and it not in warps:
            reasons.append(f"src spreads the reduced axis over {it.axis.name}, which is "
                           "neither lanes nor warps")
    if not row:
        reasons.append("src holds whole rows on each thread (its reduced axis is not spread "
                       "over threads): nothing to shuffle, the tree family folds them")
    for it in lanes:
        if it.extent & (it.extent - 1) or it.stride & (it.stride - 1):
            reasons.append(f"src's lane iter {it} on the reduced axis has an extent or "
                           "stride that is no power of two, so no xor pairs its lanes")
    if not scope.full_team:
        reasons.append(f"shuffles need every lane of a warp: here {scope.team_size} threads "
                       f"of the {call.team} are active")
    if warps and not (call.team is TeamKind.CTA and scope.active.cluster_size == 1):
        reasons.append(f"src spreads the reduced axis over warps, which combine through "
                       f"shared memory between CTA barriers, but the team is a {call.team}")
    if warps and any(it.axis.name in _WARP_AXES for it in call["src"].layout.replica):
        reasons.append("src has copies on several warps, which would write one scratch slot "
                       "each")
    return lanes, warps, reasons


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call, allow_oob=False)
    if call.attrs["op"] in INDEX_REDUCE_OPS:
        reasons.append(f"{call.attrs['op']} would shuffle (value, index) pairs; this family "
                       "shuffles values (sum, max, min)")
    for o in (call["dst"], call["src"]):
        if o.role is not MemScope.FRAGMENT or not o.thread_axes:
            reasons.append(f"{o.name} is not a fragment laid out over threads")
    if reasons:
        return Decline(*reasons)
    dist, source = choose(call, [call["dst"]]), Owned.analyze(call, call["src"])
    for analysis in (dist, source):
        if isinstance(analysis, Decline):
            return analysis
    reasons = [why for why in [_placement_reason(call)] if why]
    for owned in (dist, source):
        if owned.guarded:
            reasons.append(f"{owned.driver.name}'s threads on {', '.join(owned.guarded)} do "
                           "not all hold elements, so lanes would leave the warp's shuffles")
    lanes, warps, why = _row_threads(call, source)
    reasons += why
    for o in call.tiles[2:]:   # a fused chain's other sources, read where src is
        if o.thread_axes:
            misread = source.check_reads(o, lambda p, o=o: [tuple(broadcast_index(o, p))])
            reasons += [misread] if misread else []
    sharing = math.prod(it.extent for it in lanes + warps)
    return verdict(reasons, [(sharing,)], distribution=dist, source=source,
                   lane_offsets=[d for it in lanes for d in xor_offsets(it.extent, it.stride)],
                   warps=warps)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, axis = call["dst"], call.attrs["axis"]
    combine, element = COMBINE[call.attrs["op"]], element_loader(call, em)
    source: Owned = plan.details["source"]
    decoded = source.decode(em)
    own = [loop for loop in source.loops if loop.dim == axis]   # the thread's part of a row
    count = math.prod(loop.extent for loop in own)

    def mine(out, q):
        """Element ``q`` of the thread's part of row ``out`` (its memory digits, mixed
        radix, outermost first)."""
        a, inner = decoded.base[axis], count
        for loop in own:
            inner //= loop.extent
            digit = em.floordiv(q, inner) if loop is own[0] else em.mod(
                em.floordiv(q, inner), loop.extent)
            a = em.add(a, em.mul(digit, loop.weight))
        return element(out, a)

    def warp_total(out):
        (acc,) = em.loop(1, count, 1, lambda q, acc: [em.b.binary(combine, acc, mine(out, q))],
                         inits=[mine(out, 0)])
        return lane_butterfly(em, combine, acc, plan.details["lane_offsets"])

    domain, warps = Box.full(dst.shape), plan.details["warps"]
    if not warps:
        em.each([(domain, lambda out: em.store(dst, warp_total(out), out))])
        return
    slots = math.prod(it.extent for it in warps)
    scratch = em.once("shuffle_scratch", lambda: em.b.alloc(MemScope.SHARED, dst.dtype,
                                                            (*dst.shape, slots)))
    with em.hoisted():
        slot = 0
        for it in warps:   # the warp's digit on the reduced axis, mixed radix
            slot = em.add(em.mul(slot, it.extent), decoded.digits[id(it)])
        slot = em.index(slot)
    em.each([(domain, lambda out: em.b.store(scratch, warp_total(out),
                                             [*map(em.index, out), slot]))])
    em.b.sync()
    em.each([(domain, lambda out: em.store(dst, fold_slots(em, combine, scratch, out, slots),
                                           out))])
    em.b.sync()   # every thread has read the scratch: the next use may write it


SHUFFLE_REDUCE = register(Rule("shuffle", "reduce", check, lower,
                               distributions=(PER_THREAD,),
                               doc="rows spread over lanes (and warps): xor shuffles, "
                                   "then shared slots per warp"))
