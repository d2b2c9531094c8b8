"""Structured control flow: for, if, while, team.

``if`` ops carrying a thread ``filter`` narrow the statically known active set in their
then-branch (and the complement in the else-branch), the way the scope-analysis pass
does; the emitter uses it to know how many threads a unit stands for. With warp units an
``elect`` filter runs the then-branch for the elected lane and then the else-branch for
the other lanes (see ``units``).
"""
from __future__ import annotations

import dataclasses

from llvmlite import ir

from tilejit.errors import CompilationError, ScopeError
from tilejit.ir.core import walk
from tilejit.ir.ops_native import READING_ACCESSES
from tilejit.ir.types import TeamKind

from .emit_memory import BufferRef, RegionRef
from .metadata import loop_id


# A buffer or region flowing through control flow (a shared buffer swapped in a loop, a
# tensor region chosen by an ``if``) is a reference: one phi per run-time part of it.
def _leaves(value) -> list:
    """The run-time LLVM values ``value`` is made of, in a fixed order."""
    if isinstance(value, RegionRef):
        return _leaves(value.parent) + list(value.starts)
    if isinstance(value, BufferRef):
        parts = [value.ptr] + [x for x in [*value.shape, *(value.strides or ())]
                               if isinstance(x, ir.Value)]
        return parts + (_leaves(value.reshaped) if value.reshaped is not None else [])
    return [value]


def _rebuild(template, leaves):
    """``template`` with its run-time parts taken from the iterator ``leaves``."""
    if isinstance(template, RegionRef):
        parent = _rebuild(template.parent, leaves)
        return RegionRef(parent, [next(leaves) for _ in template.starts], template.sizes,
                         template.keep)
    if isinstance(template, BufferRef):
        ptr = next(leaves)
        shape = [next(leaves) if isinstance(x, ir.Value) else x for x in template.shape]
        strides = template.strides and [next(leaves) if isinstance(x, ir.Value) else x
                                        for x in template.strides]
        reshaped = template.reshaped and _rebuild(template.reshaped, leaves)
        return dataclasses.replace(template, ptr=ptr, shape=shape, strides=strides,
                                   reshaped=reshaped)
    return next(leaves)


def _phis(b: ir.IRBuilder, values) -> list:
    return [_rebuild(v, iter([b.phi(leaf.type) for leaf in _leaves(v)])) for v in values]


def _addressed_alike(a, b) -> bool:
    """Whether ``a`` and ``b`` differ only in their run-time parts."""
    if isinstance(a, RegionRef) and isinstance(b, RegionRef):
        return _addressed_alike(a.parent, b.parent)
    if isinstance(a, BufferRef) and isinstance(b, BufferRef):
        return a.addressing == b.addressing and (a.reshaped is None) == (b.reshaped is None) \
            and (a.reshaped is None or _addressed_alike(a.reshaped, b.reshaped))
    return not isinstance(a, (BufferRef, RegionRef)) and not isinstance(b, (BufferRef, RegionRef))


def _add_incoming(phis, values, block) -> None:
    for phi, value in zip(phis, values):
        if not _addressed_alike(phi, value):
            raise CompilationError(f"{value.name} and {phi.name} flow into one value here but "
                                   "are addressed differently (their layouts or views differ)")
        for leaf_phi, leaf in zip(_leaves(phi), _leaves(value)):
            leaf_phi.add_incoming(leaf, block)


def emit_for(em, op):
    lb, ub, step, *inits = em.operands(op)
    t = op.operands[0].type
    b = em.b
    preheader = b.block
    head = b.append_basic_block("for.head")
    body = b.append_basic_block("for.body")
    exit_ = b.append_basic_block("for.exit")
    b.branch(head)
    b.position_at_end(head)
    iv, *carried = _phis(b, [lb, *inits])
    _add_incoming([iv, *carried], [lb, *inits], preheader)
    b.cbranch(_in_range(em, op, iv, ub, step), body, exit_)
    b.position_at_end(body)
    yielded = em.emit_block(op.regions[0], [iv, *carried])
    flags = ("nsw",) if t.kind == "int" else ("nuw",)
    iv.add_incoming(b.add(iv, step, flags=flags), b.block)
    _add_incoming(carried, yielded, b.block)
    back_edge = b.branch(head)
    hints = _loop_hints(op)
    if hints:
        back_edge.set_metadata("llvm.loop", loop_id(b.module, hints))
    b.position_at_end(exit_)
    return carried


def _loop_hints(op) -> list[tuple[str, ir.Value]]:
    """LLVM loop properties for a ``for``: its ``unroll`` count, and no loop vectorization
    when its body holds an unrolled loop -- that inner loop is one vector instruction of
    the tile (loop generation sized it to the vector width), which the SLP vectorizer
    turns into vector ops; vectorizing the outer loop instead would stride across those
    instructions (gathers and scatters)."""
    hints = []
    if op.attrs["unroll"] is not None:
        hints.append(("llvm.loop.unroll.count", ir.Constant(ir.IntType(32), op.attrs["unroll"])))
    if any(inner.name == "for" and inner.attrs["unroll"] is not None
           for inner in op.regions[0].ops):
        hints.append(("llvm.loop.vectorize.enable", ir.Constant(ir.IntType(1), 0)))
    return hints


def _in_range(em, op, iv, ub, step):
    """``iv < ub`` for a positive step, ``iv > ub`` for a negative one (Python's range)."""
    b, t = em.b, op.operands[0].type
    compare = b.icmp_signed if t.kind == "int" else b.icmp_unsigned
    known = em.consts.get(op.operands[2])
    if known is not None or t.kind != "int":
        return compare(">" if known is not None and known < 0 else "<", iv, ub)
    upward = b.icmp_signed(">", step, ir.Constant(step.type, 0))
    return b.select(upward, compare("<", iv, ub), compare(">", iv, ub))


def emit_if(em, op):
    spec = op.attrs["filter"]
    if spec is not None and spec.axis == "elect" and em.mc.units.kind is not TeamKind.THREAD:
        return _emit_elect_for_warp_unit(em, op)
    (cond,) = em.operands(op)
    then_state, else_state = _branch_states(em, spec)
    b = em.b
    then_block = b.append_basic_block("if.then")
    else_block = b.append_basic_block("if.else")
    merge = b.append_basic_block("if.end")
    b.cbranch(cond, then_block, else_block)
    incoming = []
    for block, region, state in ((then_block, op.regions[0], then_state),
                                 (else_block, op.regions[1], else_state)):
        b.position_at_end(block)
        with em.scoped(**state):
            values = em.emit_block(region)
        incoming.append((values, b.block))
        b.branch(merge)
    b.position_at_end(merge)
    results = _phis(b, incoming[0][0])
    for values, block in incoming:
        _add_incoming(results, values, block)
    return results


def _branch_states(em, spec) -> tuple[dict, dict]:
    """EmitState changes for the then- and else-branch of an ``if`` with filter ``spec``."""
    active = em.state.active
    if spec is None or active is None:
        return {}, {}

    def state(narrow) -> dict:
        try:  # native code may filter in ways tile primitives could not (e.g. dead branches)
            narrowed = narrow(spec.axis, spec.lo, spec.hi)
        except ScopeError:
            return {"active": None}
        return {"active": narrowed, "lanes": narrowed.lanes_per_warp}
    return state(active.narrow), state(active.complement)


def _emit_elect_for_warp_unit(em, op):
    """A warp-unit is every lane: the elected one runs ``then``, the others ``else``."""
    active = em.state.active
    elected = active.narrow("elect") if active is not None else None
    with em.scoped(active=elected, lanes=1):
        em.emit_block(op.regions[0])
    if len(op.regions[1].ops) > 1 and em.state.lanes > 1:
        with em.scoped(active=None, lanes=em.state.lanes - 1):
            em.emit_block(op.regions[1])
    return []


def emit_while(em, op):
    inits = em.operands(op)
    b = em.b
    preheader = b.block
    head = b.append_basic_block("while.head")
    after = b.append_basic_block("while.body")
    exit_ = b.append_basic_block("while.exit")
    b.branch(head)
    b.position_at_end(head)
    args = _phis(b, inits)
    _add_incoming(args, inits, preheader)
    cond, *values = em.emit_block(op.regions[0], args)
    b.cbranch(cond, after, exit_)
    b.position_at_end(after)
    if any(inner.name in READING_ACCESSES for region in op.regions for inner in walk(region)):
        em.frame.spin_point()   # it may wait for another unit's store
    next_args = em.emit_block(op.regions[1], values)
    _add_incoming(args, next_args, b.block)
    b.branch(head)
    b.position_at_end(exit_)
    return values


def emit_team(em, op):
    with em.scoped(team=op.attrs["kind"]):
        return em.emit_block(op.regions[0])


HANDLERS = {"for": emit_for, "if": emit_if, "while": emit_while, "team": emit_team}
