"""Legality checks every generic element-loop family shares."""
from __future__ import annotations

from ...ir.types import MemScope, TeamKind
from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan

__all__ = ["ELEMENT_ROLES", "element_access_reasons", "verdict"]

# Memory that plain load/store reach element by element (tmem, sbuf and psum need their
# target's own instructions).
ELEMENT_ROLES = (MemScope.GLOBAL, MemScope.SHARED, MemScope.LOCAL, MemScope.FRAGMENT)


def element_access_reasons(call: PrimitiveCall, allow_oob: bool = True) -> list[str]:
    """Why element-by-element loads and stores cannot implement ``call`` (empty: they can)."""
    reasons = []
    for o in call.tiles:
        if o.role not in ELEMENT_ROLES:
            reasons.append(f"{o.name} is in {o.role} memory, which element loops cannot "
                           "reach (they load and store global, shared, local and fragment)")
        if not o.is_static:
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


def verdict(reasons: list[str], shapes, **details) -> Plan | Decline:
    """A Decline listing ``reasons``, or the Plan when there are none."""
    return Decline(*reasons) if reasons else Plan(tuple(shapes), details)
