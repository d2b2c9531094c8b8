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
fragment layouts (``layout/hw_nvidia.py``) -- an A fragment once per atom row, a B
fragment once per atom column -- and issues ``mma_sync``; the D values are carried to the
next step and stored back into C at the end. Which element a lane holds comes from the
layout objects: each iter's digit is read back from the lane's (and warp's) coordinate, so
no fragment table is written out here.

A fragment loads with one ``ldmatrix`` (x4 for A; x4 for the B fragments of two adjacent
atom columns of the warp, x2 for a column without a neighbour; ``.trans`` where the operand
is stored the other way round) when the ldmatrix layout delivers exactly that fragment
from 8x8 matrices of the operand (checked by enumerating both layouts) and every 8-element
row of the operand lies contiguous and 16-byte aligned in shared memory (checked on its
storage offsets, which needs static region starts); else with plain loads at logical
indices. The plan's details say which, and why not.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass

import numpy as np

from ...ir.addressing import ArrayArith
from ...ir.ops_native import LDMATRIX_ROW, MMA_INPUT_TYPES
from ...ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, team_warps
from ...ir.types import MemScope, TeamKind, f32
from ...layout import Axis, Iter, TileLayout, ldmatrix_layout, mma_m16n8k16_a_layout
from ...layout import mma_m16n8k16_b_layout
from ...layout import mma_m16n8k16_c_layout
from ...layout.fragments import MMA_SHAPES, lane_registers, mma_accumulator_layout, mma_atom_layout
from ...layout.hw_nvidia import LDMATRIX_NUMS
from ...layout.transform import group_iters
from ..addresses import buffer_addressing
from ..dispatch.call import Operand, PrimitiveCall
from ..effects import root_buffer
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..loopgen import Emitter, Index

__all__ = ["MMA_GEMM", "logical_index", "region_starts", "storage_offsets"]

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


@dataclass(frozen=True)
class MatrixLoad:
    """One operand's fragment as one ldmatrix: ``num`` matrices, ``.trans`` or not, and each
    matrix's first element in the fragment's stored coordinates (row, contiguous column)."""

    num: int
    trans: bool
    origins: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        return f"ldmatrix.x{self.num}" + (".trans" if self.trans else "")

    def steps(self) -> list[tuple[int, int]]:
        """How the origin moves per bit of the matrix number: lanes compute their row's
        origin from these (origins that are not affine in the bits are not taken)."""
        first = self.origins[0]
        return [(self.origins[bit][0] - first[0], self.origins[bit][1] - first[1])
                for bit in (1, 2) if bit < self.num]

    def origin(self, j: int) -> tuple[int, int]:
        row, col = self.origins[0]
        for bit, (dr, dc) in enumerate(self.steps()):
            if j >> bit & 1:
                row, col = row + dr, col + dc
        return row, col

    def lane_row(self, em: Emitter, lane) -> tuple[Index, Index]:
        """The stored (row, column) this lane's address names, relative to the fragment:
        lane ``8 * j + r`` names row ``r`` of matrix ``j`` (lanes past ``8 * num`` repeat the
        pattern, so every address is valid)."""
        matrix = em.mod(em.floordiv(lane, LDMATRIX_ROW), self.num)
        row, col = em.add(em.mod(lane, LDMATRIX_ROW), self.origins[0][0]), self.origins[0][1]
        for bit, (dr, dc) in enumerate(self.steps()):
            digit = em.mod(em.floordiv(matrix, 1 << bit), 2)
            row, col = em.add(row, em.mul(digit, dr)), em.add(col, em.mul(digit, dc))
        return row, col


def _matrix_load(fragment: TileLayout, shape, stored_transposed: bool) -> MatrixLoad | None:
    """The ldmatrix that delivers ``fragment`` (a warp fragment of ``shape``) to every lane,
    when there is one: its layout and the fragment's must place every element alike, up to
    where each 8x8 matrix starts."""
    wanted = lane_registers(fragment, shape)
    num = len(wanted[0]) // 2
    if num not in LDMATRIX_NUMS:
        return None

    def stored(flat):
        row, col = divmod(flat, shape[1])
        return (col, row) if stored_transposed else (row, col)

    def in_matrix(place):   # ldmatrix's (matrix, row, column) of a flat (num, 8, 8) index
        matrix, rest = divmod(place, LDMATRIX_ROW * LDMATRIX_ROW)
        return (matrix, *divmod(rest, LDMATRIX_ROW))
    for trans in (False, True):
        delivered = lane_registers(ldmatrix_layout(num, trans), (num, LDMATRIX_ROW, LDMATRIX_ROW))
        origins = []
        for j in range(num):   # where lane 0's first value of matrix j puts the matrix
            _, row, col = in_matrix(delivered[0][2 * j])
            first = stored(wanted[0][2 * j])
            origins.append((first[0] - row, first[1] - col))

        def agrees(place, flat):
            j, row, col = in_matrix(place)
            return stored(flat) == (origins[j][0] + row, origins[j][1] + col)
        if all(agrees(place, flat) for got, want in zip(delivered, wanted)
               for place, flat in zip(got, want)):
            load = MatrixLoad(num, trans, tuple(origins))
            return load if all(load.origin(j) == origins[j] for j in range(num)) else None
    return None


def region_starts(operand: Operand) -> list:
    """The starts of a region operand's dims (None where known only at run time), else 0s."""
    if not operand.is_region:
        return [0] * len(operand.shape)
    return [getattr(s.owner, "attrs", {}).get("value") for s in operand.value.owner.operands[1:]]


def storage_offsets(operand: Operand, starts=None) -> np.ndarray | str:
    """The storage offset (elements from the root buffer's start) of each element of a 2-D
    shared ``operand``, or why it is not known at compile time. ``starts`` (one per dim of
    the region's buffer) stands for the region's own, e.g. a run-time start taken as 0;
    a dim the region drops stays at its start."""
    value = operand.value
    region = value.owner if operand.is_region else None
    buf = region.operands[0] if region is not None else value
    starts = region_starts(operand) if starts is None else starts
    if None in starts:
        return f"{operand.name} is a region with run-time starts"
    root = root_buffer(buf)
    if getattr(root.owner, "name", None) != "alloc" or root.owner.attrs.get("per_team"):
        return f"{operand.name} is not a shared buffer of the CTA's own"
    addressing = buffer_addressing(buf)
    if addressing is None:
        return f"{operand.name}'s storage is not known here"
    keep = region.attrs["keep"] if region is not None else [True] * len(starts)
    sizes = iter(operand.shape)
    axes = [np.arange(next(sizes)) + start if kept else np.array([start])
            for start, kept in zip(starts, keep)]
    grid = np.meshgrid(*axes, indexing="ij")
    offsets = addressing.element_offset(ArrayArith, grid, buf.type.shape)
    return np.asarray(offsets).reshape(operand.shape)


def _rows_in_place(operand: Operand) -> str | None:
    """Why the 8-element rows of ``operand`` (along its last dim) are not each contiguous
    and 16-byte aligned in shared memory (None: they are)."""
    offsets = storage_offsets(operand)
    if isinstance(offsets, str):
        return offsets
    rows, cols = operand.shape
    if cols % LDMATRIX_ROW:
        return f"{operand.name}'s rows are not 8-element runs"
    runs = offsets.reshape(rows, cols // LDMATRIX_ROW, LDMATRIX_ROW)
    if not (runs - runs[..., :1] == np.arange(LDMATRIX_ROW)).all():
        return f"{operand.name}'s layout does not keep 8 consecutive elements of a row together"
    if (runs[..., 0] % LDMATRIX_ROW).any():
        return f"{operand.name}'s rows do not start 16-byte aligned"
    return None


def _column_pair_layout(b_fragment: TileLayout) -> TileLayout:
    """The B fragments of two adjacent atom columns as one (K, 2N) fragment: the second
    column's values follow the first's in each lane (``m`` + 4)."""
    rows, cols = group_iters(b_fragment, (SHAPE[2], SHAPE[1]))[1]
    return TileLayout.from_iters((*rows, Iter(2, b_fragment.size("m"), Axis("m")), *cols))


class _Ints:
    """The Emitter's index arithmetic on Python ints (the atoms' register parts, in check)."""
    add, mul = staticmethod(operator.add), staticmethod(operator.mul)
    mod, floordiv = staticmethod(operator.mod), staticmethod(operator.floordiv)


def _column_pairs(call: PrimitiveCall, warps: int, axis: str):
    """The warp's adjacent atom columns (register parts c and c + 1: the same for every
    warp), paired from the left -- one ldmatrix.x4 loads both columns' B fragments -- and
    how many columns are left single."""
    m, n, _ = _mnk(call)
    grid = (m // SHAPE[0], n // SHAPE[1])
    atoms = mma_atom_layout((m, n), warps, axis, INST)
    columns = {logical_index(_Ints, atoms, grid, {"m": j})[1]
               for j in range(grid[0] * grid[1] // warps)}
    pairs, taken = [], set()
    for column in sorted(columns):
        if column not in taken and column + 1 in columns:
            pairs.append((column, column + 1))
            taken |= {column, column + 1}
    return tuple(pairs), len(columns) - len(taken)


def _operand_loads(call: PrimitiveCall, warps: int, axis: str) -> dict[str, MatrixLoad | str]:
    """Per operand (A, B, and "B pairs": two atom columns of B at once): its ldmatrix, or
    why it loads element by element."""
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    b_fragment = mma_m16n8k16_b_layout(call["B"].dtype.name)
    fragments = {"A": (mma_m16n8k16_a_layout(call["A"].dtype.name), (SHAPE[0], SHAPE[2]), ta)}
    pairs, singles = _column_pairs(call, warps, axis)
    if pairs:
        fragments["B pairs"] = (_column_pair_layout(b_fragment), (SHAPE[2], 2 * SHAPE[1]), tb)
    if singles:
        fragments["B"] = (b_fragment, (SHAPE[2], SHAPE[1]), tb)
    loads = {}
    for name, (fragment, shape, transposed) in fragments.items():
        operand = call[name[0]]
        if operand.role is not MemScope.SHARED:
            loads[name] = f"{name[0]} is not in shared memory"
            continue
        load = _matrix_load(fragment, shape, transposed)
        why = _rows_in_place(operand) if load else f"no ldmatrix delivers {name}'s fragment"
        loads[name] = load if why is None else why
    return loads


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
    loads = _operand_loads(call, warps, axis)
    note = "; ".join(f"{name} by {load.describe()}" if isinstance(load, MatrixLoad)
                     else f"{name} by elements ({load})" for name, load in loads.items())
    return Plan([SHAPE], {"distribution": dist, "warps": warps, "warp_axis": axis,
                          "matrix_loads": loads, "note": note})


def logical_index(em: Emitter, layout: TileLayout, shape, location: dict) -> list[Index]:
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
        lane_part = logical_index(em, layout, shape, {"laneid": lane})
    registers = layout.size() // LANES_PER_WARP
    return [tuple(em.add(t, r) for t, r in
                  zip(lane_part, logical_index(em, layout, shape, {"m": i})))
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
        warp_part = logical_index(em, atoms, grid, {axis: warp})
    a_places = _fragment(em, mma_m16n8k16_a_layout(a.dtype.name), (rows, depth), lane)
    b_places = _fragment(em, mma_m16n8k16_b_layout(b.dtype.name), (depth, cols), lane)
    c_places = _fragment(em, mma_m16n8k16_c_layout(), (rows, cols), lane)
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
    paired = {key: first for first, _ in (_column_pairs(call, warps, axis)[0]
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
            results += em.b.mma_sync(a_frags[row_key], b_frags[col_key], acc, INST)
        return results

    for idx, value in zip(c_indices, em.loop(0, k, depth, step, inits=init)):
        em.store(c, value, idx)


MMA_GEMM = register(Rule("mma", "gemm", check, lower, distributions=(PER_THREAD,),
                         doc="tensor cores: mma.sync m16n8k16 per warp, f16/bf16 into f32"))
