"""Pointwise primitives on SBUF/PSUM tiles: family ``engine`` (one engine instruction per
[partitions, free] tile, ``common.tiled``).

| tilejit op | NKI instruction |
|---|---|
| add sub mul div maximum minimum of two tiles | ``nisa.tensor_tensor(op=nl.add ...)`` |
| the same with a number or a [P, 1] column | ``nisa.tensor_scalar`` (``reverse0``: it is left) |
| exp log sqrt rsqrt tanh sigmoid abs | ``nisa.activation(op=nl.exp ...)`` (Scalar Engine) |
| neg | ``nisa.tensor_scalar(op0=nl.multiply, operand0=-1.0)`` |
| cast | ``nisa.tensor_copy`` (it converts) |
| fill | ``nisa.memset`` |

A fused chain (``fuse-pointwise``'s ``expr``) and every other op are declined with the
reason: write one primitive per operation on named tiles.
"""
from __future__ import annotations

from tilejit.ir.types import MemScope, f32
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter

from .common import placed, scope_reasons, tiled, tiling

__all__ = ["ENGINE"]

ALU = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
       "maximum": "maximum", "minimum": "minimum"}
ACTIVATION = {name: name for name in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs")}
OTHERS = ("neg", "cast", "fill")


def _is_column(call: PrimitiveCall, operand) -> bool:
    return not operand.is_scalar and tuple(operand.shape) != tuple(call["dst"].shape)


def check(call: PrimitiveCall) -> Plan | Decline:
    name = call.attrs["op"]
    reasons = scope_reasons(call)
    if name not in (*ALU, *ACTIVATION, *OTHERS):
        reasons.append(f"{name!r} has no NKI instruction here (a fused chain: write one "
                       "primitive per operation on named tiles)")
        return Decline(*reasons)
    dst, *srcs = call.operands
    tiles = [placed(o) for o in (dst, *srcs) if not o.is_scalar]
    reasons += [p for p in tiles if isinstance(p, str)]
    if dst.role is MemScope.PSUM:
        reasons.append("dst is in PSUM: engines write it through nc_matmul")
    scalars = [o for o in srcs if o.is_scalar]
    columns = [o for o in srcs if _is_column(call, o)]
    if name in ALU and len(scalars) + len(columns) > 1:
        reasons.append("both operands broadcast: one of them must be a whole tile")
    if (name in ACTIVATION or name == "neg") and (scalars or columns):
        reasons.append(f"{name} of a broadcast operand: copy it into a whole tile first")
    if columns and any(o.dtype != f32 for o in columns):
        reasons.append("a [P, 1] operand of tensor_scalar is f32")
    if reasons:
        return Decline(*reasons)
    t = tiling(tiles[0], tiles[1:])
    if isinstance(t, str):
        return Decline(t)
    return Plan([t.shape], {"tiling": t})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    name = call.attrs["op"]
    dst, *srcs = call.operands
    full = [o for o in srcs if not o.is_scalar and not _is_column(call, o)]

    def emit(out, regions, _picks):
        region = dict(zip([o for o in srcs if not o.is_scalar], regions))
        if name == "fill":
            em.b.create("nki.memset", (out, srcs[0].value))
        elif name == "cast":
            em.b.create("nki.tensor_copy", (out, regions[0]))
        elif name == "neg":
            em.b.create("nki.tensor_scalar", (out, regions[0], em.const(-1.0, f32)),
                        {"op": "multiply"})
        elif name in ACTIVATION:
            em.b.create("nki.activation", (out, regions[0]), {"op": ACTIVATION[name]})
        elif len(full) == 2:
            em.b.create("nki.tensor_tensor", (out, *regions), {"op": ALU[name]})
        else:   # one whole tile and a number or a column
            data = full[0]
            other = next(o for o in srcs if o is not data)
            operand = other.value if other.is_scalar else region[other]
            em.b.create("nki.tensor_scalar", (out, region[data], operand),
                        {"op": ALU[name], "reverse": srcs.index(other) == 0})

    tiled(em, plan.details["tiling"], emit)


ENGINE = register(Rule("engine", "pointwise", check, lower, targets=("nki",), priority=10,
                       doc="one Vector or Scalar Engine instruction per [P, F] tile"))
