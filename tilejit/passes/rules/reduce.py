"""Reduction (sum/max/min over one axis) on any target: family ``tree`` (the fallback).

Within one executing unit the reduction is sequential: the accumulator starts at the
first element and folds in the rest, in the destination's dtype. How the team shares the
work follows the call's distribution:

* uniform (``team_once``, or a one-thread team): the unit reduces every output;
* owned: each thread reduces the outputs the destination's layout gives it, which needs
  it to hold whole rows of the source (checked against the layouts);
* cyclic: for each output, thread ``t`` folds elements ``t, t+T, ...`` of the axis
  (starting from the identity), then the team combines its partials as a tree --
  ``warp_shuffle xor`` within a warp and, for a CTA team, one partial per warp through
  shared memory between two ``sync``s. Thread 0 stores the result.

Instruction shape: ``(1,)`` for a sequential fold, ``(T,)`` for a tree over ``T`` threads.
"""
from __future__ import annotations

from ...ir.scope import LANES_PER_WARP
from ...ir.types import MemScope, TeamKind
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Cyclic, Owned, choose, team_thread
from ..loopgen import Box, Emitter
from .common import element_access_reasons, verdict

__all__ = ["TREE_REDUCE"]

_COMBINE = {"sum": "add", "max": "max", "min": "min"}


def _source_index(call: PrimitiveCall, out_idx, a) -> list:
    """The source indices of element ``a`` of the reduced axis for output ``out_idx``."""
    axis, src, dst = call.attrs["axis"], call["src"], call["dst"]
    rest = list(out_idx)
    if len(dst.shape) == len(src.shape):  # the axis kept as extent 1
        del rest[axis]
    return rest[:axis] + [a] + rest[axis:]


def _tree_reason(call: PrimitiveCall) -> str | None:
    scope = call.scope
    if call.team is TeamKind.WARP and scope.full_team:
        return None
    if call.team is TeamKind.CTA and scope.full_team and scope.active.cluster_size == 1:
        return None
    return (f"a tree over a {call.team} team needs warp shuffles (a whole warp) or a CTA "
            f"barrier (every thread of the CTA active); here {scope.team_size} threads of "
            f"the {call.team} are active")


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call, allow_oob=False)
    if reasons:
        return Decline(*reasons)
    dst, src = call["dst"], call["src"]
    dist = choose(call, [dst])
    if isinstance(dist, Decline):
        return dist
    why = None
    if isinstance(dist, Owned) and src.thread_axes:
        rows = range(src.shape[call.attrs["axis"]])
        why = dist.check_reads(src, lambda p: [tuple(_source_index(call, p, a)) for a in rows])
    if isinstance(dist, Cyclic):
        why = _tree_reason(call)
    shape = (dist.team_size,) if isinstance(dist, Cyclic) else (1,)
    return verdict([why] if why else [], [shape], distribution=dist)


def _identity(em: Emitter, op: str, dtype):
    if op == "sum":
        return em.const(0.0 if dtype.is_float else 0, dtype)
    if dtype.is_float:
        return em.const(float("-inf") if op == "max" else float("inf"), dtype)
    bits = dtype.bits - dtype.is_signed
    low = -(1 << bits) if dtype.is_signed else 0
    return em.const(low if op == "max" else (1 << bits) - 1, dtype)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = call["dst"], call["src"]
    axis, combine = call.attrs["axis"], _COMBINE[call.attrs["op"]]
    length, dtype = src.shape[axis], dst.dtype

    def element(out_idx, a):
        value = em.load(src, _source_index(call, out_idx, a))
        return value if value.type == dtype else em.b.cast(value, dtype)

    def fold(out_idx, start, step, init):
        (acc,) = em.loop(start, length, step, lambda a, acc: [
            em.b.binary(combine, acc, element(out_idx, a))], inits=[init])
        return acc

    dist, domain = plan.details["distribution"], Box.full(dst.shape)
    if not isinstance(dist, Cyclic):
        em.each([(domain, lambda out: em.store(dst, fold(out, 1, 1, element(out, 0)), out))])
        return
    t = team_thread(em, call.scope)

    def tree(out):
        total = _team_combine(em, call, fold(out, t, dist.team_size,
                                             _identity(em, call.attrs["op"], dtype)))
        _, then, orelse = em.b.if_(em.b.cmp("eq", t, em.const(0)))
        with em.b.insert_into(then):
            em.store(dst, total, out)
            em.b.yield_()
        with em.b.insert_into(orelse):
            em.b.yield_()
    em.nest([(domain, tree)])


def _team_combine(em: Emitter, call: PrimitiveCall, partial):
    """Every thread's partial combined; afterwards every thread of the team holds it."""
    combine, b = _COMBINE[call.attrs["op"]], em.b
    offset = LANES_PER_WARP // 2
    while offset:
        other = b.warp_shuffle("xor", partial, em.const(offset))
        partial = b.binary(combine, partial, other)
        offset //= 2
    if call.team is TeamKind.WARP:
        return partial
    warps = call.scope.active.num_warps
    scratch = em.once("reduce_scratch",
                      lambda: b.alloc(MemScope.SHARED, partial.type, (warps,)))
    lane, warp = em.thread_coord("lane_id"), em.thread_coord("warp_id")
    _, then, orelse = b.if_(b.cmp("eq", lane, em.const(0)))
    with b.insert_into(then):
        b.store(scratch, partial, [warp])
        b.yield_()
    with b.insert_into(orelse):
        b.yield_()
    b.sync()
    (total,) = em.loop(1, warps, 1, lambda w, acc: [
        b.binary(combine, acc, b.load(scratch, [em.index(w)]))], inits=[b.load(scratch, [em.const(0)])])
    b.sync()  # the scratch is reused by the next output
    return total


TREE_REDUCE = register(Rule("tree", "reduce", check, lower, fallback=True,
                            doc="sequential in a unit; a shuffle/shared-memory tree over a team"))
