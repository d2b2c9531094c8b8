"""``reduce(dst, src, op, axis)`` along the free dim: family ``tensor_reduce``.

``nisa.tensor_reduce`` folds each partition's free elements: the reduced axis must lie on
``F`` (one digit, all of it in one instruction) and the partitions elsewhere; every other
digit is an independent loop. ``sum``/``max``/``min`` are ``nl.add``/``maximum``/
``minimum``; ``dst`` keeps the reduced axis as 1 or drops it.
"""
from __future__ import annotations

from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter

from .common import Keep, nest, loop_name, on_chip_region, placed, scope_reasons

__all__ = ["TENSOR_REDUCE"]

OPS = {"sum": "add", "max": "maximum", "min": "minimum"}


def _dst_dim(call: PrimitiveCall, d: int) -> int:
    """dst's logical dim of src's dim ``d`` (dst may drop the reduced axis)."""
    dropped = len(call["dst"].shape) < len(call["src"].shape)
    return d - (dropped and d > call.attrs["axis"])


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = scope_reasons(call)
    if call.attrs["op"] not in OPS:
        reasons.append(f"{call.attrs['op']} has no tensor_reduce (it has {', '.join(OPS)})")
    if call.attrs["steps"] is not None or len(call.operands) > 2:
        reasons.append("a fused chain: reduce a named tile")
    sides = [placed(call[name]) for name in ("dst", "src")]
    reasons += [p for p in sides if isinstance(p, str)]
    if reasons:
        return Decline(*reasons)
    dst, src = sides
    axis = call.attrs["axis"]
    folded = src.digits[axis]
    if len(folded) != 1 or folded[0].dim == 0:
        return Decline(f"the reduced axis {axis} of src is {len(folded)} digits "
                       f"{'on the partitions' if folded and folded[0].dim == 0 else ''}: "
                       "tensor_reduce folds one free digit")
    parts = src.find(on_partitions=True)
    if len(parts) != 1 or dst[(_dst_dim(call, parts[0][0]), parts[0][1])].dim != 0:
        return Decline("src and dst must hold the same digit on the partitions")
    return Plan([(src[parts[0]].extent, folded[0].extent)], {"part": parts[0]})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = placed(call["dst"]), placed(call["src"])
    axis, part = call.attrs["axis"], plan.details["part"]
    covered = {part: Keep(0, plan.shape[0]), (axis, 0): Keep(0, plan.shape[1])}
    keys = [key for key in src.find() if key not in covered]
    loops = [(src[key].extent, True, loop_name("i", key, keys)) for key in keys]

    def body(ivs):
        picks = {**covered, **dict(zip(keys, ivs))}
        out = on_chip_region(em, dst, {(_dst_dim(call, d), j): pick
                                       for (d, j), pick in picks.items() if d != axis})
        em.b.create("nki.tensor_reduce", (out, on_chip_region(em, src, picks)),
                    {"op": OPS[call.attrs["op"]]})

    nest(em, loops, body)


TENSOR_REDUCE = register(Rule("tensor_reduce", "reduce", check, lower, targets=("nki",),
                              priority=10, doc="nisa.tensor_reduce along the free dim"))
