"""Tile atomics (``tj.atomic_add(out[r:r + BM, c:c + BN], tile)``) on any target: one native
``atomic`` per element of the destination, in the element loops of the generic ``scalar``
family (``elementwise``): its legality, distribution and masking of destinations that run
past the end of their tensor (those elements are not updated). Family ``scalar``, fallback.
"""
from __future__ import annotations

from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..loopgen import Emitter
from .elementwise import check_scalar

__all__ = ["SCALAR_ATOMIC"]


def check(call: PrimitiveCall) -> Plan | Decline:
    src = call.operands[1]
    if src.may_oob:  # a fill value is no neutral element for xchg, max or min
        return Decline(f"{src.name} may run past the end of its tensor; copy it into an "
                       "on-chip tile first")
    return check_scalar(call)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = call.operands
    domain = list(dst.shape)
    if plan.details["fused"]:
        domain = [em.fuse(call.tiles)]
    op, order, sync_scope = call.attrs["op"], call.attrs["order"], call.attrs["sync_scope"]

    def update(idx, checked):
        value = em.load(src, idx)
        if value.type != dst.dtype:
            value = em.b.cast(value, dst.dtype)
        op_idx = [em.index(i) for i in em.operand_index(dst, idx)]
        ok = em.in_bounds(dst, op_idx) if checked else None
        if ok is None:
            em.b.atomic(op, em.storage(dst), value, op_idx, order, sync_scope)
            return
        _, then, orelse = em.b.if_(ok)
        with em.b.insert_into(then):
            em.b.atomic(op, em.storage(dst), value, op_idx, order, sync_scope)
            em.b.yield_()
        with em.b.insert_into(orelse):
            em.b.yield_()

    em.each([(box, lambda base, box=box, checked=checked: em.unrolled(
        base, box.step, lambda idx: update(idx, checked)))
        for box, checked, _ in em.pieces(dst, [src], domain, (1,) * len(domain))])


SCALAR_ATOMIC = register(Rule("scalar", "atomic", check, lower, fallback=True,
                              doc="one native atomic per element"))
