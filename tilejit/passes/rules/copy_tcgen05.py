"""Tensor memory -> registers, per thread: ``copy`` family ``tcgen05`` (``tcgen05.ld
.sync.aligned.32x32b`` then ``tcgen05.wait::ld``), the only way a ``tj.alloc_tmem``
accumulator reaches a fragment (element loops cannot address tensor memory), so it needs
no ``dispatch=``.

Legal (else a Decline naming each condition that fails) when src is a whole
``tj.alloc_tmem`` buffer of 128 x N f32 -- the accumulator of an M = 128 tcgen05.mma, data
path D: row r on lane r (``layout/hw_nvidia.tmem_datapath_layout("D", N)``) -- and dst an
f32 fragment of its shape laid out by ``layout/hw_nvidia.wg_local_layout(N)`` (thread t of
the warpgroup holds row t, register j column j: what 32x32b delivers), copied by one whole
warpgroup.

Lowering, the same code in every thread: warp w of the warpgroup may reach lanes
32w..32w+31 only, so it reads at the buffer's TMEM address plus 32w lanes; one
``tcgen05_ld`` per power of two of N (at most 128 columns each), one ``tcgen05_wait_ld``
for them all, then the values stored into the fragment's registers.
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

__all__ = ["TCGEN05_LOAD"]

MAX_COLUMNS = 128   # tcgen05.ld 32x32b .x128: registers per thread


def check(call: PrimitiveCall) -> Plan | Decline:
    dst, src = call["dst"], call["src"]
    if src.role is not MemScope.TMEM:
        return Decline(f"src is {src.role}: this family reads tensor memory")
    reasons = []
    if src.is_region:
        reasons.append("src is a region of tensor memory: copy the tj.alloc_tmem buffer itself")
    m, n = src.shape if len(src.shape) == 2 else (None, None)
    if m != TMEM_LANES or src.dtype != f32:
        reasons.append(f"src is {src.dtype} {list(src.shape)}: this family reads a 128 x N f32 "
                       "accumulator (data path D, one row a lane)")
    expected = wg_local_layout(n or 1)
    if dst.role is not MemScope.FRAGMENT or dst.dtype != f32 or tuple(dst.shape) != (m, n) \
            or not isinstance(dst.layout, TileLayout) or not dst.layout.equivalent(expected):
        reasons.append(f"dst is a {dst.role} {dst.dtype} {list(dst.shape)} laid out by "
                       f"{dst.layout}; 32x32b fills an f32 fragment of src's shape laid out "
                       f"by {expected} (layout.hw_nvidia.wg_local_layout({n}))")
    warps = len(call.scope.active.warp_ids)
    if call.team not in WARP_COORD or team_warps(call.team, warps) != WARPS_PER_WARPGROUP \
            or not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"the team is a {call.team} of {team_warps(call.team, warps)} warp(s) "
                       f"({call.scope.active.describe()} active): tcgen05.ld needs one whole "
                       "warpgroup, warp w reading lanes 32w..32w+31")
    if reasons:
        return Decline(*reasons)
    widths = " + ".join(f"x{w}" for w in _widths(n))
    return Plan([(m, n)], {"note": f"tcgen05.ld 32x32b {widths} per thread"})


def _widths(n: int) -> list[int]:
    """The columns of each tcgen05.ld: the widest power of two left, 128 at most."""
    widths = []
    while sum(widths) < n:
        widths.append(min(MAX_COLUMNS, 1 << (n - sum(widths)).bit_length() - 1))
    return widths


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst = call["dst"]
    m, n = dst.shape
    layout = wg_local_layout(n)
    with em.hoisted():
        warp = em.thread_coord(WARP_COORD[call.team])
        if call.team is TeamKind.CTA:   # a CTA of one warpgroup: its warps are the group's
            warp = em.mod(warp, WARPS_PER_WARPGROUP)
        thread = em.add(em.mul(warp, LANES_PER_WARP), em.thread_coord("lane_id"))
        row = logical_index(em, layout, (m, n), {"tid_in_wg": thread})
        taddr = em.b.create("tmem_address", (root_of(call["src"]),)).result
        mine = em.index(em.add(taddr, em.mul(warp, LANES_PER_WARP << 16)))
    loaded = []
    for width in _widths(n):
        at = em.index(em.add(mine, len(loaded)))
        loaded += em.b.create("tcgen05_ld", (at,), {"num": width}).results
    values = em.b.create("tcgen05_wait_ld", loaded).results
    for column, value in enumerate(values):
        index = logical_index(em, layout, (m, n), {"m": column})
        em.store(dst, value, [em.add(t, r) for t, r in zip(row, index)])


TCGEN05_LOAD = register(Rule("tcgen05", "copy", check, lower, distributions=(PER_THREAD,),
                             doc="tensor memory -> an f32 fragment: tcgen05.ld 32x32b per "
                                 "warp of the warpgroup, then tcgen05.wait::ld"))
