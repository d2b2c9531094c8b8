"""The asynchronous primitives on the CPU: ``copy_async`` and ``gemm_async``.

The CPU has no copy engine and no asynchronous tensor cores, so an asynchronous primitive
*completes before the next statement*: this is a legal schedule of the CUDA semantics
(an async copy may finish at any time before its barrier's phase completes; an async gemm
at any time before the kernel waits for it), so a Hopper kernel runs here unchanged and
computes the same values. The exception is ``cp.async`` per thread (SIMT mode), which runs
the CUDA lowering: its chunks land when the thread's wait retires their group.

``copy_async(dst, src, barrier=None)``
    The copy is the generic element loop (``passes/rules/elementwise``: vector or scalar
    chunks through the loop generator, masked where ``src``/``dst`` run past the end of a
    global tensor -- loads beyond read 0, stores beyond are skipped), run once per team
    instance in the ``single`` region ``lower-tiles`` wraps around it. When a barrier is
    given, the copy then reports its bytes with ``mbarrier_complete_tx(bar, index,
    bytes)``, where ``bytes`` is the whole destination tile (``prod(dst.shape) *
    dst.dtype.itemsize``): like TMA, which counts the full box, zero-filled elements
    included. A producer therefore
    announces ``mbarrier_arrive_expect_tx(bar, tile bytes)`` whether or not the tile is
    masked. Per thread, a copy with a barrier runs on one thread of its team (the barrier
    expects the tile's bytes once).

``gemm_async(C, A, B, ..., barrier=None)``
    Exactly ``gemm``: the call is handed to the CPU's ``gemm`` rules through the registry
    (the first legal one, in the registry's order; one whose shapes include
    ``config["shape"]`` when that is given), and runs synchronously; with a barrier, one
    arrive on it follows (the multiply completed, as tcgen05.commit reports it).

CUDA family names (SPEC §5, ``dispatch=<family>``) map as follows:

=================  ============  ========================================================
primitive          family        on the CPU
=================  ============  ========================================================
copy_async         ``immediate`` the default: any storage the element loops reach, dtype
                                 conversion allowed, barrier optional
copy_async         ``tma``       legal where TMA is: global -> shared with a barrier (a
                                 load) or shared -> global without one (a store), no dtype
                                 conversion, a static unit innermost stride on the global
                                 side; per thread (SIMT mode) the CUDA lowering itself
                                 (``passes/rules/copy_tma``: boxes a store writes back at
                                 ``tj.bulk_wait``), else the immediate copy
copy_async         ``cp.async``  legal where cp.async is: global -> shared, no dtype
                                 conversion, elements of at most 16 bytes; per thread (SIMT
                                 mode) the CUDA lowering itself (``passes/rules/
                                 copy_cp_async``: ``cp_async`` chunks), else the immediate copy
gemm_async         ``immediate`` the default: whatever ``gemm`` accepts here
gemm_async         ``wgmma``     in the CPU's own lowering the CPU gemm; legal where wgmma
                                 is: B in shared memory, A in shared memory or a fragment, C
                                 a fragment, dtypes f16/bf16 (C f32 or f16), f32 as tf32 (C
                                 f32), fp8 (C f32 or f16), int8/uint8 (C int32). Per thread
                                 (SIMT mode) the generic family (``passes/rules/gemm_wgmma``)
                                 runs wgmma_mma_async from descriptors, as on Hopper
gemm_async         ``tcgen05``   in the CPU's own lowering the CPU gemm, then one arrive on
                                 the barrier; legal where tcgen05.mma is: C in tensor
                                 memory (``tj.alloc_tmem``: plain CTA memory here), A in
                                 shared or tensor memory, B in shared memory, barrier=
                                 given. Per thread (SIMT mode) the generic family
                                 (``passes/rules/gemm_tcgen05``) runs tcgen05_mma from
                                 descriptors, as on Blackwell
=================  ============  ========================================================

The CUDA families are checked against the *contract that makes them what they are*
(direction, storage roles, no conversion, dtypes: ``passes/rules/async_contracts``, which
the CUDA target reads too), not against the hardware's encoding
limits (TMA boxes of at most 256 per dim and 16-byte inner boxes, wgmma's M % 64,
K-major operands for tf32/fp8) -- those are the CUDA rules' business: a kernel legal on
Hopper is legal here. Other CUDA-only names are not registered on the CPU: ``dispatch=``
with them is a DispatchError listing the CPU's families for that primitive (the generic
per-thread families ``mma`` for gemm and ``stmatrix`` for copy are, and run in SIMT mode).
f32 operands of a ``wgmma`` are multiplied in full f32 here (tf32 on Hopper); fp8 and
16-bit floats are exact in f32.
"""
from __future__ import annotations

from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.dispatch.registry import PER_THREAD, TEAM_ONCE, Decline, Plan, Rule, register
from tilejit.passes.loopgen import Emitter
from tilejit.passes.rules import copy_cp_async, copy_tma
from tilejit.passes.rules.async_contracts import (arrive_once_reasons, cp_async_reasons,
                                                  element_copy, family_check, gemm_plan,
                                                  lower_gemm, lower_immediate,
                                                  one_thread_reasons, tcgen05_reasons,
                                                  tma_reasons, wgmma_reasons)

__all__ = ["COPY_ASYNC_RULES", "GEMM_ASYNC_RULES"]

CPU = ("cpu",)


# ------------------------------------------------------------------------- copy_async
def _tma_reasons(call: PrimitiveCall) -> list[str]:
    return tma_reasons(call) + one_thread_reasons(call)


def _per_thread(call: PrimitiveCall) -> bool:
    return call.context.distribution == PER_THREAD


def _check_tma(call: PrimitiveCall) -> Plan | Decline:
    if _per_thread(call):
        return copy_tma.check_tma(call)
    return family_check(_tma_reasons, element_copy)(call)


def _lower_tma(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    lower = copy_tma.lower_tma if _per_thread(call) else lower_immediate
    lower(call, plan, em)


def _check_cp_async(call: PrimitiveCall) -> Plan | Decline:
    if _per_thread(call):
        return copy_cp_async.check_cp_async(call)
    return family_check(cp_async_reasons, element_copy)(call)


def _lower_cp_async(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    lower = copy_cp_async.lower_cp_async if _per_thread(call) else lower_immediate
    lower(call, plan, em)


def _copy_async_rule(family: str, check, lower, priority: int, doc: str) -> Rule:
    return register(Rule(family, "copy_async", check, lower, targets=CPU, priority=priority,
                         doc=doc))


COPY_ASYNC_RULES = (
    _copy_async_rule("immediate", family_check(one_thread_reasons, element_copy),
                     lower_immediate, 10, "element loop, completes at once, reports the "
                     "tile's bytes on the barrier"),
    _copy_async_rule("tma", _check_tma, _lower_tma, 0,
                     "TMA's contract; per thread tma boxes, else the immediate copy"),
    _copy_async_rule("cp.async", _check_cp_async, _lower_cp_async, 0,
                     "cp.async's contract; per thread cp_async chunks, else the immediate copy"),
)


# ------------------------------------------------------------------------- gemm_async
def _gemm_async_rule(family: str, reasons, priority: int, doc: str,
                     distributions=(TEAM_ONCE, PER_THREAD)) -> Rule:
    return register(Rule(family, "gemm_async", family_check(reasons, gemm_plan), lower_gemm,
                         targets=CPU, priority=priority, doc=doc, distributions=distributions))


GEMM_ASYNC_RULES = (
    _gemm_async_rule("immediate", arrive_once_reasons, 10, "the CPU gemm, run synchronously"),
    # per thread, the generic wgmma family (passes/rules/gemm_wgmma.py) runs wgmma itself
    _gemm_async_rule("wgmma", wgmma_reasons, 0, "wgmma's contract; runs as the CPU gemm",
                     (TEAM_ONCE,)),
    # per thread, the generic tcgen05 family (passes/rules/gemm_tcgen05.py)
    _gemm_async_rule("tcgen05", tcgen05_reasons, 0,
                     "tcgen05.mma's contract; runs as the CPU gemm", (TEAM_ONCE,)),
)
