"""``immediate`` on cuda: an asynchronous primitive completed before the next statement,
the CPU's default schedule (``targets/cpu/rules/async_copy.py``), per thread.

``copy_async`` is the element copy (``vec``-less: the ``vector``/``scalar`` element loops
split over the team's threads), then, with ``barrier=``, the tile's bytes completed on
the barrier (``mbarrier_complete_tx``, sm_90) by the one thread that copied it.
``gemm_async`` is the first legal cuda ``gemm`` rule (``mma`` on tensor cores, else
``fma``), or the one whose shapes include ``config["shape"]``; with ``barrier=``, then one
arrive on it, so only a one-thread team may pass one (every thread would arrive).
"""
from __future__ import annotations

from tilejit.passes.dispatch.registry import PER_THREAD, Rule, register
from tilejit.passes.rules.async_contracts import (arrive_once_reasons, element_copy,
                                                  family_check, gemm_plan, lower_gemm,
                                                  lower_immediate, one_thread_reasons)

__all__ = ["IMMEDIATE_COPY", "IMMEDIATE_GEMM"]

IMMEDIATE_COPY = register(Rule(
    "immediate", "copy_async", family_check(one_thread_reasons, element_copy), lower_immediate,
    targets=("cuda",), priority=10, distributions=(PER_THREAD,),
    doc="the element copy at once, then the tile's bytes on the barrier"))
IMMEDIATE_GEMM = register(Rule(
    "immediate", "gemm_async", family_check(arrive_once_reasons, gemm_plan), lower_gemm,
    targets=("cuda",),
    priority=10, distributions=(PER_THREAD,), doc="the cuda gemm, run synchronously"))
