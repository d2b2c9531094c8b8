"""``vec``: per thread, a copy or pointwise op between a tile laid out over threads and a
tensor region, moving each run of ``count`` consecutive elements of the last dim in one
vector access (``load_vec``/``store_vec``: a GPU's 128-bit ``ld.global.v4.f32``); or a
copy of a register tile into shared memory (``st.shared.v2.f32``: a wgmma accumulator's
pairs of columns staged for a TMA store).

Tried only per thread, where the ``Owned`` distribution gives each thread the elements
its layout places on it: the blocked layout of layout inference gives a thread runs of
``vector_bytes`` contiguous elements of the last dim. Legal only when no run can be
misaddressed:

* the tile's layout gives each thread runs of ``count`` (a power of two, at most 16
  bytes) consecutive elements of the last dim, each starting at a multiple of ``count``
  in the tile (every other step of the thread's last-dim index is one too);
* the tensor is a kernel argument the runtime proved ``aligned16`` (its data pointer),
  with unit stride in its last dim, and the region keeps that dim; a static region start
  in the last dim is a multiple of ``count`` (else every run is misaligned: declined);
* a copy moves between the tensor and a tile laid out over threads, unmasked and of the
  tensor's shape; a pointwise op writes the tensor, the first source laid out over
  threads leading -- the fused stores of softmax and layer norm.
* a copy into shared memory: the buffer's storage offsets, known at compile time
  (``matrix_access.rows_in_place``, through any swizzle), put every run of ``count`` of
  the last dim at consecutive offsets starting at a multiple of ``count``; nothing is
  left to run time.

What the compiler cannot prove it checks per run at run time: a run goes through the
vector access only when its last element is inside the tensor (its first is then too)
and its flat offset is a multiple of ``count`` -- strides the signature does not fix,
unless ``div16`` says they are multiples of 16, and a run-time region start take part.
Any other run (the ragged end of a row, a row of odd length) moves element by element
with the ``scalar`` family's masking.
"""
from __future__ import annotations

from ...ir.core import Operation
from ...ir.ops_native import VECTOR_ACCESS_BYTES, vector_count_problem
from ...ir.types import MemScope, i64
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import Owned
from ..loopgen import Box, Emitter
from .elementwise import compute, element_loop_legality, write
from .matrix_access import rows_in_place

__all__ = ["VEC_COPY", "VEC_POINTWISE", "alignment_checks", "run_aligned"]

REGISTER_ROLES = (MemScope.FRAGMENT, MemScope.LOCAL)


def _tensor_side(call: PrimitiveCall) -> tuple[Operand | None, str | None]:
    """(the tensor operand a vector access reaches, why there is none usable)."""
    dst, srcs = call.operands[0], call.operands[1:]
    if call.primitive == "copy" and (len(srcs) > 1 or call.attrs.get("other") is not None):
        return None, "a masked copy (mask=/other=) moves element by element"
    if dst.role is MemScope.GLOBAL:
        return dst, None
    if call.primitive == "copy" and dst.role is MemScope.SHARED \
            and srcs[0].role in REGISTER_ROLES:
        return dst, None
    if call.primitive == "copy" and dst.role in REGISTER_ROLES \
            and srcs[0].role is MemScope.GLOBAL:
        tensor = srcs[0]
        if tuple(tensor.shape) != tuple(dst.shape):
            return None, f"{tensor.name} {list(tensor.shape)} broadcasts to dst " \
                         f"{list(dst.shape)}: its runs are not dst's"
        return tensor, None
    return None, ("neither a copy from a tensor into registers nor a store of registers "
                  "into a tensor or shared memory")


def _run_count(call: PrimitiveCall, dist: Owned, tensor: Operand) -> tuple[int, str | None]:
    """(the elements of each of a thread's runs of the last dim, why it holds none)."""
    extent = dist.run_extent()
    if extent == 1:
        return 0, (f"{dist.driver.name}'s layout {dist.driver.layout} gives each thread "
                   "single elements of the last dim, no runs")
    widest = min(VECTOR_ACCESS_BYTES, call.context.vector_bytes) // tensor.dtype.itemsize
    count = 1
    while count * 2 <= min(extent, widest) and extent % (count * 2) == 0:
        count *= 2
    problem = vector_count_problem(tensor.dtype, count)
    if problem:
        return 0, (f"{dist.driver.name}'s runs of {extent} {tensor.dtype} elements: "
                   f"{problem}")
    misaligned = dist.misaligned_runs(count)
    return (0, misaligned) if misaligned else (count, None)


def alignment_checks(call: PrimitiveCall, tensor: Operand,
                     count: int) -> tuple[tuple, str | None]:
    """(the tensor dims whose start or stride leaves a run's alignment to a run-time check,
    why no run can be aligned)."""
    if tensor.role is MemScope.SHARED:
        return (), rows_in_place(tensor, count)
    value, buffer = tensor.value, tensor.buffer_type
    region = value.owner if tensor.is_region else None
    root = region.operands[0] if region is not None else value
    if isinstance(root.owner, Operation):
        return (), f"{tensor.name} is not a region of a kernel argument (a view of one)"
    flags = call.arg_flags.get(root, ())
    reasons = []
    if "aligned16" not in flags:
        reasons.append(f"{tensor.name}'s tensor is not known to start 16-byte aligned "
                       f"(its specialization: {', '.join(flags) or 'none'})")
    if buffer.strides is None or buffer.strides[-1] != 1:
        reasons.append(f"{tensor.name}'s last dim has no static unit stride")
    if region is not None and not region.attrs["keep"][-1]:
        reasons.append(f"{tensor.name} indexes its tensor's last dim with an integer: its "
                       "runs lie along another dim")
    if reasons:
        return (), "; ".join(reasons)
    last = buffer.rank - 1
    checked = [d for d, stride in enumerate(buffer.strides[:-1])
               if not (isinstance(stride, int) and stride % count == 0)
               and not (stride is None and "div16" in flags)]
    start = region.operands[1 + last] if region is not None else None
    static = getattr(start.owner, "attrs", {}).get("value") if start is not None else 0
    if isinstance(static, int) and static % count:
        return (), (f"{tensor.name} starts at index {static} of its tensor's last dim, not a "
                    f"multiple of {count}: no run of {count} is 16-byte aligned")
    return tuple(checked + ([last] if static is None else [])), None


def check_vec(call: PrimitiveCall) -> Plan | Decline:
    tensor, why = _tensor_side(call)
    if why:
        return Decline(why)
    reasons, dist = element_loop_legality(call)
    if reasons:
        return Decline(*reasons)
    if not isinstance(dist, Owned):
        return Decline(f"no operand of {tensor.name}'s shape is laid out over threads "
                       f"(distribution: {dist}), so no thread holds runs of it")
    count, why = _run_count(call, dist, tensor)
    if why:
        return Decline(why)
    checked, why = alignment_checks(call, tensor, count)
    if why:
        return Decline(why)
    return Plan([(count,)], {"distribution": dist, "runs": dist.by_runs(count),
                             "tensor": tensor.name, "checked_dims": checked})


# --------------------------------------------------------------------------- lowering
def run_aligned(em: Emitter, tensor: Operand, dims: tuple, idx: list, count: int):
    """Whether the flat offset of the run at ``idx`` is a multiple of ``count``, summing
    the terms of ``dims`` alone (the others are multiples of ``count``); None without such
    terms. Masking the low bits is exact even where the i64 sum wraps."""
    if not dims:
        return None
    region = tensor.value.owner if tensor.is_region else None
    buf = region.operands[0] if region is not None else tensor.value
    last, b = len(buf.type.shape) - 1, em.b
    # Per dim of the tensor: the run's index as its parts (region start, index in tile).
    if region is None:
        parts = [[i] for i in idx]
    else:
        inner = iter(idx)
        parts = [[start, next(inner)] if kept else [start]
                 for start, kept in zip(region.operands[1:], region.attrs["keep"])]
    parts[last] = parts[last][:1] if region is not None else []  # the tile's runs: aligned

    def wide(x):
        if isinstance(x, int):
            return em.const(x, i64)
        return x if x.type == i64 else b.cast(x, i64)

    total = em.const(0, i64)
    for d in dims:
        stride = em.const(1, i64) if d == last else b.buffer_stride(buf, d)
        for part in parts[d]:
            total = b.binary("add", total, b.binary("mul", wide(part), stride))
    low = b.binary("and", total, em.const(count - 1, i64))
    return b.cmp("eq", low, em.const(0, i64))


def lower_vec(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, srcs = call.operands[0], call.operands[1:]
    tensor, count = call[plan.details["tensor"]], plan.shape[0]

    def run_indices(idx: list) -> list[list]:
        return [[*idx[:-1], em.add(idx[-1], k)] for k in range(count)]

    def vector(idx: list) -> None:
        elements = run_indices(idx)
        if tensor is dst:
            run = []
            for element in elements:
                # sources read as the scalar family reads them: a tensor past its end
                # (a layer norm's weight) as the fill value
                values = [em.load(s, element, checked=True) for s in srcs]
                value = compute(em, call, values, element)
                run.append(value if value.type == dst.dtype else em.b.cast(value, dst.dtype))
            em.b.create("store_vec", (dst.value, *run, *map(em.index, idx)),
                        {"count": count})
            return
        loaded = em.b.create("load_vec", (tensor.value, *map(em.index, idx)),
                             {"count": count}).results
        for value, element in zip(loaded, elements):
            em.store(dst, compute(em, call, [value], element), element)

    def elementwise(idx: list) -> None:
        for element in run_indices(idx):
            values = [em.load(s, element, checked=True) for s in srcs]
            write(em, call, compute(em, call, values, element), values, element, True)

    def run(idx: list) -> None:
        last = [*idx[:-1], em.add(idx[-1], count - 1)]
        ok = em.all_of([c for c in (em.in_bounds(tensor, last),
                                    run_aligned(em, tensor, plan.details["checked_dims"],
                                                idx, count)) if c is not None])
        if ok is None:
            vector(idx)
            return
        _, then, orelse = em.b.if_(ok)
        for block, body in ((then, vector), (orelse, elementwise)):
            with em.b.insert_into(block):
                body(idx)
                em.b.yield_()

    plan.details["runs"].emit(em, [(Box.full(list(dst.shape)), run)])


def _rule(primitive: str) -> Rule:
    # After ``vector`` (which declines Owned calls) and before the ``scalar`` fallback.
    return register(Rule("vec", primitive, check_vec, lower_vec, priority=-1,
                         distributions=(PER_THREAD,),
                         doc="per thread: runs of count elements in one vector access"))


VEC_COPY, VEC_POINTWISE = _rule("copy"), _rule("pointwise")
