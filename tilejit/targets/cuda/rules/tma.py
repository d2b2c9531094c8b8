"""TMA on cuda: ``copy_async`` between a global tensor and shared memory as bulk tensor
copies of boxes (``tma_load`` completing on the call's mbarrier, ``tma_store`` in a bulk
group), one thread issuing them (the lowering, shared with the CPU's per-thread mode:
``passes/rules/copy_tma``; printed as PTX ``cp.async.bulk.tensor`` by ``emit_tma``, with a
tensor map per (tensor, box, swizzle) passed as a ``__grid_constant__`` parameter and
encoded at launch: ``tensor_map``). Not the default: a kernel using it for a load announces
the box bytes (``tj.mbarrier_arrive_expect_tx``), for a store fences and waits
(``tj.fence_proxy_async()``, ``tj.bulk_wait(n)``).
"""
from __future__ import annotations

from tilejit.passes.dispatch.registry import PER_THREAD, Rule, register
from tilejit.passes.rules.copy_tma import check_tma, lower_tma

__all__ = ["TMA"]

TMA = register(Rule("tma", "copy_async", check_tma, lower_tma, targets=("cuda",),
                    distributions=(PER_THREAD,),
                    doc="per thread: bulk tensor copies of the largest legal box"))
