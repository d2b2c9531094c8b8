"""``cp.async`` on cuda: ``copy_async`` from a global tensor into shared memory as
per-thread ``cp_async`` chunks of 4, 8 or 16 bytes, zero-filled past the tensor's end
(the lowering, shared with the CPU's per-thread mode: ``passes/rules/copy_cp_async``;
printed as PTX ``cp.async`` by ``emit_async``). Not the default: a kernel using it commits
and waits (``tj.cp_async_commit()``, ``tj.cp_async_wait(n)``) or passes ``barrier=``.
"""
from __future__ import annotations

from tilejit.passes.dispatch.registry import PER_THREAD, Rule, register
from tilejit.passes.rules.copy_cp_async import check_cp_async, lower_cp_async

__all__ = ["CP_ASYNC"]

CP_ASYNC = register(Rule("cp.async", "copy_async", check_cp_async, lower_cp_async,
                         targets=("cuda",), distributions=(PER_THREAD,),
                         doc="per thread: cp.async chunks of 16, 8 or 4 bytes"))
