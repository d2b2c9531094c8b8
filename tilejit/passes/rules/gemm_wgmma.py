"""``C (+)= op(A) @ op(B)`` on Hopper's warpgroup tensor cores, per thread: ``gemm_async``
family ``wgmma`` (``wgmma.mma_async`` m64nNk16, one 64 x N x 16 multiply-add per
warpgroup and instruction), chosen with ``dispatch="wgmma"``.

Legal (else a Decline naming each condition that fails) when the target lists the wgmma
m64nNk16 shapes among its capabilities (and compiles for sm_90a where it names an arch);
the team is one whole warpgroup (a warpgroup team, or a CTA of 4 warps); A and B are f16
or bf16 tiles of one type in shared memory; C is an f32 fragment of 64 x N, N a multiple
of 8 up to 256 (the largest legal N: the whole of C in one instruction), laid out by
``layout/hw_nvidia.wgmma_acc_layout(N)``; K is a multiple of 16; and each k-step's 64 x 16
block of A and 16 x N block of B sits in shared memory in a canonical wgmma layout: their
storage offsets (static, from the operand's layout) are decoded into descriptor fields by
``ir.ops_wgmma.describe_operand`` -- swizzle 128/64/32 bytes or none, K-major or MN-major,
LBO and SBO -- the same fields for every k-step, each step starting where its first
element is.

Lowering, the same code in every thread: it reads its N / 2 values of C (zero without
``accum``), fences them, issues one ``wgmma_mma_async`` per k-step from two
``wgmma_desc`` (the root buffer and the step's first element, a constant), commits, waits
for the group (pending 0) and stores D back into C: the primitive completes before the
next statement (a legal schedule of the asynchronous op; overlapping it with later
statements is left to a later pass).
"""
from __future__ import annotations

import re

from ...ir.ops_wgmma import WGMMA_INPUT_TYPES, WGMMA_K, WGMMA_M, describe_operand
from ...ir.scope import TEAM_WARP_AXIS, WARPS_PER_WARPGROUP, team_warps
from ...ir.types import MemScope, TeamKind, f32
from ...layout import TileLayout
from ...layout.hw_nvidia import wgmma_acc_layout
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import choose
from ..effects import root_buffer
from ..loopgen import Emitter
from .async_contracts import wgmma_reasons
from .gemm_mma import logical_index, storage_offsets

__all__ = ["WGMMA_GEMM"]

ARCH = "sm_90a"
MAX_N = 256
_WARP_COORD = {TeamKind.WARPGROUP: "warp_id_in_wg", TeamKind.CTA: "warp_id"}


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _shape_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    # the contract's A (shared memory or registers) narrowed to what this family reads
    reasons = [r for r in wgmma_reasons(call) if not r.startswith("wgmma reads A")]
    if a.role is not MemScope.SHARED:
        reasons.append(f"A is {a.role}: this family reads A from shared memory")
    if a.dtype not in WGMMA_INPUT_TYPES or c.dtype != f32:
        reasons.append(f"A, B and C are {a.dtype}, {b.dtype} and {c.dtype}: this family "
                       "multiplies f16 or bf16 into f32")
    m, n, k = _mnk(call)
    if m != WGMMA_M or n % 8 or n > MAX_N or k % WGMMA_K:
        reasons.append(f"M, N, K = {m}, {n}, {k}: wgmma m64nNk16 takes M = 64, N a multiple "
                       f"of 8 up to {MAX_N} and K a multiple of 16 (one warpgroup, one "
                       "instruction per k-step)")
    warps = len(call.scope.active.warp_ids)
    if call.team not in _WARP_COORD or team_warps(call.team, warps) != WARPS_PER_WARPGROUP:
        reasons.append(f"the team is a {call.team} of {team_warps(call.team, warps)} warp(s): "
                       "wgmma needs one warpgroup (4 warps)")
    elif not call.scope.full_team or call.scope.active.elected:
        reasons.append(f"only {call.scope.active.describe()} are active: every thread of the "
                       "warpgroup takes part in wgmma")
    return reasons


def _addresses(call: PrimitiveCall, name: str):
    """The operand's byte offsets from its root buffer as an (MN, K) array, or why not."""
    operand, itemsize = call[name], call[name].dtype.itemsize
    offsets = storage_offsets(operand)
    if isinstance(offsets, str):
        return offsets
    stored_mn_first = call.attrs["transpose_b"] if name == "B" else not call.attrs["transpose_a"]
    return (offsets if stored_mn_first else offsets.T) * itemsize


def _descriptors(call: PrimitiveCall, name: str):
    """(descriptor fields, K-major, each k-step's first element) of an operand, or why the
    layout is not one wgmma reads."""
    addresses = _addresses(call, name)
    if isinstance(addresses, str):
        return addresses
    itemsize, found = call[name].dtype.itemsize, []
    for k0 in range(0, addresses.shape[1], WGMMA_K):
        step = describe_operand(addresses[:, k0:k0 + WGMMA_K].tolist(), itemsize)
        if step is None:
            return (f"{name}'s layout is no wgmma core-matrix layout at k = {k0} (neither "
                    "8-row x 16-byte core matrices stored contiguously nor a 32/64/128-byte "
                    "swizzle atom, K-major or MN-major)")
        found.append(step)
    fields = {(d.lbo, d.sbo, d.swizzle, k_major) for d, k_major in found}
    if len(fields) > 1:
        return f"{name}'s k-steps need different descriptor fields: {sorted(fields)}"
    (lbo, sbo, swizzle, k_major), = fields
    starts = tuple(d.start // itemsize for d, _ in found)
    return {"lbo": lbo, "sbo": sbo, "swizzle": swizzle}, k_major, starts


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
    c, n = call["C"], _mnk(call)[1]
    axis = TEAM_WARP_AXIS[call.team]
    expected = wgmma_acc_layout(n, warp_axis=axis)
    # the operands' reasons first: a layout wgmma cannot read is what the kernel must change
    # (layout inference then leaves C without the wgmma layout too)
    operands = {name: _descriptors(call, name) for name in "AB"}
    reasons = [why for why in operands.values() if isinstance(why, str)]
    if c.role is not MemScope.FRAGMENT or not isinstance(c.layout, TileLayout) \
            or not c.layout.equivalent(expected):
        reasons.append(f"C is laid out by {c.layout}; wgmma needs the accumulator layout "
                       f"{expected} (layout.hw_nvidia.wgmma_acc_layout({n}))")
    if reasons:
        return Decline(*reasons)
    dist = choose(call, [c])
    if isinstance(dist, Decline):
        return dist
    note = "; ".join(f"{name} {'K' if k_major else 'MN'}-major, "
                     + (f"{fields['swizzle']}B swizzle" if fields["swizzle"] else "no swizzle")
                     + f", LBO {fields['lbo']}, SBO {fields['sbo']}"
                     for name, (fields, k_major, _) in operands.items())
    return Plan([(WGMMA_M, n, WGMMA_K)], {"distribution": dist, "warp_axis": axis,
                                          "operands": operands, "note": note})


def _root(operand: Operand):
    value = operand.value
    return root_buffer(value.owner.operands[0] if operand.is_region else value)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c = call["C"]
    _, n, _ = _mnk(call)
    axis, operands = plan.details["warp_axis"], plan.details["operands"]
    layout = wgmma_acc_layout(n, warp_axis=axis)
    with em.hoisted():
        thread = {"laneid": em.thread_coord("lane_id"),
                  axis: em.thread_coord(_WARP_COORD[call.team])}
        thread_part = logical_index(em, layout, (WGMMA_M, n), thread)
    indices = [[em.add(t, r) for t, r in
                zip(thread_part, logical_index(em, layout, (WGMMA_M, n), {"m": i}))]
               for i in range(n // 2)]
    zero = em.const(0.0, f32)
    acc = [em.load(c, idx) if call.attrs["accum"] else zero for idx in indices]
    acc = list(em.b.create("wgmma_fence", acc).results)
    (a_fields, a_k_major, a_starts), (b_fields, b_k_major, b_starts) = operands["A"], operands["B"]
    attrs = {"n": n, "a_type": call["A"].dtype, "trans_a": not a_k_major,
             "trans_b": not b_k_major}
    for a_start, b_start in zip(a_starts, b_starts):
        descs = [em.b.create("wgmma_desc", (_root(call[name]), em.index(start)), fields).result
                 for name, start, fields in (("A", a_start, a_fields), ("B", b_start, b_fields))]
        acc = list(em.b.create("wgmma_mma_async", (*descs, *acc), attrs).results)
    acc = list(em.b.create("wgmma_commit_group", acc).results)
    acc = list(em.b.create("wgmma_wait_group", acc, {"pending": 0}).results)
    for idx, value in zip(indices, acc):
        em.store(c, value, idx)


WGMMA_GEMM = register(Rule("wgmma", "gemm_async", check, lower, distributions=(PER_THREAD,),
                           doc="Hopper tensor cores: wgmma.mma_async m64nNk16 per warpgroup, "
                               "f16/bf16 into f32, operands by shared-memory descriptors"))
