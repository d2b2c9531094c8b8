"""Row reduction on the CPU: family ``lanes``.

``sum``/``max``/``min`` along the innermost, contiguous axis of an f32 tile: each output
is the CPU instruction ``cpu.row_reduce`` (``ops.py``) -- four interleaved vector
accumulators of ``W`` lanes over the row, a masked last vector and a shuffle tree across
the lanes. Instruction shape ``(W,)``. The sum is therefore taken in a different order
than the sequential ``tree`` fallback (``4 W`` interleaved partial sums combined in
pairs, as vectorized libraries do); ``max``/``min`` propagate NaN like the fallback, but
may return either zero when a row's extreme is both ``+0`` and ``-0``.

A reduce carrying a fused chain (``steps``, from fuse-pointwise: ``tj.sum(c * c)``) reads
no tile of its elements: ``cpu.row_reduce`` takes the chain as its ``steps`` attribute,
loads each chain source's row (a source constant along the row, such as a row mean, as
one broadcast scalar; a bool source as bytes) and evaluates the chain on the vectors, then
folds as above; the masked last vector's unused lanes hold the identity.

Legality contract (else ``Decline`` with the reasons; the ``tree`` fallback takes over):

* the target runs tile primitives once per team (``team_once``);
* src and dst are f32 with static sizes, in global, shared, fragment or local memory, and
  cannot run past a tensor's end;
* the reduced axis is src's innermost dim and has unit stride;
* a chain holds only f32 ``add sub mul div fma neg select`` (``fusion.ARITHMETIC``),
  its sources are f32 (a select's condition bool), each a scalar, constant along the
  row or unit-stride along it.
"""
from __future__ import annotations

from tilejit.ir.types import f32, i1
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.distribution import Uniform
from tilejit.passes.loopgen import Box, Emitter, broadcast_index
from tilejit.passes.rules.common import element_access_reasons, verdict

from ..ops import CHAIN_OPS, REDUCE_OPS
from .common import lanes, team_once_reasons, tile_strides

__all__ = ["LANES_REDUCE"]


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call, allow_oob=False) + team_once_reasons(call)
    dst, src = call["dst"], call["src"]
    axis = call.attrs["axis"]
    for o in (dst, src):
        if o.dtype != f32:
            reasons.append(f"{o.name} is {o.dtype}: the vector reduction works on f32")
    reasons += _chain_reasons(call)
    if call.attrs["op"] not in REDUCE_OPS:
        reasons.append(f"op {call.attrs['op']!r} is not one of {', '.join(REDUCE_OPS)}")
    if axis != len(src.shape) - 1:
        reasons.append(f"the reduced axis {axis} is not src's innermost dim "
                       f"{len(src.shape) - 1}: its elements are not adjacent")
    elif not reasons:
        strides, why = tile_strides(src)
        if why:
            reasons.append(why)
        elif strides[-1] != 1 and src.shape[-1] > 1:
            reasons.append(f"src's innermost stride is {strides[-1]}, not 1")
    return verdict(reasons, [(lanes(call),)], distribution=Uniform())


def _chain_reasons(call: PrimitiveCall) -> list[str]:
    """Why row_reduce cannot compute the fused chain of ``call`` (none without one)."""
    steps = call.attrs["steps"]
    if steps is None:
        return []
    reasons = [f"chain step {name} in {dtype} is not one of the f32 "
               f"{', '.join(CHAIN_OPS)}" for name, dtype, *_ in steps
               if name not in CHAIN_OPS or dtype != f32]
    conditions = {args[0] for name, _, *args in steps if name == "select"}
    if conditions - set(range(1, len(call.operands) - 1)):
        reasons.append("a select's condition is not a bool source of the chain")
    for number, o in enumerate(call.operands[2:], start=1):
        wanted = i1 if number in conditions else f32
        if o.dtype != wanted:
            reasons.append(f"{o.name} is {o.dtype}: the fused chain reads {wanted} there")
        elif not o.is_scalar and o.shape[-1] != 1:
            strides, why = tile_strides(o)
            if why or strides[-1] != 1:
                reasons.append(why or f"{o.name}'s innermost stride is {strides[-1]}, not 1")
    return reasons


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = call["dst"], call["src"]
    axis, steps = call.attrs["axis"], call.attrs["steps"]
    attrs = {"op": call.attrs["op"], "length": src.shape[-1], "lanes": plan.shape[0],
             "steps": steps}

    def sources(start):
        """The chain's further sources as cpu.row_reduce takes them (ops.row_reduce_operands)
        for the row at ``start``: a source constant along the row is read here as a scalar."""
        if steps is None:
            return []
        operands = []
        for o in call.operands[2:]:
            if o.is_scalar or o.shape[-1] == 1:
                operands.append(em.load(o, start))
            else:
                operands += [o.value, *(em.index(i) for i in broadcast_index(o, start))]
        return operands

    def row(out_idx):
        rest = list(out_idx)
        if len(dst.shape) == len(src.shape):  # the axis kept as extent 1
            del rest[axis]
        start = [em.index(i) for i in rest] + [em.const(0)]
        first = rest + [0]
        value = em.b.create("cpu.row_reduce", [src.value, *start, *sources(first)], attrs).result
        em.store(dst, value, out_idx)

    em.each([(Box.full(dst.shape), row)])


LANES_REDUCE = register(Rule(
    "lanes", "reduce", check, lower, targets=("cpu",), priority=10,
    doc="f32 row reduction in vector accumulators with a shuffle tree across lanes"))
