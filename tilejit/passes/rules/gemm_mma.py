"""``C (+)= op(A) @ op(B)`` on tensor cores, per thread: family ``mma`` (``mma.sync``
m16n8k16, one 16x8x16 multiply-add per warp and instruction).

Legal (else a Decline naming each condition that fails) when the target lists the
m16n8k16 ``mma`` shape among its capabilities and splits primitives per thread; A and B
are f16 or bf16 tiles of one type in shared memory, or in fragments no layout spreads
over threads (every thread reads them); C is an f32 fragment laid out by
``layout.fragments.mma_accumulator_layout`` of its shape over the team's warps; M, N, K are
multiples of 16, 8, 16; and the team is a warp, warpgroup or CTA with every thread active.

Lowering, the same code in every thread: the thread reads its registers of C (the
fragments of the atoms its warp owns, four values per 16x8 atom); then for each k-step of
16, for each of those atoms, it loads the A and B elements its lane holds in the PTX
fragment layouts (``layout/hw_nvidia.py``) with plain loads at logical indices -- an
A fragment once per atom row, a B fragment once per atom column -- and issues
``mma_sync``; the D values are carried to the next step and stored back into C at the end.
Which element a lane holds comes from the layout objects: each iter's digit is read back
from the lane's (and warp's) coordinate, so no fragment table is written out here.
"""
from __future__ import annotations

import re

from ...ir.ops_native import MMA_INPUT_TYPES
from ...ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, team_warps
from ...ir.types import MemScope, TeamKind, f32
from ...layout import TileLayout, mma_m16n8k16_a_layout, mma_m16n8k16_b_layout
from ...layout import mma_m16n8k16_c_layout
from ...layout.fragments import MMA_SHAPES, mma_accumulator_layout, mma_atom_layout
from ...layout.transform import group_iters
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..loopgen import Emitter, Index

__all__ = ["MMA_GEMM"]

INST = "m16n8k16"
SHAPE = MMA_SHAPES[INST]
MIN_SM = 80   # mma.sync.aligned.m16n8k16 exists from sm_80 on (PTX ISA)
_WARP_TEAMS = (TeamKind.WARP, TeamKind.WARPGROUP, TeamKind.CTA)   # teams of whole warps
_WARP_COORD = {TeamKind.WARPGROUP: "warp_id_in_wg", TeamKind.CTA: "warp_id"}


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _operand_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if a.dtype not in MMA_INPUT_TYPES or b.dtype != a.dtype:
        reasons.append(f"A and B are {a.dtype} and {b.dtype}: mma.sync multiplies f16 or "
                       "bf16 tiles of one type")
    if c.dtype != f32:
        reasons.append(f"C is {c.dtype}: mma.sync accumulates in f32")
    for o in (a, b):
        if o.role is not MemScope.SHARED and not (o.role is MemScope.FRAGMENT
                                                  and not o.thread_axes):
            where = "a fragment laid out over threads" if o.role is MemScope.FRAGMENT \
                else f"{o.role} memory"
            reasons.append(f"{o.name} is {where}: every lane loads the elements its "
                           "fragment needs, so it must be in shared memory (or a fragment "
                           "every thread reads)")
    m, n, k = _mnk(call)
    if m % SHAPE[0] or n % SHAPE[1] or k % SHAPE[2]:
        reasons.append(f"M, N, K = {m}, {n}, {k}: mma.sync {INST} needs multiples of "
                       f"{SHAPE[0]}, {SHAPE[1]} and {SHAPE[2]}")
    if call.team not in _WARP_TEAMS:
        reasons.append(f"the team is a {call.team}: mma.sync needs whole warps (a warp, "
                       "warpgroup or CTA team)")
    elif not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"only {call.scope.active.describe()} are active: every lane of the "
                       f"{call.team}'s warps takes part in mma.sync")
    return reasons


def check(call: PrimitiveCall) -> Plan | Decline:
    if SHAPE not in call.context.tensor_core_shapes.get("mma", ()):
        return Decline(f"target {call.target!r} has no mma.sync {INST} (its capabilities "
                       "list no such 'mma' shape)")
    sm = re.match(r"sm_(\d+)", call.context.arch or "")
    if sm is not None and int(sm.group(1)) < MIN_SM:
        return Decline(f"mma.sync {INST} needs sm_{MIN_SM} or later; compiling for "
                       f"{call.context.arch}")
    reasons = _operand_reasons(call)
    if reasons:
        return Decline(*reasons)
    c, (m, n, _) = call["C"], _mnk(call)
    warps = team_warps(call.team, len(call.scope.active.warp_ids))
    axis = TEAM_WARP_AXIS[call.team]
    expected = mma_accumulator_layout((m, n), warps, axis, INST)
    if expected is None:
        return Decline(f"C [{m}, {n}] holds {m // SHAPE[0] * (n // SHAPE[1])} atoms of "
                       f"{SHAPE[0]}x{SHAPE[1]}, which the {call.team}'s {warps} warps cannot "
                       "share evenly")
    if c.role is not MemScope.FRAGMENT or not isinstance(c.layout, TileLayout) \
            or not c.layout.equivalent(expected):
        what = f"laid out by {c.layout}" if c.role is MemScope.FRAGMENT else f"in {c.role} memory"
        return Decline(f"C is {what}; mma.sync needs an f32 fragment laid out by the "
                       f"accumulator layout {expected} (layout.fragments."
                       f"mma_accumulator_layout(({m}, {n}), {warps}, {axis!r}))")
    dist = choose(call, [c])
    if isinstance(dist, Decline):
        return dist
    return Plan([SHAPE], {"distribution": dist, "warps": warps, "warp_axis": axis})


def _logical_index(em: Emitter, layout: TileLayout, shape, location: dict) -> list[Index]:
    """The logical index of the element ``layout`` places at ``location`` (axis name ->
    coordinate, absent axes 0): each iter's digit read back from its axis's coordinate.
    Exact for layouts without replicas whose iters on one axis do not overlap, as the mma
    fragments; it adds up over the axes, so a lane's part and a register's part are
    computed apart (the register's folds to constants)."""
    _, groups = group_iters(layout, shape)
    index = []
    for group in groups:
        value, weight = 0, 1
        for it in reversed(group):
            digit = em.mod(em.floordiv(location.get(it.axis.name, 0), it.stride), it.extent)
            value = em.add(value, em.mul(digit, weight))
            weight *= it.extent
        index.append(value)
    return index


def _fragment(em: Emitter, layout, shape, lane) -> list[tuple[Index, Index]]:
    """Per register of a fragment layout, the (row, col) its lane holds, inside the atom."""
    with em.hoisted():
        lane_part = _logical_index(em, layout, shape, {"laneid": lane})
    registers = layout.size() // LANES_PER_WARP
    return [tuple(em.add(t, r) for t, r in
                  zip(lane_part, _logical_index(em, layout, shape, {"m": i})))
            for i in range(registers)]


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c, a, b = call["C"], call["A"], call["B"]
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    m, n, k = _mnk(call)
    rows, cols, depth = SHAPE
    warps, axis = plan.details["warps"], plan.details["warp_axis"]
    atoms, grid = mma_atom_layout((m, n), warps, axis, INST), (m // rows, n // cols)
    lane = em.thread_coord("lane_id")
    with em.hoisted():
        warp = em.thread_coord(_WARP_COORD[call.team]) if call.team in _WARP_COORD else 0
        warp_part = _logical_index(em, atoms, grid, {axis: warp})
    a_places = _fragment(em, mma_m16n8k16_a_layout(a.dtype.name), (rows, depth), lane)
    b_places = _fragment(em, mma_m16n8k16_b_layout(b.dtype.name), (depth, cols), lane)
    c_places = _fragment(em, mma_m16n8k16_c_layout(), (rows, cols), lane)

    # The warp's atoms: their register part (constants: what atoms of one row or column
    # share) and their first row and column; then the loop-invariant indices of the
    # fragments' rows of A and columns of B, per atom row and column.
    owned, a_rows, b_cols = [], {}, {}
    for j in range(grid[0] * grid[1] // warps):
        key = tuple(_logical_index(em, atoms, grid, {"m": j}))
        origin = tuple(em.mul(em.add(w, r), size)
                       for w, r, size in zip(warp_part, key, (rows, cols)))
        owned.append((key, origin))
        a_rows.setdefault(key[0], [em.add(origin[0], r) for r, _ in a_places])
        b_cols.setdefault(key[1], [em.add(origin[1], s) for _, s in b_places])
    c_indices = [[em.add(origin[0], r), em.add(origin[1], s)]
                 for _, origin in owned for r, s in c_places]
    zero = em.const(0.0, f32)
    init = [em.load(c, idx) if call.attrs["accum"] else zero for idx in c_indices]
    per_atom = len(c_places)

    def element(operand, row, col, transposed):
        return em.load(operand, [col, row] if transposed else [row, col])

    def step(kk, *accs):
        a_frags, b_frags, results = {}, {}, []
        for j, ((row_key, col_key), _) in enumerate(owned):
            if row_key not in a_frags:
                a_frags[row_key] = [element(a, row, em.add(kk, q), ta)
                                    for row, (_, q) in zip(a_rows[row_key], a_places)]
            if col_key not in b_frags:
                b_frags[col_key] = [element(b, em.add(kk, q), col, tb)
                                    for col, (q, _) in zip(b_cols[col_key], b_places)]
            acc = accs[per_atom * j:per_atom * (j + 1)]
            results += em.b.mma_sync(a_frags[row_key], b_frags[col_key], acc, INST)
        return results

    for idx, value in zip(c_indices, em.loop(0, k, depth, step, inits=init)):
        em.store(c, value, idx)


MMA_GEMM = register(Rule("mma", "gemm", check, lower, distributions=(PER_THREAD,),
                         doc="tensor cores: mma.sync m16n8k16 per warp, f16/bf16 into f32"))
