"""Legality checks every generic element-loop family shares."""
from __future__ import annotations

from ...ir.types import MemScope, TeamKind
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import TEAM_ONCE, Decline, Plan

__all__ = ["ELEMENT_ROLES", "element_access_reasons", "identity", "out_of_bounds_fill",
           "verdict"]

# Memory that plain load/store reach element by element (tmem, sbuf and psum need their
# target's own instructions; a target whose capabilities say tmem_elements keeps tensor
# memory as plain memory when a team runs a primitive once).
ELEMENT_ROLES = (MemScope.GLOBAL, MemScope.SHARED, MemScope.LOCAL, MemScope.FRAGMENT)


def element_access_reasons(call: PrimitiveCall, allow_oob: bool = True,
                           checked: tuple[str, ...] = ()) -> list[str]:
    """Why element-by-element loads and stores cannot implement ``call`` (empty: they can).
    ``checked`` names operands whose every access is bounds-checked against their run-time
    extents (a gather's source), so they may be whole tensors of run-time shape."""
    if not call.context.element_loops:   # nothing below helps: the target has no such loops
        return [f"target {call.target!r} cannot run per-element loops (its capabilities "
                "say element_loops=False): only its own instruction families apply"]
    reasons, roles = [], ELEMENT_ROLES
    if call.context.tmem_elements and call.context.distribution == TEAM_ONCE:
        roles += (MemScope.TMEM,)
    for o in call.tiles:
        if o.role not in roles:
            reasons.append(f"{o.name} is in {o.role} memory, which element loops cannot "
                           "reach (they load and store global, shared, local and fragment)")
        if not o.is_static and o.name not in checked:
            dims = ", ".join("?" if n is None else str(n) for n in o.shape)
            reasons.append(f"{o.name} has the run-time shape [{dims}]: pass a region with "
                           "static sizes")
        if o.role is MemScope.LOCAL and call.team is not TeamKind.THREAD:
            reasons.append(f"{o.name} is a local (per-thread) buffer but the team is "
                           f"{call.team}: use it under `with tj.thread()`")
        if o.may_oob and not allow_oob:
            reasons.append(f"{o.name} may run past the end of its tensor; copy it into an "
                           "on-chip tile first")
    return reasons


def identity(em, op: str, dtype):
    """The constant ``op`` folds from (``combine(identity, x) == x``); ``argmax``/``argmin``
    take that of ``max``/``min``."""
    op = op.removeprefix("arg")
    if op in ("sum", "prod"):
        one = 1 if op == "prod" else 0
        return em.const(float(one) if dtype.is_float else one, dtype)
    if dtype.is_float:
        return em.const(float("-inf") if op == "max" else float("inf"), dtype)
    bits = dtype.bits - dtype.is_signed
    low = -(1 << bits) if dtype.is_signed else 0
    return em.const(low if op == "max" else (1 << bits) - 1, dtype)


def out_of_bounds_fill(em, call: PrimitiveCall, operand):
    """What a reduction or scan reads past the end of a tensor: ``config["fill"]`` when
    given, else the op's identity, so that missing elements do not count (Triton's masked
    load with ``other=-inf`` before a ``tl.max``)."""
    if "fill" in call.config:
        return None   # Emitter.load's default: the config's fill value
    return identity(em, call.attrs["op"], operand.dtype)


def verdict(reasons: list[str], shapes, **details) -> Plan | Decline:
    """A Decline listing ``reasons``, or the Plan when there are none."""
    return Decline(*reasons) if reasons else Plan(tuple(shapes), details)
