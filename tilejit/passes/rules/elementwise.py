"""Element loops for copy (masked or not) and pointwise (cast, fill, select, arithmetic,
iota, math, bits, and the Philox random numbers of ``philox.py``) on any target.

Two families share one lowering:

* ``vector`` -- the innermost dim runs in chunks of ``W`` consecutive elements, each chunk
  a fully unrolled instruction, and its last ``extent % W`` elements as one shorter chunk;
  legal where every operand in memory is contiguous along that dim for ``W`` elements.
  Instruction shape ``(W,)``, the largest legal ``W`` first.
* ``scalar`` (fallback) -- one element at a time, instruction shape ``(1,)``.

Both compute in the destination's dtype (sources are converted first), broadcast sources
like numpy, mask tiles that may run past the end of a global tensor (loopgen), apply a
copy's per-element mask (:func:`write`), and, for whole on-chip buffers, fuse all dims into
one loop through flat views.
"""
from __future__ import annotations

import functools
import math

from ...errors import LayoutError
from ...ir.ops_tile import (FUSED, POINTWISE_COMPARISONS, POINTWISE_FLOAT_ONLY, POINTWISE_INT_ONLY,
                            POINTWISE_RANDOM)
from ...ir.types import MemScope, i1, promote
from ...layout import ComposeLayout
from ...layout.transform import group_iters
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Emitter, broadcast_index
from . import philox
from .common import element_access_reasons, verdict

__all__ = ["SCALAR_COPY", "SCALAR_POINTWISE", "VECTOR_COPY", "VECTOR_POINTWISE", "compute",
           "element_loop_legality", "write"]

# pointwise op -> (native op, its attribute) for the ops that are one native op
_NATIVE = {"add": ("binary", "add"), "sub": ("binary", "sub"), "mul": ("binary", "mul"),
           "div": ("binary", "div"), "maximum": ("binary", "max"),
           "minimum": ("binary", "min"), "exp": ("unary", "exp"), "exp2": ("unary", "exp2"),
           "log": ("unary", "log"), "sqrt": ("unary", "sqrt"), "rsqrt": ("unary", "rsqrt"),
           "neg": ("unary", "neg"), "abs": ("unary", "abs"),
           "tanh": ("unary", "tanh"), "sigmoid": ("unary", "sigmoid"), "erf": ("unary", "erf"),
           "sin": ("unary", "sin"), "cos": ("unary", "cos"), "floor": ("unary", "floor"),
           "ceil": ("unary", "ceil"), "log2": ("unary", "log2"), "pow": ("binary", "pow"),
           "floordiv": ("binary", "floordiv"), "mod": ("binary", "mod"),
           "bitwise_and": ("binary", "and"), "bitwise_or": ("binary", "or"),
           "bitwise_xor": ("binary", "xor"), "bitwise_not": ("unary", "not"),
           "shl": ("binary", "shl"), "shr": ("binary", "shr")}


def _broadcasts(shape, target) -> bool:
    return len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


# --------------------------------------------------------------------------- legality
def element_loop_legality(call: PrimitiveCall) -> tuple[list[str], object]:
    """(reasons no element loop can do ``call``, its distribution when there are none)."""
    dst, srcs = call.operands[0], call.operands[1:]
    reasons = element_access_reasons(call)
    for op, dtype in computed_ops(call):
        if op in POINTWISE_FLOAT_ONLY and not dtype.is_float:
            reasons.append(f"{op} needs a floating-point destination, got {dtype}")
        if op in POINTWISE_INT_ONLY and not dtype.is_int:
            reasons.append(f"{op} needs an integer destination, got {dtype}")
    if not dst.shape:
        reasons.append("dst is a single element: use a plain load/store")
    for src in srcs:
        if not src.is_scalar and src.is_static and dst.is_static \
                and not _broadcasts(src.shape, dst.shape):
            reasons.append(f"{src.name} {list(src.shape)} does not broadcast to dst "
                           f"{list(dst.shape)}")
    if reasons:
        return reasons, None
    drivers = [o for o in call.tiles if tuple(o.shape) == tuple(dst.shape)]
    dist = choose(call, drivers)
    if isinstance(dist, Decline):
        return list(dist.reasons), None
    if isinstance(dist, Owned):
        for o in call.tiles:
            if o is not dist.driver and o.thread_axes:
                why = dist.check_reads(o, lambda p, o=o: [tuple(broadcast_index(o, p))])
                if why:
                    reasons.append(why)
    return reasons, dist


def _contiguous_run(o: Operand, fused: bool) -> tuple[int | None, str | None]:
    """(how many consecutive innermost elements of ``o`` are adjacent in memory -- None
    when unlimited --, why not even two are)."""
    if o.is_scalar or o.role in (MemScope.FRAGMENT, MemScope.LOCAL):
        return None, None  # a value or the executing unit's own registers
    if not fused and o.shape[-1] == 1:
        return None, None  # broadcast along the innermost dim: one element for all
    shape = (math.prod(o.shape),) if fused else tuple(o.shape)
    layout, limit = o.layout, None
    if o.role is MemScope.GLOBAL or layout is None:  # strided, or row-major by default
        strides = o.buffer_type.strides if o.role is MemScope.GLOBAL else (1,)
        innermost_kept = o.value.type.keep[-1] if o.is_region else True
        if not innermost_kept or strides is None or strides[-1] != 1:
            return 0, f"{o.name}'s innermost dim has no static unit stride"
        return shape[-1], None
    if isinstance(layout, ComposeLayout):
        limit, layout = 1 << layout.per_element, layout.tile_layout  # swizzle chunk
    try:
        _, groups = group_iters(layout.canonicalize(), shape)
    except LayoutError as err:
        return 0, f"{o.name}'s layout does not fit its shape: {err.message}"
    inner = groups[-1][-1] if groups[-1] else None
    if inner is None or inner.axis.name != "m" or inner.stride != 1:
        return 0, f"{o.name}'s innermost dim is not contiguous in its layout {o.layout}"
    return inner.extent if limit is None else min(inner.extent, limit), None


def _vector_widths(call: PrimitiveCall, fused: bool) -> tuple[list[int], list[str]]:
    dst = call.operands[0]
    inner = math.prod(dst.shape) if fused else dst.shape[-1]
    widest = call.context.vector_bytes // max(o.dtype.itemsize for o in call.operands)
    runs, reasons = [], []
    for o in call.operands:
        run, why = _contiguous_run(o, fused)
        if why:
            reasons.append(why)
        if run is not None:
            runs.append(run)
    # A run that ends inside the innermost dim (a layout's or swizzle's chunk) must hold
    # whole chunks; the innermost extent need not: its last ``inner % W`` elements are one
    # shorter chunk (Emitter.pieces).
    breaks = sorted({run for run in runs if run < inner})
    widths = [w for w in (1 << k for k in range(widest.bit_length() - 1, 0, -1))
              if w <= inner and all(run % w == 0 for run in breaks)]
    if not widths and not reasons:
        reasons.append(f"the innermost extent {inner} is shorter than two elements" if inner < 2
                       else f"no vector width (2..{widest} elements) divides every contiguous "
                       f"run ending inside the innermost dim {breaks}")
    return widths, reasons


def check_vector(call: PrimitiveCall) -> Plan | Decline:
    reasons, dist = element_loop_legality(call)
    if reasons:
        return Decline(*reasons)
    if isinstance(dist, Owned):
        return Decline(f"each thread visits the elements {dist.driver.name}'s layout gives "
                       "it one at a time, so there is no contiguous run to vectorize")
    fused = Emitter.fusable(call, call.operands[0].shape)
    widths, reasons = _vector_widths(call, fused)
    return verdict(reasons, [(w,) for w in widths], distribution=dist, fused=fused)


def check_scalar(call: PrimitiveCall) -> Plan | Decline:
    reasons, dist = element_loop_legality(call)
    fused = not isinstance(dist, Owned) and Emitter.fusable(call, call.operands[0].shape)
    return verdict(reasons, [(1,)], distribution=dist, fused=fused)


# --------------------------------------------------------------------------- lowering
def _convert(em: Emitter, value, dtype):
    return value if value.type == dtype else em.b.cast(value, dtype)


def computed_ops(call: PrimitiveCall) -> list[tuple]:
    """The (op, dtype) pairs ``call`` computes per element: its op in the destination's
    dtype, or each step of a fused chain in its own."""
    op = call.attrs.get("op", "copy")
    if op == FUSED:
        return [(name, dtype) for name, dtype, *_ in call.attrs["steps"]]
    return [(op, call.operands[0].dtype)]


def compute_steps(em: Emitter, steps, values: list, idx: list, step=None):
    """The last value of the fused chain ``steps`` over the source elements ``values``;
    ``step(op, dtype, values, idx)`` computes one op (default: :func:`compute_op`)."""
    step = step or functools.partial(compute_op, em)
    for name, dtype, *args in steps:
        values = [*values, step(name, dtype, [values[a] for a in args], idx)]
    return values[-1]


def compute(em: Emitter, call: PrimitiveCall, values: list, idx: list, step=None):
    """The destination element at domain indices ``idx`` from the source elements
    ``values`` (a copy's mask, last, is applied by :func:`write`); ``step`` as for
    :func:`compute_steps`."""
    op = call.attrs.get("op", "copy")
    if op == FUSED:
        return compute_steps(em, call.attrs["steps"], values, idx, step)
    step = step or functools.partial(compute_op, em, approx=call.config.get("approx", False))
    return step(op, call.operands[0].dtype, values, idx)


def compute_op(em: Emitter, op: str, dtype, values: list, idx: list, approx: bool = False):
    """One element of pointwise ``op`` computed in ``dtype`` from ``values``; ``approx``:
    a math function may take the target's fast approximate form (``config["approx"]``)."""
    if op in ("copy", "cast", "fill"):
        return _convert(em, values[0], dtype)
    if op == "iota":  # a 1-D tile: its domain index is the element's position
        return em.b.binary("add", _convert(em, values[0], dtype),
                           _convert(em, em.index(idx[-1]), dtype))
    if op == "select":
        cond, a, b = values
        if cond.type != i1:
            cond = em.b.cmp("ne", cond, em.const(0.0 if cond.type.is_float else 0, cond.type))
        return em.b.select(cond, _convert(em, a, dtype), _convert(em, b, dtype))
    if op in POINTWISE_RANDOM:  # seed and offset keep their integer types
        return philox.random_element(em, op, *values, dtype)
    if op in POINTWISE_COMPARISONS:
        common = promote(values[0].type, values[1].type)
        flag = em.b.cmp(op, *(_convert(em, v, common) for v in values))
        return _convert(em, flag, dtype)
    values = [_convert(em, v, dtype) for v in values]
    if op == "fma":
        a, b, c = values
        return em.b.binary("add", em.b.binary("mul", a, b), c)
    kind, name = _NATIVE[op]
    return em.b.unary(name, *values, approx=approx) if kind == "unary" \
        else em.b.binary(name, *values)


def write(em: Emitter, call: PrimitiveCall, value, values: list, idx: list,
          checked: bool) -> None:
    """Store ``value`` into the destination at ``idx``. Where a copy's mask (the last of
    the source elements ``values``) is False, a destination on chip takes ``other`` (a
    load: the whole tile is written) and a tensor is not written (a store). The source
    element was read either way: inside its tensor, which loop generation guarantees,
    reading is harmless, and a select vectorizes where a branch would not."""
    dst = call.operands[0]
    if call.primitive != "copy" or len(call.operands) < 3:
        em.store(dst, value, idx, checked)
        return
    mask = values[-1]
    if dst.role is not MemScope.GLOBAL:
        value = em.b.select(mask, _convert(em, value, dst.dtype), em.other(dst.dtype))
        em.store(dst, value, idx, checked)
        return
    _, then, orelse = em.b.if_(mask)
    with em.b.insert_into(then):
        em.store(dst, value, idx, checked)
        em.b.yield_()
    with em.b.insert_into(orelse):
        em.b.yield_()


def lower(call: PrimitiveCall, plan: Plan, em: Emitter, step=None) -> None:
    """The element loops of ``call``; ``step`` as for :func:`compute_steps` (a target
    family's own arithmetic for some ops)."""
    dst, srcs = call.operands[0], call.operands[1:]
    domain = list(dst.shape)
    if plan.details["fused"]:
        domain = [em.fuse(call.tiles)]
    inst = (1,) * (len(domain) - 1) + plan.shape[-1:]

    def element(idx, checked, outside):
        values = [em.fill_value(s) if s.name in outside else em.load(s, idx, checked)
                  for s in srcs]
        write(em, call, compute(em, call, values, idx, step), values, idx, checked)

    em.each([(box, lambda base, box=box, checked=checked, outside=outside: em.unrolled(
        base, box.step, lambda idx: element(idx, checked, outside)))
        for box, checked, outside in em.pieces(dst, srcs, domain, inst)])


def _rules(primitive: str):
    vector = Rule("vector", primitive, check_vector, lower, priority=0,
                  doc="innermost dim in unrolled chunks of W contiguous elements")
    scalar = Rule("scalar", primitive, check_scalar, lower, fallback=True,
                  doc="one element at a time")
    return register(vector), register(scalar)


VECTOR_COPY, SCALAR_COPY = _rules("copy")
VECTOR_POINTWISE, SCALAR_POINTWISE = _rules("pointwise")
