"""The ``lower-tiles`` pass: replace each dispatched tile op by its rule's native IR.

The op's ``rule`` / ``inst_shape`` attributes (set by the dispatch pass, or written by
hand in a text IR file) say what to emit. The rule's legality check runs again -- it is
deterministic -- to rebuild the plan its lowering needs. With the ``team_once``
distribution the code is wrapped in ``single {team = kind}``: one unit runs the whole tile
once per team instance, after the team's active threads arrive. With ``per_thread`` every
thread runs its share, with no barrier of its own: what orders one primitive's writes before
another's reads is the kernel's schedule and the barriers the sync-hazards pass inserted.
After this pass the kernel holds native ops only.
"""
from __future__ import annotations

from collections.abc import Mapping

from ...errors import CompilationError, DispatchError
from ...ir.core import KernelIR, Operation, Value
from ...ir.opdef import OpGroup
from ...ir.rewrite import Rewriter
from ..loopgen import Emitter
from .call import PrimitiveCall, RebuiltWriters, argument_flags, fragment_writers
from .registry import TEAM_ONCE, Decline, DispatchContext, context_for, lookup

__all__ = ["run"]


def _is_tile(op: Operation) -> bool:
    return op.opdef.group is OpGroup.TILE


def lower_op(op: Operation, builder, context: DispatchContext,
             arg_flags: Mapping[Value, tuple[str, ...]],
             writers: Mapping[Value, Operation] | None = None) -> None:
    """Emit the native code of the dispatched tile op ``op`` at ``builder``; ``arg_flags``
    and ``writers`` as for ``PrimitiveCall.of``."""
    family, shape = op.attrs["rule"], op.attrs["inst_shape"]
    if family is None or shape is None:
        raise CompilationError(f"{op.name} has not been dispatched: run the dispatch pass "
                               "before lower-tiles", op.loc)
    call = PrimitiveCall.of(op, context, arg_flags, writers)
    rule = lookup(family, call.primitive, call.target, context.distribution)
    if rule is None:
        raise DispatchError(f"rule {family!r} is not registered for {call.primitive} on "
                            f"target {call.target!r}", op.loc)
    plan = rule.check(call)
    if isinstance(plan, Decline) or tuple(shape) not in plan.shapes:
        why = plan if isinstance(plan, Decline) else f"shape {list(shape)} is not legal"
        raise DispatchError(f"{op.name} was dispatched to {family} but {why}", op.loc)
    plan = plan.choose(shape)

    def emit():
        em = Emitter(call, builder, plan.details.get("distribution"))
        rule.lower(call, plan, em)
        em.finish()

    if context.distribution != TEAM_ONCE:   # ordered by the schedule (sync-hazards)
        emit()
        return
    _, body = builder.single(call.team)
    with builder.insert_into(body):
        emit()
        builder.yield_()


def run(kernel: KernelIR, context: DispatchContext | None = None) -> KernelIR:
    """The kernel with every tile op replaced by native IR."""
    context = context or context_for(kernel)
    writers = fragment_writers(kernel)

    def lower(op: Operation, ctx):
        lower_op(op, ctx.builder, context, argument_flags(kernel, ctx.lookup),
                 RebuiltWriters(writers, ctx.lookup))
        return ()

    return Rewriter([(_is_tile, lower, "lower-tiles")], "lower-tiles").run(kernel)
