"""Tensor memory <-> registers, per thread: ``copy`` family ``tcgen05`` (``tcgen05.ld
.sync.aligned.32x32b`` then ``tcgen05.wait::ld``; ``tcgen05.st`` then ``tcgen05.wait::st``),
the only way between a ``tj.alloc_tmem`` accumulator and a fragment (element loops cannot
address tensor memory), so it needs no ``dispatch=``.

Legal (else a Decline naming each condition that fails) when one side is a whole
``tj.alloc_tmem`` buffer of 128 x N f32 -- the accumulator of an M = 128 tcgen05.mma, data
path D: row r on lane r (``layout/hw_nvidia.tmem_datapath_layout("D", N)``) -- and the
other an f32 fragment of its shape laid out by ``layout/hw_nvidia.wg_local_layout(N)``
(thread t of the warpgroup holds row t, register j column j: what 32x32b moves), copied by
one whole warpgroup.

Lowering, the same code in every thread: ``tcgen05_fence after_thread_sync`` (the barrier
or mbarrier wait before it ordered the other tcgen05 ops: the multiply that wrote the
accumulator, the allocation); warp w of the warpgroup may reach lanes 32w..32w+31 only, so
it accesses the buffer's TMEM address plus 32w lanes; one ``tcgen05_ld`` (``tcgen05_st``)
per power of two of N (at most 128 columns each), one ``tcgen05_wait_ld`` for them all and
the values stored into the fragment's registers (the registers' values, then one
``tcgen05_wait_st`` and ``tcgen05_fence before_thread_sync``, so that a barrier after the
copy orders the stores before a multiply that accumulates onto them).
"""
from __future__ import annotations

from ...ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP, team_warps
from ...ir.types import MemScope, TeamKind, f32
from ...layout import TileLayout
from ...layout.hw_nvidia import TMEM_LANES, wg_local_layout
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..loopgen import Emitter
from .gemm_wgmma import root_of
from .matrix_access import WARP_COORD, logical_index

__all__ = ["TCGEN05_COPY"]

MAX_COLUMNS = 128   # tcgen05.ld 32x32b .x128: registers per thread


def check(call: PrimitiveCall) -> Plan | Decline:
    dst, src = call["dst"], call["src"]
    if MemScope.TMEM not in (dst.role, src.role):
        return Decline(f"{src.role} -> {dst.role}: this family copies to or from tensor memory")
    tmem, frag = (src, dst) if src.role is MemScope.TMEM else (dst, src)
    reasons = []
    if tmem.is_region:
        reasons.append(f"{tmem.name} is a region of tensor memory: copy the tj.alloc_tmem "
                       "buffer itself")
    m, n = tmem.shape if len(tmem.shape) == 2 else (None, None)
    if m != TMEM_LANES or tmem.dtype != f32:
        reasons.append(f"{tmem.name} is {tmem.dtype} {list(tmem.shape)}: this family moves a "
                       "128 x N f32 accumulator (data path D, one row a lane)")
    expected = wg_local_layout(n or 1)
    if frag.role is not MemScope.FRAGMENT or frag.dtype != f32 \
            or tuple(frag.shape) != (m, n) or not isinstance(frag.layout, TileLayout) \
            or not frag.layout.equivalent(expected):
        reasons.append(f"{frag.name} is a {frag.role} {frag.dtype} {list(frag.shape)} laid "
                       f"out by {frag.layout}; 32x32b moves an f32 fragment of the tensor "
                       f"memory's shape laid out by {expected} "
                       f"(layout.hw_nvidia.wg_local_layout({n}))")
    warps = len(call.scope.active.warp_ids)
    if call.team not in WARP_COORD or team_warps(call.team, warps) != WARPS_PER_WARPGROUP \
            or not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"the team is a {call.team} of {team_warps(call.team, warps)} warp(s) "
                       f"({call.scope.active.describe()} active): tcgen05.ld / st needs one "
                       "whole warpgroup, warp w reaching lanes 32w..32w+31")
    if reasons:
        return Decline(*reasons)
    widths = " + ".join(f"x{w}" for w in _widths(n))
    verb = "ld" if tmem is src else "st"
    return Plan([(m, n)], {"note": f"tcgen05.{verb} 32x32b {widths} per thread"})


def _widths(n: int) -> list[int]:
    """The columns of each tcgen05.ld: the widest power of two left, 128 at most."""
    widths = []
    while sum(widths) < n:
        widths.append(min(MAX_COLUMNS, 1 << (n - sum(widths)).bit_length() - 1))
    return widths


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    loading = call["src"].role is MemScope.TMEM
    tmem, frag = (call["src"], call["dst"]) if loading else (call["dst"], call["src"])
    m, n = frag.shape
    layout = wg_local_layout(n)
    with em.hoisted():
        warp = em.thread_coord(WARP_COORD[call.team])
        if call.team is TeamKind.CTA:   # a CTA of one warpgroup: its warps are the group's
            warp = em.mod(warp, WARPS_PER_WARPGROUP)
        thread = em.add(em.mul(warp, LANES_PER_WARP), em.thread_coord("lane_id"))
        row = logical_index(em, layout, (m, n), {"tid_in_wg": thread})
        taddr = em.b.create("tmem_address", (root_of(tmem),)).result
        mine = em.index(em.add(taddr, em.mul(warp, LANES_PER_WARP << 16)))
    indices = [[em.add(t, r) for t, r in zip(row, logical_index(em, layout, (m, n),
                                                                 {"m": column}))]
               for column in range(n)]
    em.b.create("tcgen05_fence", attrs={"kind": "after_thread_sync"})
    first = 0
    if loading:
        loaded = []
        for width in _widths(n):
            at = em.index(em.add(mine, first))
            loaded += em.b.create("tcgen05_ld", (at,), {"num": width}).results
            first += width
        for index, value in zip(indices, em.b.create("tcgen05_wait_ld", loaded).results):
            em.store(frag, value, index)
        return
    for width in _widths(n):
        values = [em.load(frag, index) for index in indices[first:first + width]]
        em.b.create("tcgen05_st", (em.index(em.add(mine, first)), *values), {"num": width})
        first += width
    em.b.create("tcgen05_wait_st")
    em.b.create("tcgen05_fence", attrs={"kind": "before_thread_sync"})


TCGEN05_COPY = register(Rule("tcgen05", "copy", check, lower, distributions=(PER_THREAD,),
                             doc="tensor memory <-> an f32 fragment: tcgen05.ld / st 32x32b "
                                 "per warp of the warpgroup, then their wait"))
