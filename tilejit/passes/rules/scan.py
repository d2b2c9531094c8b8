"""Inclusive scan (sum/prod/max/min along one axis) on any target: family ``serial`` (the
fallback).

Each line of the source along the scanned axis is one instance: a unit walks it in order,
carrying the running value in the destination's dtype, and stores every prefix. The
instances are spread over the team like any element loop (``distribution.py``): every
line by the one executing unit (``team_once``, a one-thread team) or line ``t, t+T, ...``
by thread ``t`` (cyclic). Reading element ``i`` before storing prefix ``i`` makes an
in-place scan (dst is src) correct.

A source that may run past the end of its tensor reads the op's identity there (or
``config["fill"]``), so the prefixes past the end repeat the last one; stores to a
destination past the end are skipped.

Legality contract (else ``Decline``): element loops reach the operands, whose tiles have
static sizes; the destination is not laid out over threads (a line would span several
threads, which needs a cross-thread scan). Instruction shape ``(1,)``.
"""
from __future__ import annotations

from ..dispatch.call import PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter
from .common import element_access_reasons, out_of_bounds_fill, verdict

__all__ = ["SERIAL_SCAN"]

_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call)
    if reasons:
        return Decline(*reasons)
    dist = choose(call, [call["dst"]])
    if isinstance(dist, Decline):
        return dist
    if isinstance(dist, Owned):
        return Decline("dst is distributed over threads: a line along the scanned axis "
                       "spans several threads, which needs a cross-thread scan")
    return verdict([], [(1,)], distribution=dist)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = call["dst"], call["src"]
    axis, combine = call.attrs["axis"], _COMBINE[call.attrs["op"]]
    length = src.shape[axis]
    fill = out_of_bounds_fill(em, call, src) if src.may_oob else None

    def at(line, a) -> list:
        return line[:axis] + [a] + line[axis + 1:]

    def element(line, a):
        value = em.load(src, at(line, a), src.may_oob, fill)
        return value if value.type == dst.dtype else em.b.cast(value, dst.dtype)

    def step(line, a, acc):
        acc = em.b.binary(combine, acc, element(line, a))
        em.store(dst, acc, at(line, a), dst.may_oob)
        return [acc]

    def scan_line(line):
        first = element(line, 0)
        em.store(dst, first, at(line, 0), dst.may_oob)
        em.loop(1, length, 1, lambda a, acc: step(line, a, acc), inits=[first])

    lines = tuple(1 if d == axis else n for d, n in enumerate(dst.shape))
    em.each([(Box.full(lines), scan_line)])


SERIAL_SCAN = register(Rule("serial", "scan", check, lower, fallback=True,
                            doc="each line along the axis walked in order by one unit"))
