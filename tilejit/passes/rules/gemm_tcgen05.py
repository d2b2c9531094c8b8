"""``C (+)= op(A) @ op(B)`` on Blackwell's tensor cores, per thread: ``gemm_async`` family
``tcgen05`` (``tcgen05.mma.cta_group::1.kind::f16``: one M x N x 16 multiply-add per
instruction into f32 tensor memory), chosen with ``dispatch="tcgen05"``.

Legal (else a Decline naming each condition that fails) where the call keeps tcgen05's
contract (``async_contracts.tcgen05_reasons``: C in tensor memory, B -- and here A -- in
shared memory) and compiles for sm_100a where it names an arch; C is a whole
``tj.alloc_tmem`` buffer of f32, A and B f16 or bf16 tiles of one type; M is 64 or 128 and N
a multiple of 8 (M = 64) or 16 (M = 128) up to 256, K a multiple of 16; one thread issues
it (under ``if tj.thread_id() == 0`` or ``tj.elect_sync()``) with ``barrier=``, the
mbarrier it completes on; and A's and B's k-steps sit in shared memory in a canonical
layout (``gemm_wgmma.operand_descriptors``: the same decoding as wgmma's, read by
tcgen05's version-1 descriptors).

Lowering: the buffer's TMEM address (``tmem_address``), ``tcgen05_fence
after_thread_sync``, one ``tcgen05_mma`` per k-step
from two ``tcgen05_desc`` (the first overwriting D unless ``accum``), then
``tcgen05_commit`` on the barrier: the multiplies are done when its phase completes, which
the kernel waits for (``tj.mbarrier_wait``) before it reads C or rewrites A or B.
"""
from __future__ import annotations

import functools
import re

from ...ir.ops_tcgen05 import TCGEN05_K, TCGEN05_TYPES, InstructionDescriptor
from ...ir.types import MemScope, f32
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..loopgen import Emitter
from .async_contracts import tcgen05_reasons
from .gemm_wgmma import operand_descriptors, root_of

__all__ = ["ARCH", "TCGEN05_GEMM"]

ARCH = "sm_100a"


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _reasons(call: PrimitiveCall) -> list[str]:
    c, a, b = call["C"], call["A"], call["B"]
    reasons = [r for r in tcgen05_reasons(call) if "reads A" not in r]
    if a.role is not MemScope.SHARED:
        reasons.append(f"A is {a.role}: this family reads A from shared memory")
    if c.role is MemScope.TMEM and c.is_region:
        reasons.append("C is a region of tensor memory: pass the tj.alloc_tmem buffer itself")
    if a.dtype not in TCGEN05_TYPES or b.dtype != a.dtype or c.dtype != f32:
        reasons.append(f"A, B and C are {a.dtype}, {b.dtype} and {c.dtype}: kind::f16 "
                       "multiplies f16 or bf16 (one type) into f32")
    m, n, k = _mnk(call)
    shape = InstructionDescriptor(m, n, TCGEN05_TYPES[0], TCGEN05_TYPES[0]).problem()
    if shape or k % TCGEN05_K:
        reasons.append(f"M, N, K = {m}, {n}, {k}: " + (shape or f"K is a multiple of "
                                                        f"{TCGEN05_K} (one instruction a step)"))
    if call.scope.team_size != 1:
        reasons.append(f"{call.scope.team_size} threads issue it: tcgen05.mma is one "
                       "thread's (issue it under `if tj.thread_id() == 0` or tj.elect_sync())")
    return reasons


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = _reasons(call)   # what the kernel must change first, then the arch
    arch = call.context.arch
    if arch is not None and re.match(r"sm_\d+", arch) and arch != ARCH:
        reasons.append(f"tcgen05 needs {ARCH}; compiling for {arch}")
    if reasons:
        return Decline(*reasons)
    m, n, _ = _mnk(call)
    operands = {name: operand_descriptors(call, name, m) for name in "AB"}
    reasons = [why.replace("wgmma", "tcgen05") for why in operands.values()
               if isinstance(why, str)]
    if reasons:
        return Decline(*reasons)
    note = "; ".join(f"{name} {'K' if k_major else 'MN'}-major, "
                     + (f"{fields['swizzle']}B swizzle" if fields["swizzle"] else "no swizzle")
                     + f", LBO {fields['lbo']}, SBO {fields['sbo']}"
                     for name, (fields, k_major, _, _) in operands.items())
    return Plan([(m, n, TCGEN05_K)], {"operands": operands, "note": note})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    m, n, _ = _mnk(call)
    operands = plan.details["operands"]
    (a_fields, a_k_major, (a_starts,), a_terms), (b_fields, b_k_major, (b_starts,), b_terms) = \
        operands["A"], operands["B"]
    with em.hoisted():
        taddr = em.b.create("tmem_address", (root_of(call["C"]),)).result
        stage = {name: functools.reduce(em.add, (em.mul(value, stride) for value, stride
                                                 in terms), 0)
                 for name, terms in (("A", a_terms), ("B", b_terms))}
    attrs = {"m": m, "n": n, "a_type": call["A"].dtype, "trans_a": not a_k_major,
             "trans_b": not b_k_major}

    def desc(name: str, start: int, fields: dict):
        offset = em.index(em.add(stage[name], start))
        return em.b.create("tcgen05_desc", (root_of(call[name]), offset), fields).result
    # the barrier before the issue ordered the other threads' tcgen05 ops (a tcgen05.st
    # of the accumulator, the allocation) before this thread's
    em.b.create("tcgen05_fence", attrs={"kind": "after_thread_sync"})
    for step, (a_start, b_start) in enumerate(zip(a_starts, b_starts)):
        accumulate = bool(step) or call.attrs["accum"]
        em.b.create("tcgen05_mma", (taddr, desc("A", a_start, a_fields),
                                    desc("B", b_start, b_fields)),
                    {**attrs, "accumulate": accumulate})
    em.b.create("tcgen05_commit", call.extras)


TCGEN05_GEMM = register(Rule("tcgen05", "gemm_async", check, lower, distributions=(PER_THREAD,),
                             doc="Blackwell tensor cores: tcgen05.mma kind::f16 M x N x 16 into "
                                 "f32 tensor memory, issued by one thread, completing on an "
                                 "mbarrier"))
