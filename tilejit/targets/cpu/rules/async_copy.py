"""The asynchronous primitives on the CPU: ``copy_async`` and ``gemm_async``.

The CPU has no copy engine and no asynchronous tensor cores, so an asynchronous primitive
*completes before the next statement*: this is a legal schedule of the CUDA semantics
(an async copy may finish at any time before its barrier's phase completes; an async gemm
at any time before the kernel waits for it), so a Hopper kernel runs here unchanged and
computes the same values.

``copy_async(dst, src, barrier=None)``
    The copy is the generic element loop (``passes/rules/elementwise``: vector or scalar
    chunks through the loop generator, masked where ``src``/``dst`` run past the end of a
    global tensor -- loads beyond read 0, stores beyond are skipped), run once per team
    instance in the ``single`` region ``lower-tiles`` wraps around it. When a barrier is
    given, the copy then reports its bytes with
    ``intrinsic {target = "cpu", name = "mbarrier_complete_tx"}(bar, index, bytes)``, where
    ``bytes`` is the whole destination tile (``prod(dst.shape) * dst.dtype.itemsize``): like
    TMA, which counts the full box, zero-filled elements included. A producer therefore
    announces ``mbarrier_arrive_expect_tx(bar, tile bytes)`` whether or not the tile is
    masked.

``gemm_async(C, A, B, ...)``
    Exactly ``gemm``: the call is handed to the CPU's ``gemm`` rules through the registry
    (the first legal one, in the registry's order; one whose shapes include
    ``config["shape"]`` when that is given), and runs synchronously.

CUDA family names (SPEC §5, ``dispatch=<family>``) map as follows:

=================  ============  ========================================================
primitive          family        on the CPU
=================  ============  ========================================================
copy_async         ``immediate`` the default: any storage the element loops reach, dtype
                                 conversion allowed, barrier optional
copy_async         ``tma``       same lowering; legal where TMA is: global -> shared with
                                 a barrier (a load) or shared -> global without one (a
                                 store), no dtype conversion, a static unit innermost
                                 stride on the global side
copy_async         ``cp.async``  same lowering; legal where cp.async is: global -> shared,
                                 no dtype conversion, elements of at most 16 bytes
gemm_async         ``immediate`` the default: whatever ``gemm`` accepts here
gemm_async         ``wgmma``     the CPU gemm; legal where wgmma is: B in shared memory, A
                                 in shared memory or a fragment, C a fragment, dtypes
                                 f16/bf16 (C f32 or f16), f32 as tf32 (C f32), fp8 (C f32
                                 or f16), int8/uint8 (C int32)
gemm_async         ``tcgen05``   the CPU gemm; legal where tcgen05.mma is: C in tensor
                                 memory (``tj.alloc_tmem``), A in shared or tensor memory,
                                 B in shared memory -- the CPU target stores no tensor
                                 memory yet, so this declines (a DispatchError that says
                                 why) until it does
=================  ============  ========================================================

The CUDA families are checked against the *contract that makes them what they are*
(direction, storage roles, no conversion, dtypes), not against the hardware's encoding
limits (TMA boxes of at most 256 per dim and 16-byte inner boxes, wgmma's M % 64,
K-major operands for tf32/fp8) -- those are the CUDA rules' business: a kernel legal on
Hopper is legal here. Other CUDA-only names (``ldmatrix``, ``stmatrix`` for ``copy``,
``mma.sync`` ...) are not registered on the CPU: ``dispatch=`` with them is a
DispatchError listing the CPU's families for that primitive. f32 operands of a ``wgmma``
are multiplied in full f32 here (tf32 on Hopper); fp8 and 16-bit floats are exact in f32.
"""
from __future__ import annotations

import dataclasses
import math

from tilejit.ir.types import MemScope, bf16, f8e4m3, f8e5m2, f16, f32, i8, i32, u8
from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.dispatch.registry import Decline, Plan, Rule, register, rules_for
from tilejit.passes.loopgen import Emitter
from tilejit.passes.rules import elementwise

__all__ = ["COPY_ASYNC_RULES", "GEMM_ASYNC_RULES", "tile_bytes"]

CPU = ("cpu",)
GLOBAL, SHARED, FRAGMENT, TMEM = MemScope.GLOBAL, MemScope.SHARED, MemScope.FRAGMENT, MemScope.TMEM


def tile_bytes(call: PrimitiveCall) -> int:
    """The bytes an async copy reports on its barrier: the whole destination tile."""
    dst = call["dst"]
    return math.prod(dst.shape) * dst.dtype.itemsize


# ------------------------------------------------------------------------- copy_async
def _as_copy(call: PrimitiveCall) -> PrimitiveCall:
    return dataclasses.replace(call, primitive="copy", extras=())


def _element_copy(call: PrimitiveCall) -> Plan | Decline:
    """The element loop's plan for the copy: its vector widths, else one element at a time."""
    copy = _as_copy(call)
    vector = elementwise.check_vector(copy)
    scalar = elementwise.check_scalar(copy)
    if isinstance(scalar, Decline):
        return scalar
    if isinstance(vector, Plan):
        return Plan(vector.shapes + scalar.shapes, {**scalar.details, **vector.details})
    return scalar


def _role_reasons(call: PrimitiveCall, family: str, allowed) -> list[str]:
    """Reasons the (dst role, src role) pair is not one of ``allowed`` for ``family``."""
    dst, src = call["dst"], call["src"]
    pair = (dst.role, src.role)
    if pair in allowed:
        return []
    legal = " or ".join(f"{s} -> {d}" for d, s in allowed)
    return [f"{family} copies {legal}, not {src.role} -> {dst.role}"]


def _same_dtype(call: PrimitiveCall, family: str) -> list[str]:
    dst, src = call["dst"], call["src"]
    if dst.dtype == src.dtype:
        return []
    why = (f"{family} copies bytes: src is {src.dtype} but dst is {dst.dtype} "
           "(use tj.copy to convert)")
    return [why]


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


def _tma_reasons(call: PrimitiveCall) -> list[str]:
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
    return reasons


def _cp_async_reasons(call: PrimitiveCall) -> list[str]:
    reasons = _role_reasons(call, "cp.async", ((SHARED, GLOBAL),))
    reasons += _same_dtype(call, "cp.async")
    if call["dst"].dtype.itemsize > 16:
        reasons.append("cp.async moves 4, 8 or 16 bytes per instruction")
    return reasons


def _family_check(family_reasons, base_plan):
    """A family's legality: its own reasons plus those of the synchronous lowering it reuses."""
    def check(call: PrimitiveCall) -> Plan | Decline:
        reasons = family_reasons(call) if family_reasons else []
        plan = base_plan(call)
        if isinstance(plan, Decline):
            reasons += [r for r in plan.reasons if r not in reasons]
        return Decline(*reasons) if reasons else plan
    return check


def _copy_async_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    elementwise.lower(_as_copy(call), plan, em)
    if call.extras:
        bar, index = call.extras
        em.b.intrinsic("cpu", "mbarrier_complete_tx", [bar, index, em.const(tile_bytes(call), i32)])


def _copy_async_rule(family: str, reasons, priority: int, doc: str) -> Rule:
    return register(Rule(family, "copy_async", _family_check(reasons, _element_copy), _copy_async_lower,
                         targets=CPU, priority=priority, doc=doc))


COPY_ASYNC_RULES = (
    _copy_async_rule("immediate", None, 10, "element loop, completes at once, reports the "
                     "tile's bytes on the barrier"),
    _copy_async_rule("tma", _tma_reasons, 0, "TMA's contract; runs as the immediate copy"),
    _copy_async_rule("cp.async", _cp_async_reasons, 0,
                     "cp.async's contract; runs as the immediate copy"),
)


# ------------------------------------------------------------------------- gemm_async
def _as_gemm(call: PrimitiveCall) -> PrimitiveCall:
    return dataclasses.replace(call, primitive="gemm", dispatch=None)


def _gemm_plan(call: PrimitiveCall) -> Plan | Decline:
    """The plan of the CPU gemm rule that implements ``call`` (the rule in ``details``)."""
    gemm = _as_gemm(call)
    wanted = call.config.get("shape")
    legal, rejected = [], []
    for rule in rules_for("gemm", call.target):
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


_WGMMA_TYPES = {  # A/B dtype -> C dtypes
    f16: (f32, f16), bf16: (f32,), f32: (f32,), f8e4m3: (f32, f16), f8e5m2: (f32, f16),
    i8: (i32,), u8: (i32,)}


def _wgmma_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if b.role is not SHARED:
        reasons.append(f"wgmma reads B from shared memory, got {b.role}")
    if a.role not in (SHARED, FRAGMENT):
        reasons.append(f"wgmma reads A from shared memory or registers (a fragment), got {a.role}")
    if c.role is not FRAGMENT:
        reasons.append(f"wgmma accumulates C in registers (a fragment), got {c.role}")
    fp8 = (f8e4m3, f8e5m2)
    if a.dtype != b.dtype and not (a.dtype in fp8 and b.dtype in fp8):
        reasons.append(f"wgmma multiplies A and B of one dtype, got {a.dtype} and {b.dtype}")
    elif a.dtype not in _WGMMA_TYPES:
        reasons.append(f"wgmma has no {a.dtype} inputs (f16, bf16, f32 as tf32, fp8, int8, "
                       "uint8)")
    elif c.dtype not in _WGMMA_TYPES[a.dtype]:
        legal = " or ".join(str(t) for t in _WGMMA_TYPES[a.dtype])
        reasons.append(f"wgmma with {a.dtype} inputs accumulates in {legal}, got C {c.dtype}")
    return reasons


def _tcgen05_reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = []
    if c.role is not TMEM:
        reasons.append(f"tcgen05.mma accumulates C in tensor memory (tj.alloc_tmem), got {c.role}")
    if a.role not in (SHARED, TMEM):
        reasons.append(f"tcgen05.mma reads A from shared or tensor memory, got {a.role}")
    if b.role is not SHARED:
        reasons.append(f"tcgen05.mma reads B from shared memory, got {b.role}")
    return reasons


def _gemm_async_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    rule: Rule = plan.details["gemm_rule"]
    rule.lower(_as_gemm(call), plan.details["gemm_plan"].choose(plan.shape), em)


def _gemm_async_rule(family: str, reasons, priority: int, doc: str) -> Rule:
    return register(Rule(family, "gemm_async", _family_check(reasons, _gemm_plan), _gemm_async_lower,
                         targets=CPU, priority=priority, doc=doc))


GEMM_ASYNC_RULES = (
    _gemm_async_rule("immediate", None, 10, "the CPU gemm, run synchronously"),
    _gemm_async_rule("wgmma", _wgmma_reasons, 0, "wgmma's contract; runs as the CPU gemm"),
    _gemm_async_rule("tcgen05", _tcgen05_reasons, 0,
                     "tcgen05.mma's contract; runs as the CPU gemm"),
)
