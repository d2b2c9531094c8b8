"""What makes each asynchronous family what it is, for every target that registers it.

``copy_async`` and ``gemm_async`` have no generic rule (their completion protocol is the
target's), but the *contract* of a CUDA family -- direction, storage roles, no dtype
conversion, unit inner stride, barrier use, wgmma's dtypes -- is one fact, read by the
CPU (which runs each family as a synchronous copy or gemm, ``targets/cpu/rules/
async_copy.py``) and by CUDA (``targets/cuda/rules/``). Each ``*_reasons(call)`` returns
the violated constraints in words (empty: the call keeps the contract); the hardware's
encoding limits (TMA boxes of at most 256 per dim, wgmma's M % 64, cp.async alignment) are
the CUDA lowering's business, not the contract's.

The synchronous stand-ins both targets share live here too: :func:`element_copy` /
:func:`lower_immediate` (an async copy run at once as the element copy, then its bytes
completed on the barrier) and :func:`gemm_plan` / :func:`lower_gemm` (an async gemm
handed to the target's own ``gemm`` rules through the registry).
"""
from __future__ import annotations

import dataclasses
import math

from ...ir.types import MemScope, bf16, f8e4m3, f8e5m2, f16, f32, i8, i32, u8
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, rules_for
from ..loopgen import Emitter
from . import elementwise

__all__ = ["WGMMA_TYPES", "arrive_once_reasons", "as_copy", "cp_async_reasons", "element_copy", "family_check",
           "gemm_plan", "lower_gemm", "lower_immediate", "one_thread_reasons", "tcgen05_reasons",
           "tile_bytes", "tma_reasons", "wgmma_reasons"]

GLOBAL, SHARED, FRAGMENT, TMEM = MemScope.GLOBAL, MemScope.SHARED, MemScope.FRAGMENT, MemScope.TMEM


def tile_bytes(call: PrimitiveCall) -> int:
    """The bytes an async copy reports on its barrier: the whole destination tile (TMA
    counts its full box, zero-filled elements included)."""
    dst = call["dst"]
    return math.prod(dst.shape) * dst.dtype.itemsize


def family_check(family_reasons, base_plan):
    """A family's legality: its own reasons plus those of the lowering it runs as."""
    def check(call: PrimitiveCall) -> Plan | Decline:
        reasons = family_reasons(call) if family_reasons else []
        plan = base_plan(call)
        if isinstance(plan, Decline):
            reasons += [r for r in plan.reasons if r not in reasons]
        return Decline(*reasons) if reasons else plan
    return check


# ------------------------------------------------------------------------- copy_async
def as_copy(call: PrimitiveCall) -> PrimitiveCall:
    """The call as the synchronous ``copy`` it stands for (the barrier dropped)."""
    return dataclasses.replace(call, primitive="copy", extras=())


def element_copy(call: PrimitiveCall) -> Plan | Decline:
    """The element loop's plan for the copy: its vector widths, else one element at a time."""
    copy = as_copy(call)
    vector = elementwise.check_vector(copy)
    scalar = elementwise.check_scalar(copy)
    if isinstance(scalar, Decline):
        return scalar
    if isinstance(vector, Plan):
        return Plan(vector.shapes + scalar.shapes, {**scalar.details, **vector.details})
    return scalar


def lower_immediate(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    """The copy at once, then its bytes completed on the barrier; a multicast load does
    both in each CTA of its mask (through ``cluster_map``, as ``tj.remote``)."""
    mask = call.config.get("multicast", 0)
    for landing in ([call] if not mask else
                    [_in_cta(call, em, rank) for rank in range(mask.bit_length())
                     if mask >> rank & 1]):
        elementwise.lower(as_copy(landing), plan, em)
        if landing.extras:
            bar, index = landing.extras
            em.b.mbarrier_complete_tx(bar, index, em.const(tile_bytes(call), i32))


def _in_cta(call: PrimitiveCall, em: Emitter, rank: int) -> PrimitiveCall:
    """The load into the same tile and barrier of the cluster's CTA of ``rank``."""
    dst, where = call["dst"], em.const(rank, i32)
    region = dst.value.owner if dst.is_region else None
    root = region.operands[0] if region is not None else dst.value
    mapped = em.b.create("cluster_map", (root, where)).result
    if region is not None:
        mapped = em.b.create("region", (mapped, *region.operands[1:]), region.attrs).result
    bar, index = call.extras
    operands = tuple(Operand.of("dst", mapped) if o is dst else o for o in call.operands)
    return dataclasses.replace(call, operands=operands,
                               extras=(em.b.create("cluster_map", (bar, where)).result, index))


def _role_reasons(call: PrimitiveCall, family: str, allowed) -> list[str]:
    """Reasons the (dst role, src role) pair is not one of ``allowed`` for ``family``."""
    dst, src = call["dst"], call["src"]
    if (dst.role, src.role) in allowed:
        return []
    legal = " or ".join(f"{s} -> {d}" for d, s in allowed)
    return [f"{family} copies {legal}, not {src.role} -> {dst.role}"]


def _same_dtype(call: PrimitiveCall, family: str) -> list[str]:
    dst, src = call["dst"], call["src"]
    if dst.dtype == src.dtype:
        return []
    return [f"{family} copies bytes: src is {src.dtype} but dst is {dst.dtype} "
            "(use tj.copy to convert)"]


def _unit_inner_stride(call: PrimitiveCall, family: str) -> list[str]:
    reasons = []
    for o in call.tiles:
        if o.role is not GLOBAL:
            continue
        strides = o.buffer_type.strides
        kept = o.value.type.keep[-1] if o.is_region else True
        if strides is None or strides[-1] != 1 or not kept:
            reasons.append(f"{family} needs {o.name}'s innermost dim contiguous (a static unit "
                           "stride) in global memory")
    return reasons


def tma_reasons(call: PrimitiveCall) -> list[str]:
    dst = call["dst"]
    reasons = _role_reasons(call, "tma", ((SHARED, GLOBAL), (GLOBAL, SHARED)))
    reasons += _same_dtype(call, "tma")
    if not reasons:
        reasons += _unit_inner_stride(call, "tma")
        if dst.role is SHARED and not call.extras:
            reasons.append("a tma load completes on an mbarrier: pass barrier=bars[i]")
        if dst.role is GLOBAL and call.extras:
            reasons.append("a tma store completes through a bulk group, not an mbarrier: "
                           "drop barrier=")
        if len(dst.shape) > 5:
            reasons.append(f"tma moves tiles of rank 1 to 5, got rank {len(dst.shape)}")
        if dst.role is GLOBAL and call.config.get("multicast"):
            reasons.append("a tma store writes one tensor: multicast= is a load's")
    return reasons


def cp_async_reasons(call: PrimitiveCall) -> list[str]:
    reasons = _role_reasons(call, "cp.async", ((SHARED, GLOBAL),))
    reasons += _same_dtype(call, "cp.async")
    if call["dst"].dtype.itemsize > 16:
        reasons.append("cp.async moves 4, 8 or 16 bytes per instruction")
    return reasons


def one_thread_reasons(call: PrimitiveCall) -> list[str]:
    """A per-thread copy reporting bytes on a barrier: one thread must do the whole tile,
    since the barrier expects the tile's bytes once (a team of several threads would
    each report them)."""
    if not call.extras or call.context.distribution != PER_THREAD or call.scope.team_size == 1:
        return []
    return [f"with barrier=, a per-thread copy_async runs on one thread of its team (here "
            f"{call.scope.team_size}): issue it under tj.elect_sync() or a one-thread filter"]


# ------------------------------------------------------------------------- gemm_async
def _as_gemm(call: PrimitiveCall) -> PrimitiveCall:
    return dataclasses.replace(call, primitive="gemm", dispatch=None, extras=())


def gemm_plan(call: PrimitiveCall) -> Plan | Decline:
    """The plan of the target's gemm rule that implements ``call`` (the rule in
    ``details``): the first legal one in the registry's order, or one whose shapes include
    ``config["shape"]`` when that is given."""
    gemm = _as_gemm(call)
    wanted = call.config.get("shape")
    legal, rejected = [], []
    for rule in rules_for("gemm", call.target):
        if call.context.distribution not in rule.distributions:
            continue
        verdict = rule.check(gemm)
        if isinstance(verdict, Plan):
            legal.append((rule, verdict))
        else:
            rejected.append(f"gemm rule {rule.family}: {verdict}")
    if not legal:
        return Decline(*(rejected or ["no gemm rule is registered on this target"]))
    rule, plan = next(((r, p) for r, p in legal
                       if wanted is not None and tuple(wanted) in p.shapes), legal[0])
    return Plan(plan.shapes, {**plan.details, "gemm_rule": rule, "gemm_plan": plan})


def arrive_once_reasons(call: PrimitiveCall) -> list[str]:
    """A synchronous gemm_async completing on a barrier arrives on it after the gemm; per
    thread every thread of the team would, and the barrier expects one arrive."""
    if not call.extras or call.context.distribution != PER_THREAD or call.scope.team_size == 1:
        return []
    return [f"with barrier=, a per-thread synchronous gemm_async would arrive on it once per "
            f"thread of its team ({call.scope.team_size}): drop barrier=, or issue the "
            "multiply from one thread with dispatch='tcgen05'"]


def lower_gemm(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    """The gemm at once, then (with ``barrier=``) one arrive on the barrier: the gemm
    completed, as tcgen05.commit's arrive says."""
    rule: Rule = plan.details["gemm_rule"]
    rule.lower(_as_gemm(call), plan.details["gemm_plan"].choose(plan.shape), em)
    if call.extras:
        em.b.mbarrier_arrive(*call.extras)


WGMMA_TYPES = {  # A/B dtype -> C dtypes
    f16: (f32, f16), bf16: (f32,), f32: (f32,), f8e4m3: (f32, f16), f8e5m2: (f32, f16),
    i8: (i32,), u8: (i32,)}


def wgmma_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if b.role is not SHARED:
        reasons.append(f"wgmma reads B from shared memory, got {b.role}")
    if a.role not in (SHARED, FRAGMENT):
        reasons.append(f"wgmma reads A from shared memory or registers (a fragment), got {a.role}")
    if c.role is not FRAGMENT:
        reasons.append(f"wgmma accumulates C in registers (a fragment), got {c.role}")
    if call.extras:
        reasons.append("wgmma completes through wgmma.wait_group, not an mbarrier: drop "
                       "barrier=")
    fp8 = (f8e4m3, f8e5m2)
    if a.dtype != b.dtype and not (a.dtype in fp8 and b.dtype in fp8):
        reasons.append(f"wgmma multiplies A and B of one dtype, got {a.dtype} and {b.dtype}")
    elif a.dtype not in WGMMA_TYPES:
        reasons.append(f"wgmma has no {a.dtype} inputs (f16, bf16, f32 as tf32, fp8, int8, "
                       "uint8)")
    elif c.dtype not in WGMMA_TYPES[a.dtype]:
        legal = " or ".join(str(t) for t in WGMMA_TYPES[a.dtype])
        reasons.append(f"wgmma with {a.dtype} inputs accumulates in {legal}, got C {c.dtype}")
    return reasons


def tcgen05_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if c.role is not TMEM:
        reasons.append(f"tcgen05.mma accumulates C in tensor memory (tj.alloc_tmem), got {c.role}")
    if a.role not in (SHARED, TMEM):
        reasons.append(f"tcgen05.mma reads A from shared or tensor memory, got {a.role}")
    if b.role is not SHARED:
        reasons.append(f"tcgen05.mma reads B from shared memory, got {b.role}")
    if not call.extras:
        reasons.append("tcgen05.mma completes on an mbarrier (tcgen05.commit): pass "
                       "barrier=bars[i]")
    return reasons
