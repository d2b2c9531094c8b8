"""Reduction (sum/max/min/argmax/argmin over one axis) on any target: family ``tree``
(the fallback).

Within one executing unit the reduction is sequential: the accumulator starts at the
first element and folds in the rest, in the destination's dtype. How the team shares the
work follows the call's distribution:

* uniform (``team_once``, or a one-thread team): the unit reduces every output;
* owned: each thread reduces the outputs the destination's layout gives it, which needs
  it to hold whole rows of the source (checked against the layouts; rows spread over
  threads are the ``shuffle`` family's, ``reduce_shuffle.py``);
* cyclic: for each output, thread ``t`` folds elements ``t, t+T, ...`` of the axis
  (starting from the identity), then the team combines its partials as a tree --
  ``warp_shuffle xor`` within a warp and, for a CTA team, one partial per warp through
  shared memory between two ``sync``s. Thread 0 stores the result.

``argmax``/``argmin`` fold a (value, index) pair in the source's dtype: an element
replaces the best one when it is strictly beyond it (ties keep the lowest index) or when
it is NaN and the best is not (NaN counts as the extreme, as in numpy and torch). They
have no tree: under a cyclic distribution each thread folds whole outputs.

A source that may run past the end of its tensor reads the op's identity there (or
``config["fill"]``), so the missing elements do not count; stores to a destination past
the end are skipped.

Instruction shape: ``(1,)`` for a sequential fold, ``(T,)`` for a tree over ``T`` threads.
"""
from __future__ import annotations

from ...ir.ops_tile import INDEX_REDUCE_OPS
from ...ir.scope import LANES_PER_WARP
from ...ir.types import MemScope, TeamKind
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Cyclic, Owned, choose, team_thread
from ..loopgen import Box, Emitter, broadcast_index
from .common import element_access_reasons, identity, out_of_bounds_fill, verdict
from .elementwise import compute_steps

__all__ = ["COMBINE", "TREE_REDUCE", "element_loader", "fold_slots", "lane_butterfly",
           "xor_offsets"]

# reduce op -> the binary op that combines two partial results
COMBINE = {"sum": "add", "max": "max", "min": "min"}


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
    reasons = element_access_reasons(call)
    if reasons:
        return Decline(*reasons)
    dst, src = call["dst"], call["src"]
    dist = choose(call, [dst])
    if isinstance(dist, Decline):
        return dist
    why = None
    rows = range(src.shape[call.attrs["axis"]])
    for o in call.tiles[1:] if isinstance(dist, Owned) else ():
        if o.thread_axes and not why:
            why = dist.check_reads(o, lambda p, o=o: [tuple(broadcast_index(
                o, _source_index(call, p, a))) for a in rows])
    tree = isinstance(dist, Cyclic) and call.attrs["op"] not in INDEX_REDUCE_OPS
    if tree:
        why = _tree_reason(call)
    shape = (dist.team_size,) if tree else (1,)
    return verdict([why] if why else [], [shape], distribution=dist, tree=tree)


def _replaces(em: Emitter, op: str, x, best):
    """Whether element ``x`` replaces ``best`` in an argmax/argmin fold."""
    beyond = em.b.cmp("gt" if op == "argmax" else "lt", x, best)
    if not x.type.is_float:
        return beyond
    # ``ne`` is unordered (true for NaN) and ``eq`` ordered (false for NaN).
    first_nan = em.b.binary("and", em.b.cmp("ne", x, x), em.b.cmp("eq", best, best))
    return em.b.binary("or", beyond, first_nan)


def _loader(call: PrimitiveCall, em: Emitter):
    """``load(out_idx, a)``: element ``a`` of the reduced axis for output ``out_idx`` (the
    fused chain's value there when the reduce carries ``steps``)."""
    src, steps = call["src"], call.attrs.get("steps")
    fill = out_of_bounds_fill(em, call, src) if src.may_oob else None
    if steps is None:
        return lambda out_idx, a: em.load(src, _source_index(call, out_idx, a), src.may_oob,
                                          fill)

    def value(out_idx, a):  # fusion reads on-chip sources only: nothing runs past an end
        idx = _source_index(call, out_idx, a)
        return compute_steps(em, steps, [em.load(o, idx) for o in call.operands[1:]], idx)
    return value


def _lower_index(call: PrimitiveCall, em: Emitter) -> None:
    dst, src, op = call["dst"], call["src"], call.attrs["op"]
    length, load = src.shape[call.attrs["axis"]], _loader(call, em)

    def fold(out_idx):
        def step(a, best, where):
            x = load(out_idx, a)
            take = _replaces(em, op, x, best)
            return [em.b.select(take, x, best), em.b.select(take, em.index(a), where)]
        _, where = em.loop(1, length, 1, step, inits=[load(out_idx, 0), em.const(0)])
        em.store(dst, where, out_idx, dst.may_oob)
    em.each([(Box.full(dst.shape), fold)])


def element_loader(call: PrimitiveCall, em: Emitter):
    """``element(out_idx, a)``: element ``a`` of the reduced axis for output ``out_idx``,
    in the destination's dtype (the dtype a value reduction folds in)."""
    load, dtype = _loader(call, em), call["dst"].dtype

    def element(out_idx, a):
        value = load(out_idx, a)
        return value if value.type == dtype else em.b.cast(value, dtype)
    return element


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    if call.attrs["op"] in INDEX_REDUCE_OPS:
        _lower_index(call, em)
        return
    dst, src = call["dst"], call["src"]
    axis, combine = call.attrs["axis"], COMBINE[call.attrs["op"]]
    length, dtype, element = src.shape[axis], dst.dtype, element_loader(call, em)

    def fold(out_idx, start, step, init):
        (acc,) = em.loop(start, length, step, lambda a, acc: [
            em.b.binary(combine, acc, element(out_idx, a))], inits=[init])
        return acc

    dist, domain = plan.details["distribution"], Box.full(dst.shape)
    if not plan.details["tree"]:
        em.each([(domain, lambda out: em.store(dst, fold(out, 1, 1, element(out, 0)), out,
                                              dst.may_oob))])
        return
    t = team_thread(em, call.scope)

    def tree(out):
        total = _team_combine(em, call, fold(out, t, dist.team_size,
                                             identity(em, call.attrs["op"], dtype)))
        _, then, orelse = em.b.if_(em.b.cmp("eq", t, em.const(0)))
        with em.b.insert_into(then):
            em.store(dst, total, out, dst.may_oob)
            em.b.yield_()
        with em.b.insert_into(orelse):
            em.b.yield_()
    em.nest([(domain, tree)])


def xor_offsets(extent: int, stride: int) -> list[int]:
    """The lane distances that pair the lanes of an iter of ``extent`` lanes ``stride``
    apart (both powers of two), largest first: one xor butterfly step each."""
    return [stride << k for k in reversed(range(extent.bit_length() - 1))]


def lane_butterfly(em: Emitter, combine: str, value, offsets):
    """``value`` combined with the lanes that differ from this one in the bits of
    ``offsets`` (``warp_shuffle xor``); afterwards each of those lanes holds the total.
    Every lane of the warp must take part."""
    for offset in offsets:
        value = em.b.binary(combine, value, em.b.warp_shuffle("xor", value, em.const(offset)))
    return value


def fold_slots(em: Emitter, combine: str, scratch, index, count: int):
    """``scratch[*index, 0..count)`` folded in order, from the first slot."""
    prefix = [em.index(i) for i in index]
    (total,) = em.loop(1, count, 1, lambda w, acc: [
        em.b.binary(combine, acc, em.b.load(scratch, [*prefix, em.index(w)]))],
        inits=[em.b.load(scratch, [*prefix, em.const(0)])])
    return total


def _team_combine(em: Emitter, call: PrimitiveCall, partial):
    """Every thread's partial combined; afterwards every thread of the team holds it."""
    combine, b = COMBINE[call.attrs["op"]], em.b
    partial = lane_butterfly(em, combine, partial, xor_offsets(LANES_PER_WARP, 1))
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
    total = fold_slots(em, combine, scratch, (), warps)
    b.sync()  # the scratch is reused by the next output
    return total


TREE_REDUCE = register(Rule("tree", "reduce", check, lower, fallback=True,
                            doc="sequential in a unit; a shuffle/shared-memory tree over a team"))
