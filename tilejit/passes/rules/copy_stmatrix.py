"""``stmatrix``: per thread, a copy of a 16-bit warp fragment into shared memory as
``stmatrix`` warp collectives (PTX ``stmatrix.sync.aligned.m8n8``, sm_90), each storing one,
two or four 8x8 matrices -- the store direction of the mma gemm's ``ldmatrix``.

The typical source is the mma accumulator (``layout.fragments.mma_accumulator_layout``)
cast to f16 or bf16: per 16x8 atom its lanes hold two 8x8 matrices exactly as stmatrix
takes them, so two atoms of a warp go out in one ``x4``.

Legal (else a Decline naming each condition that fails, and the ``scalar`` family copies
element by element) when the target splits primitives per thread and, compiling for an
arch, it is sm_90 or later; the copy is unmasked, of one 16-bit type (f16 or bf16), from a
fragment laid out over a team of whole warps, every lane active, into shared memory of the
same 2-D shape; the fragment's layout puts the same elements on every warp up to a shift
(its index adds up over lanes, warps and registers) and, cut into runs of ``2 * num``
registers, gives every lane its values at the places ``ldmatrix_layout(num, trans)`` gives
them in 8x8 matrices of the tile (checked by enumerating both layouts: ``matrix_load``);
and every 8-element row of the destination lies contiguous and 16-byte aligned in shared
memory (checked on its storage offsets: ``rows_in_place``). The plan's shape is
``(num, 8, 8)``; its note names the instruction and how many each thread issues, e.g.
``stmatrix.x4 (2 per thread)``.

Lowering, the same code in every thread: per run of registers, the thread reads its values
of the fragment and issues one ``stmatrix`` at the row its lane names (``MatrixLoad``'s
lane row), shifted by its warp's part of the tile.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ...ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, team_warps
from ...ir.types import MemScope, bf16, f16
from ...layout import TileLayout
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..loopgen import Emitter
from .matrix_access import (WARP_COORD, WARP_TEAMS, IntArith, MatrixLoad, logical_index,
                            matrix_load, rows_in_place)

__all__ = ["STMATRIX_COPY"]

MIN_SM = 90   # stmatrix exists from sm_90 on (PTX ISA 7.8)
STMATRIX_TYPES = (f16, bf16)


def _call_reasons(call: PrimitiveCall) -> list[str]:
    dst, src = call.operands[0], call.operands[1]
    reasons = []
    if len(call.operands) > 2 or call.attrs.get("other") is not None:
        reasons.append("a masked copy (mask=/other=) moves element by element")
    if dst.role is not MemScope.SHARED:
        reasons.append(f"dst is {dst.role} memory: stmatrix writes shared memory")
    if src.role is not MemScope.FRAGMENT or not src.thread_axes \
            or not isinstance(src.layout, TileLayout):
        reasons.append("src is not a fragment laid out over threads: stmatrix stores the "
                       "values each lane holds")
    if src.dtype not in STMATRIX_TYPES or dst.dtype != src.dtype:
        reasons.append(f"src and dst are {src.dtype} and {dst.dtype}: stmatrix stores f16 "
                       "or bf16 values without conversion")
    if len(dst.shape) != 2 or tuple(dst.shape) != tuple(src.shape):
        reasons.append(f"dst {list(dst.shape)} and src {list(src.shape)} are not one 2-D "
                       "shape")
    if call.team not in WARP_TEAMS:
        reasons.append(f"the team is a {call.team}: stmatrix needs whole warps (a warp, "
                       "warpgroup or CTA team)")
    elif not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"only {call.scope.active.describe()} are active: every lane of the "
                       f"{call.team}'s warps takes part in stmatrix")
    return reasons


def _places(layout: TileLayout, size: int) -> dict[str, np.ndarray]:
    """Each axis's coordinate of every logical element (TileLayout.apply over an array)."""
    places = {axis.name: 0 for axis in layout.axes}
    for digit, it in zip(layout.digits(np.arange(size)), layout.shard):
        places[it.axis.name] = places[it.axis.name] + digit * it.stride
    return {name: coord + layout.offset.get(name, 0) for name, coord in places.items()}


def _warp_registers(layout: TileLayout, shape, axis: str) -> list[list[int]] | str:
    """Per lane, per register, the row-major index in ``shape`` of the element warp 0
    holds there; or why the layout is no warp fragment that shifts from warp to warp."""
    extra = {a.name for a in layout.axes} - {"laneid", "m", axis}
    if extra or layout.replica or layout.size("laneid") != LANES_PER_WARP:
        return (f"src's layout {layout} is not one of {LANES_PER_WARP} lanes, registers "
                f"and the team's warps ({axis}) without replicas")
    size = math.prod(shape)
    registers = size // (LANES_PER_WARP * layout.size(axis))
    places = _places(layout, size)
    lane, register = places["laneid"], places.get("m", np.zeros(size, dtype=int))
    warp = places.get(axis, np.zeros(size, dtype=int))
    index = logical_index(IntArith, layout, shape, places)
    if (index[0] * shape[1] + index[1] != np.arange(size)).any() or (register >= registers).any():
        return f"src's layout {layout} does not add up over lanes, warps and registers"
    table = np.full((LANES_PER_WARP, registers), -1)
    table[lane[warp == 0], register[warp == 0]] = np.flatnonzero(warp == 0)
    if (table < 0).any():
        return f"src's layout {layout} leaves registers of warp 0's lanes empty"
    return table.tolist()


def _stores(table: list[list[int]], shape) -> tuple[MatrixLoad, ...] | None:
    """The stmatrix per run of ``2 * num`` registers, the widest ``num`` every run takes."""
    for num in (4, 2, 1):
        width = 2 * num
        if len(table[0]) % width:
            continue
        stores = [matrix_load([lane[g:g + width] for lane in table], shape, False)
                  for g in range(0, len(table[0]), width)]
        if None not in stores:
            return tuple(stores)
    return None


def check(call: PrimitiveCall) -> Plan | Decline:
    if "mma" not in call.context.tensor_core_shapes:
        return Decline(f"target {call.target!r} has no warp matrix fragments (its capabilities "
                       "list no 'mma' shapes)")
    sm = re.match(r"sm_(\d+)", call.context.arch or "")
    if sm is not None and int(sm.group(1)) < MIN_SM:
        return Decline(f"stmatrix needs sm_{MIN_SM} or later; compiling for {call.context.arch}")
    reasons = _call_reasons(call)
    if reasons:
        return Decline(*reasons)
    dst, src = call.operands[0], call.operands[1]
    axis = TEAM_WARP_AXIS[call.team]
    table = _warp_registers(src.layout, src.shape, axis)
    if isinstance(table, str):
        return Decline(table)
    stores = _stores(table, src.shape)
    if stores is None:
        return Decline(f"no stmatrix stores src's fragment: its layout {src.layout} does not "
                       "give a lane its values at stmatrix's places in 8x8 matrices")
    why = rows_in_place(dst)
    if why is not None:
        return Decline(why)
    dist = choose(call, [src])
    if isinstance(dist, Decline):
        return dist
    note = f"{stores[0].describe('stmatrix')} ({len(stores)} per thread)"
    warps = team_warps(call.team, len(call.scope.active.warp_ids))
    return Plan([(len(stores[0].origins), 8, 8)],
                {"distribution": dist, "warps": warps, "warp_axis": axis, "stores": stores,
                 "note": note})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = call.operands[0], call.operands[1]
    layout, shape, axis = src.layout, src.shape, plan.details["warp_axis"]
    stores = plan.details["stores"]
    lane = em.thread_coord("lane_id")
    with em.hoisted():
        warp = em.thread_coord(WARP_COORD[call.team]) if call.team in WARP_COORD else 0
        warp_part = logical_index(em, layout, shape, {axis: warp})
        lane_part = logical_index(em, layout, shape, {"laneid": lane})
        thread_part = [em.add(w, t) for w, t in zip(warp_part, lane_part)]
        rows = [[em.index(em.add(w, r)) for w, r in zip(warp_part, store.lane_row(em, lane))]
                for store in stores]
    width = 2 * stores[0].num
    for g, (store, row) in enumerate(zip(stores, rows)):
        values = [em.load(src, [em.add(t, r) for t, r in zip(
            thread_part, logical_index(em, layout, shape, {"m": g * width + i}))])
            for i in range(width)]
        em.b.stmatrix(em.storage(dst), values, row, store.trans)


STMATRIX_COPY = register(Rule("stmatrix", "copy", check, lower, distributions=(PER_THREAD,),
                              doc="a 16-bit warp fragment into shared memory by stmatrix.m8n8 "
                                  "(sm_90)"))
