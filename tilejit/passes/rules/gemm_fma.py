"""``C (+)= op(A) @ op(B)`` on any target: family ``fma`` (the fallback).

Register blocking: the instruction is a ``bm x bn`` block of C held in ``bm * bn``
accumulators (loop-carried values of the ``k`` loop); each ``k`` step loads ``bm``
elements of A and ``bn`` of B and does ``bm * bn`` multiply-adds in C's dtype. Legal
shapes are ``(bm, bn, 1)`` with ``bm | M``, ``bn | N``, ``bm, bn <= 8`` and at most
``DispatchContext.registers`` accumulators, the largest block first. ``transpose_a`` /
``transpose_b`` read A as ``[K, M]`` / B as ``[N, K]``; ``accum=False`` starts from zero.

Per-thread: C blocks are dealt out cyclically, or, when C is a fragment distributed over
threads, each thread computes the C elements it holds; A and B must then be readable by
every thread (shared or global memory). Its elements are its rows times its columns (the
layout's memory iters, enumerated at compile time: ``Owned.held_offsets``), so one block
``(rows held, cols held, 1)`` covers them all: one ``k`` loop carries every accumulator,
and each step loads A once per row held and B once per column held. A thread holding more
than ``_MAX_HELD`` elements computes them one at a time (shape ``(1, 1, 1)``), each
through a ``k`` loop of its own.
"""
from __future__ import annotations

import itertools

from ...ir.types import MemScope
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter
from .common import element_access_reasons, verdict

__all__ = ["FMA_GEMM"]

_MAX_BLOCK = 8
# C elements one thread may carry through the k loop (plus a register per row and per
# column it holds); a GPU thread has up to 255 registers. Fixed rather than the target's
# register count (the CPU's counts its vector registers), so the CPU's SIMT mode blocks a
# thread's accumulators as a GPU does.
_MAX_HELD = 64


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
        # registers only: shared memory is stored over its thread axes, any thread reads it
        spread = [o.name for o in (call["A"], call["B"])
                  if o.thread_axes and o.role is not MemScope.SHARED]
        if spread:
            reasons.append(f"{' and '.join(spread)} distributed over threads: a thread needs "
                           "whole rows of A and columns of B; stage them through shared memory")
        # The thread's whole block when it fits; (1, 1, 1): one element at a time, each
        # with a k loop of its own.
        held = _held_block(dist)
        blocked = [held] if 1 < held[0] * held[1] <= _MAX_HELD else []
        return verdict(reasons, blocked + [(1, 1, 1)], distribution=dist)
    blocks = [(bm, bn, 1) for bm in range(_MAX_BLOCK, 0, -1) for bn in range(_MAX_BLOCK, 0, -1)
              if m % bm == 0 and n % bn == 0 and bm * bn <= call.context.registers]
    blocks.sort(key=lambda s: (s[0] * s[1], s[1]), reverse=True)
    return verdict(reasons, blocks, distribution=dist)


def _held_block(dist: Owned) -> tuple[int, int, int]:
    rows, cols = dist.held_offsets()
    return len(rows), len(cols), 1


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    c, a, b = call["C"], call["A"], call["B"]
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    m, n, k = _mnk(call)
    bm, bn, _ = plan.shape
    dtype = c.dtype

    def element(operand, row, col, transposed):
        value = em.load(operand, [col, row] if transposed else [row, col])
        return value if value.type == dtype else em.b.cast(value, dtype)

    def block(rows, cols):
        """C[i, j] for every i in ``rows`` and j in ``cols``, carried by one k loop."""
        cells = list(itertools.product(range(len(rows)), range(len(cols))))
        zero = em.const(0.0 if dtype.is_float else 0, dtype)
        init = [em.load(c, [rows[r], cols[s]]) if call.attrs["accum"] else zero
                for r, s in cells]

        def step(kk, *accs):
            a_col = [element(a, i, kk, ta) for i in rows]
            b_row = [element(b, kk, j, tb) for j in cols]
            return [em.b.binary("add", acc, em.b.binary("mul", a_col[r], b_row[s]))
                    for acc, (r, s) in zip(accs, cells)]
        for (r, s), value in zip(cells, em.loop(0, k, 1, step, inits=init)):
            em.store(c, value, [rows[r], cols[s]])

    if isinstance(em.dist, Owned) and plan.shape == _held_block(em.dist):
        em.dist.visit_held(em, lambda held: block(*held))
        return
    em.each([(Box((0, 0), (m, n), (bm, bn)),
              lambda base: block([i for (i,) in em.cells(base[:1], (bm,))],
                                 [j for (j,) in em.cells(base[1:], (bn,))]))])


FMA_GEMM = register(Rule("fma", "gemm", check, lower, fallback=True,
                         doc="register-blocked multiply-add loops"))
