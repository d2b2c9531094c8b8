"""``C (+)= op(A) @ op(B)`` on Hopper's warpgroup tensor cores, per thread: ``gemm_async``
family ``wgmma`` (``wgmma.mma_async`` m64nNk16 on f16 / bf16, m64nNk32 on fp8: one
64 x N x K multiply-add per warpgroup and instruction, K of 32 bytes), chosen with
``dispatch="wgmma"``.

Legal (else a Decline naming each condition that fails) when the target lists the wgmma
m64nNk16 (fp8: m64nNk32) shapes among its capabilities (and compiles for sm_90a where it
names an arch); the team is one whole warpgroup (a warpgroup team, or a CTA of 4 warps); A
and B are f16 or bf16 tiles of one type, or fp8 tiles (e4m3 / e5m2, mixed freely), in
shared memory -- or A is an f16 / bf16 fragment, not transposed, laid out by
``layout/hw_nvidia.wgmma_a_register_layout((M, K))`` (wgmma reads it from registers);
C is an f32 fragment of M x N, N a multiple of 8 up to 256 (the largest legal N: the
whole width of C in one instruction), M a multiple of 64 (one instruction per 64 rows),
at most 128 accumulators per thread, laid out by
``layout/hw_nvidia.wgmma_accumulator_layout((M, N))``; K is a multiple of the
instruction's (16, or 32 for fp8); and each k-step's 64 x K blocks of A and K x N block of
B sit in shared memory in a canonical wgmma layout, K-major for fp8 (wgmma transposes
16-bit operands only). That is decided on their storage offsets (static, from the
operand's layout): ``ir.ops_wgmma.describe_operand`` decodes them into descriptor fields
-- swizzle 128/64/32 bytes or none, K-major or MN-major, LBO and SBO -- the same fields
for every block, each block starting where its first element is. A region may drop a
stage dim at a run-time start (a ring's stage): the stages must be copies of one layout
a multiple of 1024 bytes apart, and the descriptors then start at index * stride plus
the constant.

Lowering, the same code in every thread: it reads its M * N / 128 values of C (zero
without ``accum``), fences them, issues one ``wgmma_mma_async`` per k-step and 64 rows
from two ``wgmma_desc`` (the root buffer and the block's first element) on that row
block's accumulators (with A in registers, ``wgmma_mma_async_reg_a`` on the thread's 8 A
values of the block and k-step, loaded from the fragment, and B's descriptor), commits,
waits for the group (pending 0) and stores D back into C: the primitive completes before
the next statement. With ``wait=False`` it stores the committed, still in-flight D into
C's registers and leaves the wait to the kernel (``tj.wgmma_wait(n)``, the tile op
``wgmma_wait``: ``passes/wgmma_groups.py`` checks that nothing else touches C -- nor a
register A -- before the wait that retires the group, and gives the wait C's values to
carry); a later ``gemm_async`` on the same C chains onto the group in flight, as wgmma
allows for one accumulator.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from ...ir.ops_wgmma import (WGMMA_A_REGISTER_TYPES, WGMMA_A_VALUES, WGMMA_FP8_TYPES,
                              WGMMA_INPUT_TYPES, WGMMA_M, describe_operand, wgmma_k)
from ...ir.scope import TEAM_WARP_AXIS, WARPS_PER_WARPGROUP, team_warps
from ...ir.types import MemScope, TeamKind, f16, f32
from ...layout import TileLayout
from ...layout.hw_nvidia import wgmma_a_register_layout, wgmma_accumulator_layout
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..effects import root_buffer
from ..loopgen import IDX, Emitter
from .async_contracts import wgmma_reasons
from .matrix_access import WARP_COORD, logical_index, region_starts, storage_offsets

__all__ = ["WGMMA_GEMM", "operand_descriptors", "root_of"]

ARCH = "sm_90a"
MAX_N = 256
MAX_ACCUMULATORS = 128   # f32 values per thread: one m64n256 (the registers a thread has)
SWIZZLE_PERIOD = 1024    # bytes: the 128-byte swizzle's pattern (8 rows of 128 bytes)
_WARP_COORD = {team: WARP_COORD[team] for team in (TeamKind.WARPGROUP, TeamKind.CTA)}


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _shape_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    # the contract's A (shared memory or registers) narrowed to what this family reads
    reasons = [r for r in wgmma_reasons(call) if not r.startswith("wgmma reads A")]
    if a.role is MemScope.FRAGMENT:
        if a.dtype not in WGMMA_A_REGISTER_TYPES:
            reasons.append(f"A is a {a.dtype} fragment: wgmma reads A from registers as f16 "
                           "or bf16 here (fp8 A from shared memory)")
        if call.attrs["transpose_a"]:
            reasons.append("A is a fragment read transposed: wgmma transposes A only from "
                           "shared memory (give the fragment as [M, K])")
    elif a.role is not MemScope.SHARED:
        reasons.append(f"A is {a.role}: this family reads A from shared memory or registers "
                       "(a fragment)")
    if a.dtype not in WGMMA_INPUT_TYPES or c.dtype != f32:
        reasons.append(f"A, B and C are {a.dtype}, {b.dtype} and {c.dtype}: this family "
                       "multiplies f16, bf16 or fp8 (e4m3, e5m2) into f32")
    # a type this family does not multiply is a reason already: judge the shape as for f16
    (m, n, k), step = _mnk(call), wgmma_k(a.dtype if a.dtype in WGMMA_INPUT_TYPES else f16)
    if m % WGMMA_M or n % 8 or n > MAX_N or k % step:
        reasons.append(f"M, N, K = {m}, {n}, {k}: wgmma m64nNk{step} takes M a multiple of 64, "
                       f"N a multiple of 8 up to {MAX_N} and K a multiple of {step} (one "
                       "instruction per 64 rows and k-step)")
    elif m * n // 128 > MAX_ACCUMULATORS:
        reasons.append(f"C [{m}, {n}] is {m * n // 128} f32 accumulators per thread of the "
                       f"warpgroup, more than {MAX_ACCUMULATORS}")
    warps = len(call.scope.active.warp_ids)
    if call.team not in _WARP_COORD or team_warps(call.team, warps) != WARPS_PER_WARPGROUP:
        reasons.append(f"the team is a {call.team} of {team_warps(call.team, warps)} warp(s): "
                       "wgmma needs one warpgroup (4 warps)")
    elif not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"only {call.scope.active.describe()} are active: every thread of the "
                       "warpgroup takes part in wgmma")
    return reasons


def _stage_terms(operand: Operand):
    """The run-time part of a region's offset, ``[(start value, elements per step)]``: dims
    the region drops at a run-time start (a stage of a ring), each moving the whole tile
    by one stride that keeps the swizzle's pattern (so one descriptor's fields serve every
    stage); or why the run-time starts are not that."""
    starts = region_starts(operand)
    base = storage_offsets(operand, [s or 0 for s in starts])
    if isinstance(base, str) or None not in starts:
        return base if isinstance(base, str) else []
    region, terms = operand.value.owner, []
    for dim, start in enumerate(starts):
        if start is not None:
            continue
        if region.attrs["keep"][dim]:
            return (f"{operand.name} starts at run time along dim {dim}, which it keeps: only "
                    "a dropped (stage) index may be known at run time only")
        stride = 0
        for step in range(1, region.operands[0].type.shape[dim]):
            moved = storage_offsets(operand, [step if d == dim else (s or 0)
                                              for d, s in enumerate(starts)])
            delta = np.unique(moved - base)
            if len(delta) != 1 or (step > 1 and delta[0] != stride * step):
                return (f"{operand.name}'s stages along dim {dim} are not copies of one "
                        "layout one stride apart")
            stride = stride or int(delta[0])
        if stride * operand.dtype.itemsize % SWIZZLE_PERIOD:
            return (f"{operand.name}'s stages are {stride * operand.dtype.itemsize} bytes apart, "
                    f"not a multiple of {SWIZZLE_PERIOD} (the widest swizzle's pattern)")
        terms.append((region.operands[1 + dim], stride))
    return terms


def _addresses(call: PrimitiveCall, name: str):
    """The operand's byte offsets from its root buffer as an (MN, K) array (run-time starts
    taken as 0), or why not."""
    operand, itemsize = call[name], call[name].dtype.itemsize
    offsets = storage_offsets(operand, [s or 0 for s in region_starts(operand)])
    if isinstance(offsets, str):
        return offsets
    stored_mn_first = call.attrs["transpose_b"] if name == "B" else not call.attrs["transpose_a"]
    return (offsets if stored_mn_first else offsets.T) * itemsize


def operand_descriptors(call: PrimitiveCall, name: str, a_rows: int = WGMMA_M):
    """(descriptor fields, K-major, the first element of each block: per ``a_rows`` rows of
    A (one block of B), per k-step) of an operand, or why its layout is not one wgmma (or
    tcgen05, whose descriptors read the same canonical layouts) reads."""
    addresses, terms = _addresses(call, name), _stage_terms(call[name])
    for why in (addresses, terms):
        if isinstance(why, str):
            return why
    dtype, found = call[name].dtype, []
    itemsize, k_step = dtype.itemsize, wgmma_k(dtype)
    rows = a_rows if name == "A" else addresses.shape[0]
    for m0 in range(0, addresses.shape[0], rows):
        found.append([])
        for k0 in range(0, addresses.shape[1], k_step):
            block = addresses[m0:m0 + rows, k0:k0 + k_step]
            step = describe_operand(block.tolist(), itemsize)
            if step is None:
                return (f"{name}'s layout is no wgmma core-matrix layout at ({m0}, k = {k0}) "
                        "(neither 8-row x 16-byte core matrices stored contiguously nor a "
                        "32/64/128-byte swizzle atom, K-major or MN-major)")
            found[-1].append(step)
    fields = {(d.lbo, d.sbo, d.swizzle, k_major) for steps in found for d, k_major in steps}
    if len(fields) > 1:
        return f"{name}'s blocks need different descriptor fields: {sorted(fields)}"
    (lbo, sbo, swizzle, k_major), = fields
    if dtype in WGMMA_FP8_TYPES and not k_major:
        return (f"{name} is {dtype} stored MN-major: wgmma reads fp8 operands K-major only (the "
                "PTX ISA transposes f16 / bf16 only); store it with K contiguous")
    starts = tuple(tuple(d.start // itemsize for d, _ in steps) for steps in found)
    return {"lbo": lbo, "sbo": sbo, "swizzle": swizzle}, k_major, starts, tuple(terms)


def check(call: PrimitiveCall) -> Plan | Decline:
    shapes = call.context.tensor_core_shapes.get("wgmma", ())
    if not shapes:
        return Decline(f"target {call.target!r} has no wgmma (its capabilities list no "
                       "'wgmma' shapes)")
    arch = call.context.arch
    if arch is not None and re.match(r"sm_\d+", arch) and arch != ARCH:
        return Decline(f"wgmma needs {ARCH}; compiling for {arch}")
    reasons = _shape_reasons(call)
    if reasons:
        return Decline(*reasons)
    c, (m, n, _), step = call["C"], _mnk(call), wgmma_k(call["A"].dtype)
    if (WGMMA_M, n, step) not in shapes:
        return Decline(f"target {call.target!r} lists no wgmma m64n{n}k{step} among its "
                       "shapes")
    axis = TEAM_WARP_AXIS[call.team]
    expected = wgmma_accumulator_layout((m, n), warp_axis=axis)
    # the operands' reasons first: a layout wgmma cannot read is what the kernel must change
    # (layout inference then leaves C without the wgmma layout too)
    a_in_registers = call["A"].role is MemScope.FRAGMENT
    operands = {name: operand_descriptors(call, name)
                for name in ("B" if a_in_registers else "AB")}
    reasons = [why for why in operands.values() if isinstance(why, str)]
    if a_in_registers:
        a, a_layout = call["A"], wgmma_a_register_layout((m, _mnk(call)[2]), warp_axis=axis)
        if not isinstance(a.layout, TileLayout) or not a.layout.equivalent(a_layout):
            reasons.append(f"A is laid out by {a.layout}; wgmma reads A from registers in "
                           f"the layout {a_layout} (layout.hw_nvidia.wgmma_a_register_layout"
                           f"(({m}, {_mnk(call)[2]})))")
    if c.role is not MemScope.FRAGMENT or not isinstance(c.layout, TileLayout) \
            or not c.layout.equivalent(expected):
        reasons.append(f"C is laid out by {c.layout}; wgmma needs the accumulator layout "
                       f"{expected} (layout.hw_nvidia.wgmma_accumulator_layout(({m}, {n})))")
    if reasons:
        return Decline(*reasons)
    dist = choose(call, [c])
    if isinstance(dist, Decline):
        return dist
    note = "; ".join(f"{name} {'K' if k_major else 'MN'}-major, "
                     + (f"{fields['swizzle']}B swizzle" if fields["swizzle"] else "no swizzle")
                     + f", LBO {fields['lbo']}, SBO {fields['sbo']}"
                     + (", a run-time stage offset" if terms else "")
                     for name, (fields, k_major, _, terms) in operands.items())
    if a_in_registers:
        note = "A from registers; " + note
    return Plan([(WGMMA_M, n, step)], {"distribution": dist, "warp_axis": axis,
                                          "operands": operands, "note": note})


def root_of(operand: Operand):
    value = operand.value
    return root_buffer(value.owner.operands[0] if operand.is_region else value)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c = call["C"]
    m, n, _ = _mnk(call)
    axis, operands = plan.details["warp_axis"], plan.details["operands"]
    layout = wgmma_accumulator_layout((m, n), warp_axis=axis)
    with em.hoisted():
        thread = {"laneid": em.thread_coord("lane_id"),
                  axis: em.thread_coord(_WARP_COORD[call.team])}
        thread_part = logical_index(em, layout, (m, n), thread)
    indices = [[em.add(t, r) for t, r in
                zip(thread_part, logical_index(em, layout, (m, n), {"m": i}))]
               for i in range(m * n // 128)]
    zero = em.const(0.0, f32)
    acc = [em.load(c, idx) if call.attrs["accum"] else zero for idx in indices]
    acc = list(em.b.create("wgmma_fence", acc).results)
    b_fields, b_k_major, (b_starts,), _ = operands["B"]
    a_type, b_type = call["A"].dtype, call["B"].dtype
    attrs = {"n": n, "a_type": a_type, "trans_b": not b_k_major}
    if b_type != a_type:   # fp8: e4m3 by e5m2 or the other way round
        attrs["b_type"] = b_type
    with em.hoisted():   # the stage's offset (0 without run-time starts); a stage index
        # computed from i64 values (a tensor's shape) still counts a ring's few stages
        stage = {name: functools.reduce(em.add, (em.mul(_as_index(em, value), stride)
                                                 for value, stride in operands[name][3]), 0)
                 for name in operands}

    def desc(name: str, start: int, fields: dict):
        offset = em.index(em.add(stage[name], start))
        return em.b.create("wgmma_desc", (root_of(call[name]), offset), fields).result
    if "A" in operands:
        a_fields, a_k_major, a_starts, _ = operands["A"]
        attrs["trans_a"] = not a_k_major

        def multiply(block: int, step: int, b_desc, accumulators):
            a_desc = desc("A", a_starts[block][step], a_fields)
            return em.b.create("wgmma_mma_async", (a_desc, b_desc, *accumulators),
                               attrs).results
    else:
        a_values = _a_values(em, call, thread, axis)

        def multiply(block: int, step: int, b_desc, accumulators):
            return em.b.create("wgmma_mma_async_reg_a",
                               (b_desc, *a_values[block][step], *accumulators), attrs).results
    per_block = n // 2   # a row block's accumulators follow one another (its registers)
    for step, b_start in enumerate(b_starts):
        b_desc = desc("B", b_start, b_fields)
        for block in range(m // WGMMA_M):
            mine = slice(block * per_block, (block + 1) * per_block)
            acc[mine] = multiply(block, step, b_desc, acc[mine])
    acc = list(em.b.create("wgmma_commit_group", acc).results)
    if call.attrs["wait"]:   # else C's registers hold the group in flight (tj.wgmma_wait)
        acc = list(em.b.create("wgmma_wait_group", acc, {"pending": 0}).results)
    for idx, value in zip(indices, acc):
        em.store(c, value, idx)


def _a_values(em: Emitter, call: PrimitiveCall, thread: dict, axis: str):
    """The thread's A values per row block and k-step (its ``WGMMA_A_VALUES`` registers of
    each 64 x 16 block, in ``wgmma_a_register_layout`` order), loaded from the fragment."""
    a = call["A"]
    m, k = a.shape
    layout = wgmma_a_register_layout((m, k), warp_axis=axis)
    with em.hoisted():
        thread_part = logical_index(em, layout, (m, k), thread)
    values = [em.load(a, [em.add(t, r) for t, r in
                          zip(thread_part, logical_index(em, layout, (m, k), {"m": i}))])
              for i in range(m * k // 128)]
    steps = k // wgmma_k(a.dtype)
    return [[values[(block * steps + step) * WGMMA_A_VALUES:
                    (block * steps + step + 1) * WGMMA_A_VALUES] for step in range(steps)]
            for block in range(m // WGMMA_M)]


def _as_index(em: Emitter, value):
    return value if isinstance(value, int) or value.type == IDX else em.b.cast(value, IDX)


WGMMA_GEMM = register(Rule("wgmma", "gemm_async", check, lower, distributions=(PER_THREAD,),
                           doc="Hopper tensor cores: wgmma.mma_async m64nNk16 (f16/bf16) or "
                               "m64nNk32 (fp8) per warpgroup into f32, operands by "
                               "shared-memory descriptors (A also from registers)"))
