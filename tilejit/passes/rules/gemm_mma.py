"""``C (+)= op(A) @ op(B)`` on tensor cores, per thread: family ``mma`` (``mma.sync``
m16n8k16 for f16/bf16, one 16x8x16 multiply-add per warp and instruction; m16n8k32 for
8-bit floats, e4m3 and e5m2 in any mix, from sm_89 on).

Legal (else a Decline naming each condition that fails) when the target lists the
instruction's ``mma`` shape among its capabilities and splits primitives per thread, and
the arch (where one is known) has it; A and B are f16 or bf16 tiles of one type, or
e4m3/e5m2 tiles, in shared memory, or in fragments no layout spreads over threads (every
thread reads them); C is an f32 fragment laid out by
``layout.fragments.mma_accumulator_layout`` of its shape over the team's warps; M, N, K are
multiples of the instruction's (16, 8, 16 or 32); and the team is a warp, warpgroup or CTA
with every thread active.

Lowering, the same code in every thread: the thread reads its registers of C (the
fragments of the atoms its warp owns, four values per 16x8 atom); then for each k-step of
16, for each of those atoms, it loads the A and B elements its lane holds in the PTX
fragment layouts (``layout/hw_nvidia.py``) -- an A fragment once per atom row, a B
fragment once per atom column -- and issues ``mma_sync``; the D values are carried to the
next step and stored back into C at the end. Which element a lane holds comes from the
layout objects: each iter's digit is read back from the lane's (and warp's) coordinate, so
no fragment table is written out here.

A fragment loads with one ``ldmatrix`` (x4 for A; x4 for the B fragments of two adjacent
atom columns of the warp, x2 for a column without a neighbour; ``.trans`` where the operand
is stored the other way round) when the ldmatrix layout delivers exactly that fragment
from matrices of 8 rows of 16 bytes of the operand (checked by enumerating both layouts)
and every such row lies contiguous and 16-byte aligned in shared memory (checked on its
storage offsets, which needs static region starts); else with plain loads at logical
indices. The 8-bit fragments of m16n8k32 hold four consecutive K elements per register,
which is what a plain ldmatrix delivers from a row of 16 bytes: an fp8 operand whose K is
its contiguous dim (A as [M, K], B given transposed as [N, K]) loads by ldmatrix; one
stored the other way round would need .trans, which moves 16-bit units, and loads by
elements. The plan's details say which, and why not.
"""
from __future__ import annotations

import re

from ...ir.ops_native import describe_mma_inputs, ldmatrix_row, mma_shape_for
from ...ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, team_warps
from ...ir.types import MemScope, f32
from ...layout import Axis, Iter, TileLayout
from ...layout.fragments import (MMA_SHAPES, lane_registers, mma_accumulator_layout,
                                 mma_atom_layout, mma_operand_layouts)
from ...layout.transform import group_iters
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..loopgen import Emitter, Index
from .matrix_access import (WARP_COORD, WARP_TEAMS, IntArith, MatrixLoad, logical_index,
                            matrix_load, rows_in_place)

__all__ = ["MMA_GEMM", "MIN_SM"]

# The first arch of each shape (PTX ISA: mma.sync m16n8k16 f16/bf16 from sm_80, m16n8k32
# .e4m3/.e5m2 from sm_89).
MIN_SM = {"m16n8k16": 80, "m16n8k32": 89}


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _operand_reasons(call: PrimitiveCall, inst: str | None) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if inst is None:
        reasons.append(f"A and B are {a.dtype} and {b.dtype}: mma.sync multiplies "
                       f"{describe_mma_inputs()}")
        inst = "m16n8k16"   # the shape the other conditions are stated for
    shape = MMA_SHAPES[inst]
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
    if m % shape[0] or n % shape[1] or k % shape[2]:
        reasons.append(f"M, N, K = {m}, {n}, {k}: mma.sync {inst} needs multiples of "
                       f"{shape[0]}, {shape[1]} and {shape[2]}")
    if call.team not in WARP_TEAMS:
        reasons.append(f"the team is a {call.team}: mma.sync needs whole warps (a warp, "
                       "warpgroup or CTA team)")
    elif not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"only {call.scope.active.describe()} are active: every lane of the "
                       f"{call.team}'s warps takes part in mma.sync")
    return reasons


def _column_pair_layout(b_fragment: TileLayout, shape) -> TileLayout:
    """The B fragments of two adjacent atom columns as one (K, 2N) fragment: the second
    column's values follow the first's in each lane (``m`` + 4)."""
    rows, cols = group_iters(b_fragment, (shape[2], shape[1]))[1]
    return TileLayout.from_iters((*rows, Iter(2, b_fragment.size("m"), Axis("m")), *cols))


def _column_pairs(call: PrimitiveCall, warps: int, axis: str, inst: str):
    """The warp's adjacent atom columns (register parts c and c + 1: the same for every
    warp), paired from the left -- one ldmatrix.x4 loads both columns' B fragments -- and
    how many columns are left single."""
    m, n, _ = _mnk(call)
    shape = MMA_SHAPES[inst]
    grid = (m // shape[0], n // shape[1])
    atoms = mma_atom_layout((m, n), warps, axis, inst)
    columns = {logical_index(IntArith, atoms, grid, {"m": j})[1]
               for j in range(grid[0] * grid[1] // warps)}
    pairs, taken = [], set()
    for column in sorted(columns):
        if column not in taken and column + 1 in columns:
            pairs.append((column, column + 1))
            taken |= {column, column + 1}
    return tuple(pairs), len(columns) - len(taken)


def _operand_loads(call: PrimitiveCall, warps: int, axis: str,
                   inst: str) -> dict[str, MatrixLoad | str]:
    """Per operand (A, B, and "B pairs": two atom columns of B at once): its ldmatrix, or
    why it loads element by element."""
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    rows, cols, depth = MMA_SHAPES[inst]
    a_fragment, b_fragment, _ = mma_operand_layouts(inst, call["A"].dtype.name,
                                                    call["B"].dtype.name)
    fragments = {"A": (a_fragment, (rows, depth), ta)}
    pairs, singles = _column_pairs(call, warps, axis, inst)
    if pairs:
        fragments["B pairs"] = (_column_pair_layout(b_fragment, MMA_SHAPES[inst]),
                                (depth, 2 * cols), tb)
    if singles:
        fragments["B"] = (b_fragment, (depth, cols), tb)
    loads = {}
    for name, (fragment, shape, transposed) in fragments.items():
        operand = call[name[0]]
        if operand.role is not MemScope.SHARED:
            loads[name] = f"{name[0]} is not in shared memory"
            continue
        size = operand.dtype.itemsize
        load = matrix_load(lane_registers(fragment, shape), shape, transposed, size)
        why = rows_in_place(operand, ldmatrix_row(operand.dtype)) if load else (
            f"no ldmatrix delivers {name}'s fragment" + (
                f" ({operand.dtype}: an 8-bit operand needs K as its contiguous dim, since "
                ".trans moves 16-bit units)"
                if size == 1 else ""))
        loads[name] = load if why is None else why
    return loads


def check(call: PrimitiveCall) -> Plan | Decline:
    inst = mma_shape_for(call["A"].dtype, call["B"].dtype)
    if inst is not None:
        shape = MMA_SHAPES[inst]
        if shape not in call.context.tensor_core_shapes.get("mma", ()):
            return Decline(f"target {call.target!r} has no mma.sync {inst} (its capabilities "
                           "list no such 'mma' shape)")
        sm = re.match(r"sm_(\d+)", call.context.arch or "")
        if sm is not None and int(sm.group(1)) < MIN_SM[inst]:
            return Decline(f"mma.sync {inst} ({call['A'].dtype} x {call['B'].dtype}) needs "
                           f"sm_{MIN_SM[inst]} or later; compiling for {call.context.arch}")
    reasons = _operand_reasons(call, inst)
    if reasons:
        return Decline(*reasons)
    c, (m, n, _) = call["C"], _mnk(call)
    warps = team_warps(call.team, len(call.scope.active.warp_ids))
    axis = TEAM_WARP_AXIS[call.team]
    expected = mma_accumulator_layout((m, n), warps, axis, inst)
    if expected is None:
        return Decline(f"C [{m}, {n}] holds {m // shape[0] * (n // shape[1])} atoms of "
                       f"{shape[0]}x{shape[1]}, which the {call.team}'s {warps} warps cannot "
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
    loads = _operand_loads(call, warps, axis, inst)
    note = "; ".join(f"{name} by {load.describe()}" if isinstance(load, MatrixLoad)
                     else f"{name} by elements ({load})" for name, load in loads.items())
    return Plan([shape], {"distribution": dist, "warps": warps, "warp_axis": axis,
                          "inst": inst, "matrix_loads": loads, "note": note})


def _fragment(em: Emitter, layout, shape, lane) -> list[tuple[Index, Index]]:
    """Per register of a fragment layout, the (row, col) its lane holds, inside the atom."""
    with em.hoisted():
        lane_part = logical_index(em, layout, shape, {"laneid": lane})
    registers = layout.size() // LANES_PER_WARP
    return [tuple(em.add(t, r) for t, r in
                  zip(lane_part, logical_index(em, layout, shape, {"m": i})))
            for i in range(registers)]


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c, a, b = call["C"], call["A"], call["B"]
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    m, n, k = _mnk(call)
    inst = plan.details["inst"]
    rows, cols, depth = MMA_SHAPES[inst]
    warps, axis = plan.details["warps"], plan.details["warp_axis"]
    atoms, grid = mma_atom_layout((m, n), warps, axis, inst), (m // rows, n // cols)
    lane = em.thread_coord("lane_id")
    with em.hoisted():
        warp = em.thread_coord(WARP_COORD[call.team]) if call.team in WARP_COORD else 0
        warp_part = logical_index(em, atoms, grid, {axis: warp})
    a_layout, b_layout, c_layout = mma_operand_layouts(inst, a.dtype.name, b.dtype.name)
    a_places = _fragment(em, a_layout, (rows, depth), lane)
    b_places = _fragment(em, b_layout, (depth, cols), lane)
    c_places = _fragment(em, c_layout, (rows, cols), lane)
    matrix_loads = {name: load for name, load in plan.details["matrix_loads"].items()
                    if isinstance(load, MatrixLoad)}
    with em.hoisted():
        lane_rows = {name: load.lane_row(em, lane) for name, load in matrix_loads.items()}

    # The warp's atoms: their register part (constants: what atoms of one row or column
    # share) and their first row and column; then the loop-invariant indices of the
    # fragments' rows of A and columns of B, per atom row and column.
    owned, a_rows, b_cols = [], {}, {}
    for j in range(grid[0] * grid[1] // warps):
        key = tuple(logical_index(em, atoms, grid, {"m": j}))
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

    def matrices(name, operand, row, col, transposed):
        """The fragment whose first element is (row, col), by one ldmatrix."""
        load, (lane_row, lane_col) = matrix_loads[name], lane_rows[name]
        first = [col, row] if transposed else [row, col]
        index = [em.index(em.add(first[0], lane_row)), em.index(em.add(first[1], lane_col))]
        return em.b.ldmatrix(em.storage(operand), index, load.num, load.trans)

    # Columns loaded in pairs: each column's key -> the pair's first key (loaded when the
    # first of the two is needed: all at once would lengthen the fragments' live ranges).
    paired = {key: first for first, _ in (_column_pairs(call, warps, axis, inst)[0]
                                          if "B pairs" in matrix_loads else ())
              for key in (first, first + 1)}

    def step(kk, *accs):
        a_frags, b_frags, results = {}, {}, []
        for j, ((row_key, col_key), origin) in enumerate(owned):
            if col_key in paired and col_key not in b_frags:
                first = paired[col_key]
                column = em.mul(em.add(warp_part[1], first), cols)
                both = matrices("B pairs", b, kk, column, tb)
                b_frags[first], b_frags[first + 1] = both[:len(both) // 2], both[len(both) // 2:]
            if row_key not in a_frags:
                a_frags[row_key] = (
                    matrices("A", a, origin[0], kk, ta) if "A" in matrix_loads else
                    [element(a, row, em.add(kk, q), ta)
                     for row, (_, q) in zip(a_rows[row_key], a_places)])
            if col_key not in b_frags:
                b_frags[col_key] = (
                    matrices("B", b, kk, origin[1], tb) if "B" in matrix_loads else
                    [element(b, em.add(kk, q), col, tb)
                     for col, (q, _) in zip(b_cols[col_key], b_places)])
            acc = accs[per_atom * j:per_atom * (j + 1)]
            results += em.b.mma_sync(a_frags[row_key], b_frags[col_key], acc, inst)
        return results

    for idx, value in zip(c_indices, em.loop(0, k, depth, step, inits=init)):
        em.store(c, value, idx)


MMA_GEMM = register(Rule("mma", "gemm", check, lower, distributions=(PER_THREAD,),
                         doc="tensor cores: mma.sync per warp, m16n8k16 f16/bf16 or "
                             "m16n8k32 e4m3/e5m2, into f32"))
