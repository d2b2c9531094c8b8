"""Buffers, regions and element access.

Storage per scope: global buffers are the launch's pointer + shape + strides; every other
buffer is stored by its layout over all of the layout's axes (``ir.addressing.Storage``),
row-major without a layout -- but in a per-thread kernel each thread's private part of a
layout over threads without its thread axes (``ir.storage.held_per_thread``). Shared
memory is one block per CTA; fragments once per team instance -- in the CTA block when
several units make one team, else per unit like locals; locals live once per unit. A
region is its parent plus start offsets. Addresses of on-chip buffers come from their
layout (``ir.addressing.Addressing``).

Flat accesses (``load_at`` ...: per-thread IR after the address-lowering pass) add their
offset to the root buffer's pointer (``load_vec_at``/``store_vec_at``: one access per
element of the run); ``bounds_check`` is the check a logical access does.
In SIMT mode every access of shared memory also goes through the race detector
(``race.check_access``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.addressing import Addressing, Storage, row_major_flat, row_major_indices
from tilejit.ir.ops_native import FIRST_INDEX, run_length
from tilejit.ir.storage import held_per_thread, team_copies
from tilejit.ir.types import MemScope, ScalarType, f16, u32
from tilejit.passes.dispatch import PER_THREAD

from . import abi, emit_native, race, types
from .types import I1, I8, I32, I64, VOID
from .units import threads_per_unit

class LlvmArith:
    """``ir.addressing.Arith`` on i64 LLVM values: the IRBuilder's own methods."""

    def __init__(self, b: ir.IRBuilder):
        self.b = b

    def __getattr__(self, name):
        return getattr(self.b, name)

    @staticmethod
    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)


@dataclass
class BufferRef:
    """A buffer in one scope. Global buffers index by ``strides``; others by ``addressing``;
    ``reshaped`` marks a layout-less view of a laid-out buffer (indices go through the
    parent's logical shape)."""

    ptr: ir.Value
    dtype: ScalarType
    scope: MemScope
    name: str
    shape: list                 # ints, or i64 values for run-time global dims
    strides: list | None = None
    addressing: Addressing | None = None
    reshaped: BufferRef | None = None
    arenas: tuple | None = None   # (data, sync) of the CTA holding it: another's (tj.remote)

    @property
    def storage(self) -> Storage:
        """The storage of the allocation this buffer (or view) lies in."""
        return self.reshaped.storage if self.reshaped is not None else self.addressing.storage

    def element_offset(self, b: ir.IRBuilder, indices):
        if self.reshaped is not None:
            arith = LlvmArith(b)
            flat = row_major_flat(arith, indices, self.shape)
            return self.reshaped.element_offset(b, row_major_indices(arith, flat,
                                                                     self.reshaped.shape))
        if self.addressing is not None:
            return self.addressing.element_offset(LlvmArith(b), indices, self.shape)
        offset = ir.Constant(I64, 0)
        for index, stride in zip(indices, self.strides):
            offset = b.add(offset, b.mul(index, stride if isinstance(stride, ir.Value)
                                         else ir.Constant(I64, stride)))
        return offset

    def element_ptr(self, b: ir.IRBuilder, indices):
        return self.element_ptr_at(b, self.element_offset(b, indices))

    def element_ptr_at(self, b: ir.IRBuilder, offset):
        """The element ``offset`` (i64) elements from the start of the storage."""
        return b.gep(self.ptr, [offset], inbounds=True,
                     source_etype=types.storage_type(self.dtype))


@dataclass
class RegionRef:
    parent: BufferRef
    starts: list
    sizes: tuple
    keep: tuple
    shape: list = field(init=False)

    def __post_init__(self):
        self.shape = [s for s, k in zip(self.sizes, self.keep) if k]

    def parent_indices(self, b: ir.IRBuilder, indices):
        rest, out = iter(indices), []
        for start, kept in zip(self.starts, self.keep):
            out.append(b.add(start, next(rest)) if kept else start)
        return out


def _name(op) -> str:
    return op.result.name_hint or f"{op.attrs['scope']} buffer allocated at line {op.loc.line}"


# ----------------------------------------------------------------------------- access
def element_ptr(em, op, ref, index_values):
    """Address of an element of ``ref``, bounds-checked in debug mode, and by default for
    native accesses (``buf[i]``). A tile primitive's accesses (in its ``single`` region) are
    not: loop generation masks the tiles that may run past a global buffer's end."""
    b = em.b
    indices = [types.to_i64(b, em[v], v.type) for v in index_values]
    if isinstance(ref, RegionRef):
        indices, ref = ref.parent_indices(b, indices), ref.parent
    native = em.state.single_team is None
    if em.options.debug or (em.options.bounds_check and native):
        _fail_outside(em, op, indices, [em.i64(d) for d in ref.shape], buffer=ref.name,
                      scope=str(ref.scope))
    return ref.element_ptr(b, indices), ref


def _fail_outside(em, op, indices, dims, **site) -> None:
    """Fail the launch (OUT_OF_BOUNDS at ``op``) unless every i64 index is below its dim
    (unsigned: a negative one fails too)."""
    b, ok = em.b, ir.Constant(I1, 1)
    for index, dim in zip(indices, dims):
        ok = b.and_(ok, b.icmp_unsigned("<", index, dim))
    site = em.mc.add_site("bounds", op, rank=len(indices), **site)
    em.fail_unless(ok, abi.OUT_OF_BOUNDS, site, indices, dims)


def _alias_tag(em, ref: BufferRef):
    """Marks an access as touching global or CTA-private memory (see ``metadata``)."""
    is_global = ref.scope is MemScope.GLOBAL
    return lambda instruction: em.mc.alias.tag(instruction, is_global)


def _element(em, op):
    """(pointer, buffer) of the element ``op`` accesses: through its logical indices, or
    at the flat offset of a root buffer that the address-lowering pass computed."""
    if op.name in FIRST_INDEX:
        return element_ptr(em, op, em[op.operands[0]], op.operands[FIRST_INDEX[op.name]:])
    ref, offset = em[op.operands[0]], op.operands[-1]
    return ref.element_ptr_at(em.b, types.to_i64(em.b, em[offset], offset.type)), ref


def emit_bounds_check(em, op):
    """A flat access's check of its logical indices (as :func:`element_ptr` checks)."""
    if not (em.options.debug or em.options.bounds_check):
        return []
    rank = len(op.operands) // 2
    values = [types.to_i64(em.b, em[v], v.type) for v in op.operands]
    _fail_outside(em, op, values[:rank], values[rank:], buffer=op.attrs["buffer"],
                  scope=str(op.attrs["scope"]), access=op.attrs["access"])
    return []


def emit_load(em, op):
    ptr, ref = _element(em, op)
    race.check_access(em, op, ref, ptr)
    return [types.load(em.b, ptr, ref.dtype, tag=_alias_tag(em, ref))]


def emit_store(em, op):
    ptr, ref = _element(em, op)
    race.check_access(em, op, ref, ptr)
    types.store(em.b, em[op.operands[1]], ptr, ref.dtype, tag=_alias_tag(em, ref))
    return []


def run(em, op):
    """(buffer, pointer to each element) of the run a ``load_vec_at``/``store_vec_at``
    moves (an ``ldmatrix_at``: its lane's matrix row): consecutive elements from its
    offset."""
    ref, offset, count = em[op.operands[0]], op.operands[1], run_length(op)
    b = em.b
    first = types.to_i64(b, em[offset], offset.type)
    ptrs = [ref.element_ptr_at(b, b.add(first, ir.Constant(I64, k))) for k in range(count)]
    if em.options.debug or em.options.bounds_check:
        # The CPU would not mind; a GPU's vector access faults off its size's alignment,
        # which the rule that made the access proved or checked at run time.
        size = ir.Constant(I64, count * ref.dtype.itemsize)
        address = b.ptrtoint(ptrs[0], I64)
        ok = b.icmp_unsigned("==", b.urem(address, size), ir.Constant(I64, 0))
        em.fail_unless(ok, abi.MISALIGNED, em.mc.add_site("misaligned", op), [address, size])
    for ptr in ptrs:
        race.check_access(em, op, ref, ptr)
    return ref, ptrs


def emit_load_vec(em, op):
    """One load per element: LLVM combines adjacent ones where the target has vectors."""
    ref, ptrs = run(em, op)
    return [types.load(em.b, ptr, ref.dtype, tag=_alias_tag(em, ref)) for ptr in ptrs]


def emit_store_vec(em, op):
    ref, ptrs = run(em, op)
    for value, ptr in zip(op.operands[2:], ptrs):
        types.store(em.b, em[value], ptr, ref.dtype, tag=_alias_tag(em, ref))
    return []


_NATIVE_ATOMICS = {  # (op, kind) -> atomicrmw operation
    ("add", "int"): "add", ("add", "uint"): "add", ("add", "float"): "fadd",
    ("max", "int"): "max", ("max", "uint"): "umax", ("max", "float"): "fmax",
    ("min", "int"): "min", ("min", "uint"): "umin", ("min", "float"): "fmin",
}
# The IR's memory orders as LLVM orderings. Every sync scope (cta, gpu, sys) is LLVM's
# default, system-wide one: the widest, so each is implemented.
_LLVM_ORDERS = {"relaxed": "monotonic", "acquire": "acquire", "release": "release",
                "acq_rel": "acq_rel"}
# A failed compare-and-swap only reads: its ordering may not release.
_CAS_FAILURE_ORDERS = {"relaxed": "monotonic", "acquire": "acquire", "release": "monotonic",
                       "acq_rel": "acquire"}


def emit_atomic(em, op):
    ptr, ref = _element(em, op)
    race.check_access(em, op, ref, ptr)
    t, name, b = ref.dtype, op.attrs["op"], em.b
    value = em[op.operands[1]]
    if name == "add":  # every thread the unit stands for adds its value
        value = _scaled(em, value, t, threads_per_unit(em))
    if ref.scope is not MemScope.GLOBAL:
        # Shared and local memory belong to one CTA, whose units run on one OS thread.
        tag = _alias_tag(em, ref)
        old = types.load(b, ptr, t, tag=tag)
        types.store(b, _combine(em, name, old, value, t), ptr, t, tag=tag)
        return [old]
    order = op.attrs["order"]
    if t in types.NARROW_FLOATS:
        return [_cas_loop(em, ptr, lambda old: _combine(em, name, old, value, t), t, order)]
    native = "xchg" if name == "xchg" else _NATIVE_ATOMICS[(name, t.kind)]
    return [b.atomic_rmw(native, ptr, value, _LLVM_ORDERS[order])]


def emit_atomic_cas(em, op):
    """Compare-and-swap: ``value`` replaces the element where it equals ``compare`` (bit for
    bit, as CUDA's atomicCAS compares); the old element either way. Not scaled by the threads
    a unit stands for: once the first has swapped, the others' compares fail (unless
    ``compare == value``, when a swap changes nothing)."""
    ptr, ref = _element(em, op)
    race.check_access(em, op, ref, ptr)
    t, b = ref.dtype, em.b
    compare, value = em[op.operands[1]], em[op.operands[2]]
    if ref.scope is not MemScope.GLOBAL:  # one OS thread runs the CTA (see emit_atomic)
        tag = _alias_tag(em, ref)
        old = types.load(b, ptr, t, tag=tag)
        same = b.icmp_unsigned("==", types.int_bits(b, old), types.int_bits(b, compare))
        types.store(b, b.select(same, value, old), ptr, t, tag=tag)
        return [old]
    order, bits = op.attrs["order"], ir.IntType(t.itemsize * 8)

    def as_bits(v):  # cmpxchg takes integers: floats swap their bits
        return v if v.type == bits else b.bitcast(v, bits)

    pair = b.cmpxchg(ptr, as_bits(compare), as_bits(value), _LLVM_ORDERS[order],
                     _CAS_FAILURE_ORDERS[order])
    old = b.extract_value(pair, 0)
    register = types.register_type(t)
    return [old if register == bits else b.bitcast(old, register)]


def _scaled(em, value, t: ScalarType, threads):
    if isinstance(threads, int) and threads == 1:
        return value
    b = em.b
    if t.is_float:
        wide = types.widen(b, value, t)
        count = (ir.Constant(wide.type, float(threads)) if isinstance(threads, int)
                 else b.uitofp(threads, wide.type))
        return types.narrow(b, b.fmul(wide, count), t)
    count = ir.Constant(value.type, threads) if isinstance(threads, int) else \
        emit_native.cast(em, threads, u32, t)
    return b.mul(value, count)


def _combine(em, name: str, old, value, t: ScalarType):
    if name == "xchg":
        return value
    b = em.b
    if t.is_float:
        wide_old, wide_value = types.widen(b, old, t), types.widen(b, value, t)
        return types.narrow(b, emit_native.FLOAT_BINARY[name](em, wide_old, wide_value), t)
    return emit_native.INT_BINARY[name](em, old, value, t.kind == "int")


def _cas_loop(em, ptr, combine, t: ScalarType, order: str):
    """An atomic read-modify-write of a narrow float through compare-and-swap of its bits."""
    b = em.b
    bits_type = types.storage_type(t) if t != f16 else ir.IntType(16)

    def to_bits(v):
        return b.bitcast(v, bits_type) if v.type != bits_type else v

    def from_bits(v):
        reg = types.register_type(t)
        return b.bitcast(v, reg) if reg != bits_type else v

    start = b.load_atomic(ptr, "monotonic", t.itemsize, typ=bits_type)
    before = b.block
    loop = b.append_basic_block("cas")
    done = b.append_basic_block("cas.done")
    b.branch(loop)
    b.position_at_end(loop)
    seen = b.phi(bits_type)
    seen.add_incoming(start, before)
    new = to_bits(combine(from_bits(seen)))
    pair = b.cmpxchg(ptr, seen, new, _LLVM_ORDERS[order], _CAS_FAILURE_ORDERS[order])
    seen.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return from_bits(seen)


# ----------------------------------------------------------------------------- buffers
def emit_alloc(em, op):
    scope, dtype, shape = op.attrs["scope"], op.attrs["dtype"], tuple(op.attrs["shape"])
    layout = op.attrs["layout"]
    units, frame = em.mc.units, em.frame
    # One unit per thread (SIMT mode): it holds only its own elements of a layout over threads.
    private = (em.mc.kernel.attrs.get("distribution") == PER_THREAD
               and held_per_thread(scope, layout))
    addressing = (Addressing.row_major(shape) if layout is None
                  else Addressing.from_layout(layout, shape, thread_private=private))
    nbytes = addressing.span * dtype.itemsize  # padding and thread axes take room too
    if scope is MemScope.SHARED:   # per_team copies follow each other; offsets reach them
        nbytes *= team_copies(op.attrs["per_team"], em.mc.kernel.attrs["num_warps"])
    if scope is MemScope.SHARED and op.attrs["offset"] is not None:
        ptr = em.byte_ptr(frame.data, _planned_offset(em, op, nbytes))
    elif scope in (MemScope.SHARED, MemScope.TMEM):
        # IR the shared-memory plan has not seen; tensor memory in the CPU's own lowering
        # (team_once: plain CTA memory; per thread ``lower-tmem`` allocates it instead)
        ptr = em.byte_ptr(frame.data, em.mc.data.reserve(nbytes, 64, _describe_alloc(op)))
    elif scope is MemScope.FRAGMENT and units.kind < em.state.team:
        # Several units make one team instance: they share one copy of the fragment.
        team = em.state.team
        instance = em.b.udiv(frame.unit, ir.Constant(I32, units.units_per_team(team)))
        ptr = _arena_copy(em, op, nbytes, units.instances(team), instance)
    elif scope in (MemScope.FRAGMENT, MemScope.LOCAL) and frame.take_stack(nbytes):
        ptr = frame.alloca(types.storage_type(dtype), addressing.span)
        if em.options.debug:
            fill_bytes(em.b, em.mc, ptr, nbytes)
    elif scope in (MemScope.FRAGMENT, MemScope.LOCAL):
        # Too big for a thread's stack: one copy per unit in the CTA's heap arena.
        ptr = _arena_copy(em, op, nbytes, units.count, frame.unit)
    else:
        raise CompilationError(f"{scope} memory does not exist on the CPU target")
    return [BufferRef(ptr, dtype, scope, _name(op), list(shape), addressing=addressing)]


def _planned_offset(em, op, nbytes: int) -> int:
    """Where the plan put a shared buffer: in the block of ``shared_bytes`` that
    ``codegen`` reserves at the start of the CTA's data arena."""
    offset, planned = op.attrs["offset"], em.mc.kernel.attrs["shared_bytes"] or 0
    if offset + nbytes > planned:
        raise CompilationError(f"internal compiler error: {_describe_alloc(op)} needs {nbytes} "
                               f"bytes at offset {offset}, past the {planned} bytes the "
                               "shared-memory plan reserved")
    return offset


def _describe_alloc(op, copies: int = 1) -> str:
    scope, shape = op.attrs["scope"], list(op.attrs["shape"])
    each = f" ({copies} copies: one per thread or team)" if copies > 1 else ""
    name = f" {op.result.name_hint!r}" if op.result.name_hint else ""
    return f"the {scope} buffer{name} of shape {shape}{each}"


def _arena_copy(em, op, nbytes: int, copies: int, index: ir.Value):
    """Copy ``index`` of ``copies`` ``nbytes`` blocks reserved in the CTA's data arena."""
    nbytes = -(-nbytes // 64) * 64
    base = em.mc.data.reserve(nbytes * copies, 64, _describe_alloc(op, copies))
    offset = em.b.add(ir.Constant(I64, base),
                      em.b.mul(em.b.zext(index, I64), ir.Constant(I64, nbytes)))
    return em.byte_ptr(em.frame.data, offset)


def fill_bytes(b: ir.IRBuilder, mc, ptr, nbytes, byte: int = 0xFF) -> None:
    """memset; 0xFF bytes are a NaN in every float format (debug-mode fresh memory)."""
    memset = mc.function("llvm.memset.p0.i64", VOID, [types.PTR, I8, I64, I1])
    nbytes = nbytes if isinstance(nbytes, ir.Value) else ir.Constant(I64, nbytes)
    b.call(memset, [ptr, ir.Constant(I8, byte), nbytes, ir.Constant(I1, 0)])


def emit_view(em, op):
    src: BufferRef = em[op.operands[0]]
    shape, layout = list(op.attrs["shape"]), op.attrs["layout"]
    name = op.result.name_hint or f"view of {src.name}"
    if layout is not None:
        storage = None if src.scope is MemScope.GLOBAL else src.storage
        return [BufferRef(src.ptr, src.dtype, src.scope, name, shape,
                          addressing=Addressing.from_layout(layout, shape, storage),
                          arenas=src.arenas)]
    if src.addressing == Addressing.row_major(tuple(src.shape)):
        return [BufferRef(src.ptr, src.dtype, src.scope, name, shape,
                          addressing=Addressing.row_major(tuple(shape)), arenas=src.arenas)]
    return [BufferRef(src.ptr, src.dtype, src.scope, name, shape, reshaped=src,
                      arenas=src.arenas)]


def emit_region(em, op):
    parent = em[op.operands[0]]
    starts = [types.to_i64(em.b, em[v], v.type) for v in op.operands[1:]]
    region = RegionRef(parent, starts, op.attrs["sizes"], op.attrs["keep"])
    if (em.options.debug or em.options.bounds_check) and isinstance(parent, BufferRef) \
            and parent.scope is not MemScope.GLOBAL \
            and any(v not in em.consts for v in op.operands[1:]):
        _check_region(em, op, region)
    return [region]


def _check_region(em, op, region: RegionRef) -> None:
    """An on-chip window with a run-time start lies inside its buffer (a tile primitive on
    it is not masked, as one on a tensor is: its accesses would land in other buffers)."""
    b, ok, probes = em.b, ir.Constant(I1, 1), []
    for start, size, dim in zip(region.starts, region.sizes, region.parent.shape):
        last = b.add(start, ir.Constant(I64, size - 1))
        ok = b.and_(ok, b.icmp_unsigned("<", last, ir.Constant(I64, dim)))
        ok = b.and_(ok, b.icmp_signed(">=", start, ir.Constant(I64, 0)))
        probes.append(b.select(b.icmp_signed("<", start, ir.Constant(I64, 0)), start, last))
    site = em.mc.add_site("bounds", op, buffer=region.parent.name,
                          scope=str(region.parent.scope), rank=len(probes))
    em.fail_unless(ok, abi.OUT_OF_BOUNDS, site, probes,
                   [em.i64(d) for d in region.parent.shape])


def emit_buffer_dim(em, op):
    return [em.i64(em[op.operands[0]].shape[op.attrs["dim"]])]


def emit_buffer_address(em, op):
    return [em.b.ptrtoint(em[op.operands[0]].ptr, I64)]


def emit_buffer_stride(em, op):
    ref, dim = em[op.operands[0]], op.attrs["dim"]
    if isinstance(ref, RegionRef):
        dim = [d for d, kept in enumerate(ref.keep) if kept][dim]
        ref = ref.parent
    if ref.strides is not None:
        return [em.i64(ref.strides[dim])]
    addressing = ref.addressing
    if ref.reshaped is None and addressing.dims is not None and addressing.swizzle is None \
            and len(addressing.dims[dim]) <= 1:
        return [ir.Constant(I64, addressing.dims[dim][0][1] if addressing.dims[dim] else 0)]
    raise CompilationError(f"dimension {dim} of {ref.name} has no single stride in its layout")


HANDLERS = {
    "alloc": emit_alloc, "view": emit_view, "region": emit_region, "load": emit_load,
    "store": emit_store, "atomic": emit_atomic, "atomic_cas": emit_atomic_cas,
    "load_at": emit_load, "store_at": emit_store, "atomic_at": emit_atomic,
    "atomic_cas_at": emit_atomic_cas, "load_vec_at": emit_load_vec,
    "store_vec_at": emit_store_vec, "bounds_check": emit_bounds_check,
    "buffer_dim": emit_buffer_dim, "buffer_stride": emit_buffer_stride,
    "buffer_address": emit_buffer_address,
}
