"""Buffers, regions and element access.

Storage per scope: global buffers are the launch's pointer + shape + strides; every other
buffer is stored by its layout over all of the layout's axes (:class:`Storage`: ``m``
innermost, then thread, partition, ... axes), row-major without a layout. Shared memory is
one block per CTA; fragments once per team instance -- in the CTA block when several units
make one team, else per unit like locals; locals live once per unit. A region is its
parent plus start offsets.

Addresses come from the layout only: :class:`Addressing` groups the layout's shard by the
buffer shape (``TileLayout.group_iters``), so each logical dimension owns a list of
mixed-radix iters whose storage strides give the element offset; ``ComposeLayout`` adds its
XOR swizzle to the result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llvmlite import ir

from tilejit.errors import CompilationError, LayoutError
from tilejit.ir.storage import layout_reach, swizzle_period
from tilejit.ir.types import MemScope, ScalarType, f16, u32
from tilejit.layout import ComposeLayout

from . import abi, emit_native, types
from .types import I1, I8, I32, I64, VOID
from .units import threads_per_unit

Iters = tuple[tuple[int, int], ...]  # (extent, storage stride) outer -> inner


@dataclass(frozen=True)
class Storage:
    """The linear storage of an on-chip buffer: every axis its layout reaches (``m``
    innermost, then the others in order of appearance) gets a ``[low, high]`` range of
    coordinates and a weight, so a location is ``sum(weight * (coordinate - low))``.

    The CPU has no lanes, warps or partitions of its own, so a tile laid out over them is
    stored over all of its axes; a view reinterprets the buffer's storage, never its own.
    Replicas are copies of the base location: only the base is stored.
    """

    axes: tuple[tuple[str, int, int, int], ...]  # (axis, low, high, weight)

    @classmethod
    def of(cls, reach: dict[str, tuple[int, int]]) -> Storage:
        """The storage over ``reach`` (``ir.storage.layout_reach``: ``m`` starts at 0)."""
        axes, weight = [], 1
        for name in sorted(reach, key=lambda a: a != "m"):  # m innermost
            low, high = reach[name]
            axes.append((name, low, high, weight))
            weight *= high - low + 1
        return cls(tuple(axes))

    @property
    def size(self) -> int:
        """Elements the storage holds."""
        return math.prod(high - low + 1 for _, low, high, _ in self.axes) if self.axes else 1

    def reach(self, name: str) -> tuple[int, int]:
        """The coordinates held on axis ``name`` (only 0 on an axis the storage lacks)."""
        return next(((low, high) for axis, low, high, _ in self.axes if axis == name), (0, 0))

    def weight(self, name: str) -> int:
        """0 for an axis the storage lacks (a view only ever places coordinate 0 there)."""
        return next((weight for axis, _, _, weight in self.axes if axis == name), 0)


@dataclass(frozen=True)
class Addressing:
    """Logical index -> element offset: per-dimension iters, a constant, a swizzle."""

    dims: tuple[Iters, ...] | None      # None: split the row-major flat index by ``flat``
    storage: Storage                    # the allocation's storage (a view shares its buffer's)
    flat: Iters | None = None
    offset: int = 0
    swizzle: tuple[int, int, int] | None = None  # (per_element, swizzle_len, atom_len)

    @property
    def span(self) -> int:
        """Elements the buffer's storage holds."""
        return self.storage.size

    @classmethod
    def row_major(cls, shape) -> Addressing:
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        count = math.prod(shape)
        return cls(tuple(((n, s),) for n, s in zip(shape, strides)),
                   Storage.of({"m": (0, count - 1)}))

    @classmethod
    def from_layout(cls, layout, shape, storage: Storage | None = None) -> Addressing:
        """The addressing of a buffer laid out by ``layout``; ``storage``: the storage of
        the buffer a view reinterprets (default: a buffer of its own)."""
        tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
        if tile.size() != math.prod(shape):
            raise CompilationError(f"layout {layout} has {tile.size()} elements, the buffer "
                                   f"shape {list(shape)} has {math.prod(shape)}")
        reach = layout_reach(tile)
        swizzle = None
        if isinstance(layout, ComposeLayout):
            swizzle = (layout.per_element, layout.swizzle_len, layout.atom_len)
            if set(reach) != {"m"} or reach["m"][0] < 0:
                raise CompilationError(f"the swizzled layout {layout} reaches "
                                       f"{_describe_reach(reach)}: a swizzle permutes "
                                       "non-negative memory offsets (axis m) only")
            block = swizzle_period(layout)
            reach["m"] = (0, -(-(reach["m"][1] + 1) // block) * block - 1)
        if storage is None:
            storage = Storage.of(reach)
        else:
            _check_within(layout, reach, storage)

        def stored(iters) -> Iters:
            return tuple((it.extent, it.stride * storage.weight(it.axis.name)) for it in iters)
        try:
            dims, flat = tuple(stored(g) for g in tile.group_iters(shape)), None
        except LayoutError:  # iters straddle dimensions: go through the flat index
            dims, flat = None, stored(tile.shard)
        offset = sum(weight * (tile.offset.get(name, 0) - low)
                     for name, low, _, weight in storage.axes)
        return cls(dims, storage, flat, offset, swizzle)

    def element_offset(self, b: ir.IRBuilder, indices, shape):
        if self.dims is None:
            m = _digits(b, _row_major_flat(b, indices, shape), self.flat)
        else:
            m = ir.Constant(I64, 0)
            for index, iters in zip(indices, self.dims):
                m = b.add(m, _digits(b, index, iters))
        if self.offset:
            m = b.add(m, ir.Constant(I64, self.offset))
        return m if self.swizzle is None else _swizzle(b, m, *self.swizzle)


def _describe_reach(reach) -> str:
    return ", ".join(f"{name} [{low}, {high}]" for name, (low, high) in reach.items())


def _check_within(layout, reach, storage: Storage) -> None:
    for name, (low, high) in reach.items():
        stored_low, stored_high = storage.reach(name)
        if low < stored_low or high > stored_high:
            raise CompilationError(f"the view's layout {layout} reaches {name} [{low}, "
                                   f"{high}], outside the viewed buffer's [{stored_low}, "
                                   f"{stored_high}]")


def _digits(b, index, iters: Iters):
    """Sum of digit * stride of ``index`` split over ``iters``; the outermost absorbs the rest."""
    total = ir.Constant(I64, 0)
    for extent, stride in reversed(iters[1:]):
        c = ir.Constant(I64, extent)
        if stride:
            total = b.add(total, b.mul(b.urem(index, c), ir.Constant(I64, stride)))
        index = b.udiv(index, c)
    if iters and iters[0][1]:
        total = b.add(total, b.mul(index, ir.Constant(I64, iters[0][1])))
    return total


def _swizzle(b, m, per_element: int, swizzle_len: int, atom_len: int):
    low = b.and_(m, ir.Constant(I64, (1 << per_element) - 1))
    chunk = b.lshr(m, ir.Constant(I64, per_element))
    flip = b.and_(chunk, ir.Constant(I64, ((1 << swizzle_len) - 1) << atom_len))
    chunk = b.xor(chunk, b.lshr(flip, ir.Constant(I64, atom_len)))
    return b.or_(b.shl(chunk, ir.Constant(I64, per_element)), low)


def _row_major_flat(b, indices, shape):
    flat = ir.Constant(I64, 0)
    for index, extent in zip(indices, shape):
        flat = b.add(b.mul(flat, ir.Constant(I64, extent)), index)
    return flat


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

    @property
    def storage(self) -> Storage:
        """The storage of the allocation this buffer (or view) lies in."""
        return self.reshaped.storage if self.reshaped is not None else self.addressing.storage

    def element_offset(self, b: ir.IRBuilder, indices):
        if self.reshaped is not None:
            flat = _row_major_flat(b, indices, self.shape)
            parent_indices = []
            for extent in reversed(self.reshaped.shape):
                parent_indices.append(b.urem(flat, ir.Constant(I64, extent)))
                flat = b.udiv(flat, ir.Constant(I64, extent))
            return self.reshaped.element_offset(b, parent_indices[::-1])
        if self.addressing is not None:
            return self.addressing.element_offset(b, indices, self.shape)
        offset = ir.Constant(I64, 0)
        for index, stride in zip(indices, self.strides):
            offset = b.add(offset, b.mul(index, stride if isinstance(stride, ir.Value)
                                         else ir.Constant(I64, stride)))
        return offset

    def element_ptr(self, b: ir.IRBuilder, indices):
        return b.gep(self.ptr, [self.element_offset(b, indices)], inbounds=True,
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
        dims = [em.i64(d) for d in ref.shape]
        ok = ir.Constant(I1, 1)
        for index, dim in zip(indices, dims):
            ok = b.and_(ok, b.icmp_unsigned("<", index, dim))
        site = em.mc.add_site("bounds", op, buffer=ref.name, scope=str(ref.scope),
                              rank=len(indices))
        em.fail_unless(ok, abi.OUT_OF_BOUNDS, site, indices, dims)
    return ref.element_ptr(b, indices), ref


def _alias_tag(em, ref: BufferRef):
    """Marks an access as touching global or CTA-private memory (see ``metadata``)."""
    is_global = ref.scope is MemScope.GLOBAL
    return lambda instruction: em.mc.alias.tag(instruction, is_global)


def emit_load(em, op):
    ptr, ref = element_ptr(em, op, em[op.operands[0]], op.operands[1:])
    return [types.load(em.b, ptr, ref.dtype, tag=_alias_tag(em, ref))]


def emit_store(em, op):
    ptr, ref = element_ptr(em, op, em[op.operands[0]], op.operands[2:])
    types.store(em.b, em[op.operands[1]], ptr, ref.dtype, tag=_alias_tag(em, ref))
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
    ptr, ref = element_ptr(em, op, em[op.operands[0]], op.operands[2:])
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
    ptr, ref = element_ptr(em, op, em[op.operands[0]], op.operands[3:])
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
    addressing = (Addressing.row_major(shape) if layout is None
                  else Addressing.from_layout(layout, shape))
    nbytes = addressing.span * dtype.itemsize  # padding and thread axes take room too
    if scope is MemScope.SHARED and op.attrs["offset"] is not None:
        ptr = em.byte_ptr(frame.data, _planned_offset(em, op, nbytes))
    elif scope is MemScope.SHARED:   # IR the shared-memory plan has not seen
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
                          addressing=Addressing.from_layout(layout, shape, storage))]
    if src.addressing == Addressing.row_major(tuple(src.shape)):
        return [BufferRef(src.ptr, src.dtype, src.scope, name, shape,
                          addressing=Addressing.row_major(tuple(shape)))]
    return [BufferRef(src.ptr, src.dtype, src.scope, name, shape, reshaped=src)]


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
    "buffer_dim": emit_buffer_dim, "buffer_stride": emit_buffer_stride,
}
