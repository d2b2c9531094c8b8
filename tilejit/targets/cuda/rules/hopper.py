"""The Blackwell asynchronous gemm family on cuda, not yet lowered from the DSL (issue 14;
TMA is ``tma``'s, wgmma the generic per-thread family ``passes/rules/gemm_wgmma``): the
target prints the tcgen05 ops and tensor memory for sm_100a (``ir/ops_tcgen05``,
``emit_tcgen05``), but no rule lowers ``gemm_async`` into them or allocates tensor memory
for ``tj.alloc_tmem`` yet, so ``dispatch="tcgen05"`` is a DispatchError that says so,
after the contract's own reasons
(``passes/rules/async_contracts``), so a kernel learns both what it must change to keep
the contract and that the family is still missing. Without ``dispatch=`` these never
win: ``immediate`` is tried first and takes every call they would.
"""
from __future__ import annotations

from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.dispatch.registry import PER_THREAD, Decline, Rule, register
from tilejit.passes.rules.async_contracts import tcgen05_reasons

__all__ = ["HOPPER_RULES"]

_MISSING = {"tcgen05": "tcgen05.mma"}


def _declined(family: str, reasons):
    def check(call: PrimitiveCall) -> Decline:
        return Decline(*reasons(call), f"the cuda target prints {_MISSING[family]} "
                       "(ir/ops_tcgen05) but no rule lowers gemm_async into it yet (issue "
                       "14); dispatch='immediate' runs it synchronously")
    return check


def _never(call, plan, em) -> None:
    raise AssertionError("a declining rule is never lowered")


def _rule(family: str, primitive: str, reasons) -> Rule:
    return register(Rule(family, primitive, _declined(family, reasons), _never,
                         targets=("cuda",), distributions=(PER_THREAD,),
                         doc=f"declined: {_MISSING[family]} is issue 14's"))


HOPPER_RULES = (_rule("tcgen05", "gemm_async", tcgen05_reasons),)
