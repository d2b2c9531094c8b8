"""``C (+)= op(A) @ op(B)`` on any target: family ``fma`` (the fallback).

Register blocking: the instruction is a ``bm x bn`` block of C held in ``bm * bn``
accumulators (loop-carried values of the ``k`` loop); each ``k`` step loads ``bm``
elements of A and ``bn`` of B and does ``bm * bn`` multiply-adds in C's dtype. Legal
shapes are ``(bm, bn, 1)`` with ``bm | M``, ``bn | N``, ``bm, bn <= 8`` and at most
``DispatchContext.registers`` accumulators, the largest block first. ``transpose_a`` /
``transpose_b`` read A as ``[K, M]`` / B as ``[N, K]``; ``accum=False`` starts from zero.

Per-thread: C blocks are dealt out cyclically, or, when C is a fragment distributed over
threads, each thread computes the C elements it holds (blocks of one element); A and B
must then be readable by every thread (shared or global memory).
"""
from __future__ import annotations

from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter
from .common import element_access_reasons, verdict

__all__ = ["FMA_GEMM"]

_MAX_BLOCK = 8


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call, allow_oob=False)
    if reasons:
        return Decline(*reasons)
    dist = choose(call, [call["C"]])
    if isinstance(dist, Decline):
        return dist
    m, n, _ = _mnk(call)
    if isinstance(dist, Owned):
        spread = [o.name for o in (call["A"], call["B"]) if o.thread_axes]
        if spread:
            reasons.append(f"{' and '.join(spread)} distributed over threads: a thread needs "
                           "whole rows of A and columns of B; stage them through shared memory")
        return verdict(reasons, [(1, 1, 1)], distribution=dist)
    blocks = [(bm, bn, 1) for bm in range(_MAX_BLOCK, 0, -1) for bn in range(_MAX_BLOCK, 0, -1)
              if m % bm == 0 and n % bn == 0 and bm * bn <= call.context.registers]
    blocks.sort(key=lambda s: (s[0] * s[1], s[1]), reverse=True)
    return verdict(reasons, blocks, distribution=dist)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c, a, b = call["C"], call["A"], call["B"]
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    m, n, k = _mnk(call)
    bm, bn, _ = plan.shape
    dtype = c.dtype

    def element(operand, row, col, transposed):
        value = em.load(operand, [col, row] if transposed else [row, col])
        return value if value.type == dtype else em.b.cast(value, dtype)

    def block(base):
        rows = [i for (i,) in em.cells(base[:1], (bm,))]
        cols = [j for (j,) in em.cells(base[1:], (bn,))]
        cells = [(i, j) for i in rows for j in cols]
        zero = em.const(0.0 if dtype.is_float else 0, dtype)
        init = [em.load(c, [i, j]) if call.attrs["accum"] else zero for i, j in cells]

        def step(kk, *accs):
            a_col = {i: element(a, i, kk, ta) for i in rows}
            b_row = {j: element(b, kk, j, tb) for j in cols}
            return [em.b.binary("add", acc, em.b.binary("mul", a_col[i], b_row[j]))
                    for acc, (i, j) in zip(accs, cells)]
        for (i, j), value in zip(cells, em.loop(0, k, 1, step, inits=init)):
            em.store(c, value, [i, j])

    em.each([(Box((0, 0), (m, n), (bm, bn)), block)])


FMA_GEMM = register(Rule("fma", "gemm", check, lower, fallback=True,
                         doc="register-blocked multiply-add loops"))
