"""Memory semantics: allocation, views, slicing into regions, element access, barriers.

Slicing ``A[i0:i0 + BM, :]`` makes a ``region``: starts may be run-time values, sizes must
be compile-time. A size is ``stop - start`` simplified symbolically over the IR (both
bounds are written as linear forms over the run-time values they add up), so
``x[base:base + BLOCK]`` and ``A[k * BK:(k + 1) * BK]`` have static sizes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation, Value
from tilejit.ir.ops_native import MEMORY_ORDERS, SYNC_SCOPES
from tilejit.ir.types import BarrierType, BufferType, MemScope, RegionType, ScalarType, i32
from tilejit.layout.hw_nvidia import TMEM_COLS, TMEM_LANES

from .language import BoundBuiltin, builtin
from .tile_shapes import IndexedTile
from .values import (BarrierRef, ElementRef, describe, is_int_number, is_number, is_scalar,
                     is_tile, is_value)

if TYPE_CHECKING:
    from .semantics import Semantics

__all__ = ["MemorySemantics", "linear_form"]


def _layout_classes():
    from tilejit.layout import ComposeLayout, TileLayout
    return TileLayout, ComposeLayout


def linear_form(x) -> tuple[dict, int] | None:
    """``x`` as ``(sum of coeff * value, constant)`` over IR values, or None for non-ints."""
    if is_int_number(x) and not isinstance(x, bool):
        return {}, int(x)
    if not (is_scalar(x) and x.type.is_int):
        return None
    op = x.owner if isinstance(x.owner, Operation) else None
    if op is not None and op.name == "const":
        return {}, int(op.attrs["value"])
    if op is not None and op.name == "cast" and op.operands[0].type.is_int:
        return linear_form(op.operands[0])
    if op is not None and op.name == "binary" and op.attrs["op"] in ("add", "sub", "mul"):
        lhs, rhs = (linear_form(v) for v in op.operands)
        if op.attrs["op"] == "mul":
            if not lhs[0]:
                return {k: c * lhs[1] for k, c in rhs[0].items()}, rhs[1] * lhs[1]
            if not rhs[0]:
                return {k: c * rhs[1] for k, c in lhs[0].items()}, lhs[1] * rhs[1]
        else:
            sign = 1 if op.attrs["op"] == "add" else -1
            terms = dict(lhs[0])
            for key, coeff in rhs[0].items():
                terms[key] = terms.get(key, 0) + sign * coeff
            return {k: c for k, c in terms.items() if c}, lhs[1] + sign * rhs[1]
    return {x: 1}, 0


def static_difference(start, stop) -> int | None:
    """``stop - start`` when it is a compile-time constant."""
    lo, hi = linear_form(start), linear_form(stop)
    if lo is None or hi is None:
        return None
    terms = dict(hi[0])
    for key, coeff in lo[0].items():
        terms[key] = terms.get(key, 0) - coeff
    return hi[1] - lo[1] if not any(terms.values()) else None


class MemorySemantics:
    def __init__(self, sem: Semantics):
        self.sem = sem
        self.b = sem.b

    # ----------------------------------------------------------------- allocation
    def static_shape(self, shape) -> tuple[int, ...]:
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        if any(is_value(d) for d in dims):
            raise CompilationError("tile shapes must be compile-time constants, got "
                                   f"({', '.join(describe(d) for d in dims)})")
        if not dims or any(not is_int_number(d) or isinstance(d, bool) or d <= 0 for d in dims):
            raise CompilationError(f"a tile shape is a tuple of positive ints, got {shape!r}")
        return tuple(int(d) for d in dims)

    def check_layout(self, layout):
        if layout is not None and not isinstance(layout, _layout_classes()):
            raise CompilationError("layout= must be a TileLayout or ComposeLayout, got "
                                   f"{describe(layout)}")
        return layout

    def alloc(self, scope: MemScope, shape, dtype, layout) -> Value:
        shape = self.static_shape(shape)
        if not isinstance(dtype, ScalarType):
            raise CompilationError("dtype must be a tj dtype such as tj.float32, got "
                                   f"{describe(dtype)}")
        if scope is MemScope.TMEM:
            _check_tmem_shape(shape, dtype)
        return self.b.alloc(scope, dtype, shape, self.check_layout(layout))

    def view(self, buf, shape, layout=None) -> Value:
        if not (is_value(buf) and isinstance(buf.type, BufferType)):
            raise CompilationError(f".view() needs a buffer, got {describe(buf)}")
        shape = self.static_shape(shape)
        if buf.type.scope is MemScope.GLOBAL and layout is None:
            raise CompilationError("a view of a global buffer needs layout=")
        old = buf.type.shape
        if buf.type.is_static and _product(old) != _product(shape):
            raise CompilationError(f"view changes the element count: {list(old)} -> {list(shape)}")
        return self.b.view(buf, shape, self.check_layout(layout))

    def alloc_barriers(self, count) -> Value:
        if not (is_int_number(count) and not isinstance(count, bool) and count > 0):
            raise CompilationError("tj.alloc_barriers needs a positive compile-time count, got "
                                   f"{describe(count)}")
        return self.b.alloc_barrier(int(count))

    # ----------------------------------------------------------------- attributes
    def attribute(self, value: Value, name: str):
        t = value.type
        if name == "dtype" and not isinstance(t, BarrierType):
            return t if isinstance(t, ScalarType) else t.dtype
        if name == "shape" and is_tile(value):
            return tuple(self.dim(value, "shape", i) for i in range(t.rank))
        if name == "strides" and isinstance(t, BufferType):
            return tuple(self.dim(value, "strides", i) for i in range(t.rank))
        if name == "view" and isinstance(t, BufferType):
            return BoundBuiltin(_view, value)
        if name == "to" and isinstance(t, (ScalarType, BufferType, RegionType)):
            return BoundBuiltin(_to, value)
        if name == "T" and is_tile(value):
            return self.sem.tile.permute(value, (), "T")
        raise CompilationError(f"{describe(value)} has no attribute '{name}'")

    def dim(self, value: Value, what: str, index):
        """``value.shape[index]`` or ``value.strides[index]``: an int when static."""
        t = value.type
        if not is_tile(value) or (what == "strides" and not isinstance(t, BufferType)):
            raise CompilationError(f"{describe(value)} has no attribute '{what}'")
        if not is_int_number(index) or not -t.rank <= index < t.rank:
            raise CompilationError(f"{what} index must be a compile-time int in "
                                   f"[{-t.rank}, {t.rank}), got {describe(index)}")
        index = int(index) % t.rank
        if what == "shape":
            return t.shape[index] if t.shape[index] is not None else self.b.buffer_dim(value, index)
        strides = t.strides or (None,) * t.rank
        if strides[index] is not None:
            return strides[index]
        if t.scope is not MemScope.GLOBAL:
            raise CompilationError(f"a {t.scope} buffer has no strides (its layout places it)")
        return self.b.buffer_stride(value, index)

    # ------------------------------------------------------------------- indexing
    def subscript(self, value: Value, index):
        t = value.type
        if isinstance(t, BarrierType):
            return self.barrier_ref(value, index)
        if not is_tile(value):
            raise CompilationError(f"cannot index {describe(value)}")
        items = index if isinstance(index, tuple) else (index,)
        if any(item is None for item in items):
            return self.expand_dims(value, items)
        if any(is_tile(item) for item in items):
            return self.indexed(value, items)
        if len(items) > t.rank:
            raise CompilationError(f"too many indices ({len(items)}) for a rank-{t.rank} "
                                   f"{'region' if isinstance(t, RegionType) else 'buffer'}")
        if len(items) == t.rank and not any(isinstance(i, slice) for i in items):
            return self.b.load(value, self.element_indices(value, items))
        return self.region(value, items + (slice(None),) * (t.rank - len(items)))

    def expand_dims(self, value: Value, items) -> Value:
        """``x[:, None]``: ``x`` with a new size-1 dim at each ``None`` (numpy's newaxis,
        for broadcasting: ``rows[:, None] >= cols[None, :]``). A view of the whole buffer:
        size-1 dims keep the row-major order, so the buffer's layout still places every
        element and nothing is copied."""
        t = value.type
        if not isinstance(t, BufferType) or t.scope is MemScope.GLOBAL:
            raise CompilationError(f"x[:, None] adds a dim to a whole fragment or on-chip "
                                   f"buffer, not to {describe(value)}; copy it into a fragment "
                                   "first")
        dims = [item for item in items if item is not None]
        if len(dims) > t.rank or any(item != slice(None) for item in dims):
            raise CompilationError("x[:, None] takes ':' for every dim of x and None for each "
                                   "new one; slice into a fragment first")
        rest = iter(t.shape)
        shape = [1 if item is None else next(rest) for item in items] + list(rest)
        return self.b.view(value, shape, t.layout)

    def indexed(self, value: Value, items):
        """``table[idx, :]`` with a 1-D integer tile ``idx``: rows (or columns) that only
        ``tj.copy`` reads or writes, as a gather or scatter (docs/language.md). The other
        dims are taken whole (``:``): the copy's other side sizes them, and
        accesses past the tensor's run-time extent are masked."""
        axes = [axis for axis, item in enumerate(items) if is_tile(item)]
        index = items[axes[0]]
        if len(axes) > 1 or index.type.rank != 1 or not index.type.dtype.is_int \
                or index.type.dtype.is_bool:
            raise CompilationError(f"a tile index must be one 1-D integer tile, got "
                                   f"{describe(index)}; for other shapes use tj.gather or "
                                   "tj.scatter")
        t = value.type
        if not isinstance(t, BufferType) or len(items) != t.rank:
            raise CompilationError(f"x[idx, :] takes a whole buffer and one item per dim, got "
                                   f"{len(items)} for {describe(value)}")
        for axis, item in enumerate(items):
            if axis != axes[0] and item != slice(None):
                raise CompilationError(f"x[idx, :] takes the other dims whole (':'), got "
                                       f"{describe(item)} for dim {axis}; use tj.gather on a "
                                       "region instead")
        return IndexedTile(value, index, axes[0])

    def element_indices(self, value: Value, items) -> list[Value]:
        shape = value.type.shape
        indices = []
        for axis, item in enumerate(items):
            self._check_index(item, shape[axis], axis)
            indices.append(self.sem.to_ir(item))
        return indices

    def _check_index(self, item, extent, axis):
        if is_scalar(item) and item.type.is_int:
            return
        if not is_int_number(item) or isinstance(item, bool):
            raise CompilationError(f"index {axis} must be an integer, got {describe(item)}")
        if item < 0 or (extent is not None and item >= extent):
            raise CompilationError(f"index {item} is out of bounds for dimension {axis} of size "
                                   f"{'?' if extent is None else extent}")

    def _window(self, item, extent, axis, masked=False):
        """(start, size, keep) of one index item on a dimension of ``extent`` (None = run
        time). ``masked``: a tensor's tile may run past its end (SPEC §3: masked), also
        when the runtime specialized its size (the nki target)."""
        if not isinstance(item, slice):
            self._check_index(item, extent, axis)
            return item, 1, False
        start = 0 if item.start is None else item.start
        if item.step is not None and not (is_int_number(item.step) and item.step == 1):
            raise CompilationError(f"strided slices are not supported (step {describe(item.step)})")
        for bound in (start, item.stop):
            if bound is not None and not _is_integer(bound):
                raise CompilationError(f"slice bounds must be integers, got {describe(bound)}")
        if item.stop is None:
            if extent is None:
                raise CompilationError(
                    f"dimension {axis} has a run-time size, so ':' has no static size; slice it "
                    f"with a compile-time size, e.g. x[i:i + BLOCK]")
            size = static_difference(start, extent)
        else:
            size = static_difference(start, item.stop)
        if size is None:
            raise CompilationError(f"the size of slice {axis} must be a compile-time constant; "
                                   "write it as start:start + SIZE")
        if size <= 0:
            raise CompilationError(f"slice {axis} is empty (size {size})")
        last = (extent or 0) - (1 if masked else size)   # the last start that fits
        outside = is_int_number(start) and not 0 <= start <= last
        if extent is not None and ((size > extent and not masked) or outside):
            raise CompilationError(f"slice {axis} of size {size} does not fit in a dimension of "
                                   f"size {extent}")
        return start, size, True

    def region(self, value: Value, items) -> Value:
        t = value.type
        masked = isinstance(t, BufferType) and t.scope is MemScope.GLOBAL
        windows = [self._window(item, extent, axis, masked)
                   for axis, (item, extent) in enumerate(zip(items, t.shape))]
        if isinstance(t, BufferType):
            starts = [self.sem.to_ir(start) for start, _, _ in windows]
            return self.b.region(value, starts, [w[1] for w in windows], [w[2] for w in windows])
        return self._subregion(value, windows)

    def _subregion(self, value: Value, windows) -> Value:
        """A region of a region: re-slice the underlying buffer with shifted starts."""
        op = value.owner if isinstance(value.owner, Operation) else None
        if op is None or op.name != "region":
            raise CompilationError("cannot slice this region further (it is a loop or branch "
                                   "result); slice the buffer it came from instead")
        buf, old_starts = op.operands[0], op.operands[1:]
        inner = iter(windows)
        starts, sizes, keep = [], [], []
        for old_start, old_size, old_keep in zip(old_starts, op.attrs["sizes"], op.attrs["keep"]):
            if old_keep:
                start, size, kept = next(inner)
                if not (is_int_number(start) and start == 0):
                    old_start = self.sem.to_ir(self.sem.binary("add", old_start, start))
            else:
                size, kept = old_size, False
            starts.append(old_start)
            sizes.append(size)
            keep.append(kept)
        return self.b.region(buf, starts, sizes, keep)

    def store(self, target, index, value):
        if not is_tile(target):
            raise CompilationError("only elements of buffers can be assigned, not of "
                                   f"{describe(target)}")
        items = index if isinstance(index, tuple) else (index,)
        if len(items) != target.type.rank or any(isinstance(i, slice) for i in items):
            raise CompilationError("assigning to a slice is not supported; use "
                                   "tj.copy(dst, src) to write a tile")
        if not (is_scalar(value) or is_number(value)):
            raise CompilationError(f"buf[i, ...] = v stores a scalar, got {describe(value)}")
        indices = self.element_indices(target, items)
        return self.b.store(target, self.sem.to_ir(value, target.type.dtype), indices)

    # -------------------------------------------------------------------- atomics
    def place(self, value: Value, index):
        """``buf[i, j]`` as an atomic's first argument: the element (an :class:`ElementRef`)
        when every dim is indexed by an integer, else the tile the subscript gives."""
        items = index if isinstance(index, tuple) else (index,)
        if is_tile(value) and len(items) == value.type.rank \
                and not any(item is None or isinstance(item, slice) for item in items):
            return ElementRef(value, tuple(self.element_indices(value, items)))
        return self.subscript(value, index)

    def atomic(self, op: str, place, val, cmp=None, *, sem, scope):
        """``tj.atomic_<op>``: an ``atomic`` (``atomic_cas`` for ``op == "cas"``) on the
        element ``place``, returning its old value, or a ``tile.atomic`` on the tile
        ``place``, returning nothing."""
        name = f"tj.atomic_{op}"
        if sem not in MEMORY_ORDERS or scope not in SYNC_SCOPES:
            raise CompilationError(f"{name}: sem= is one of {', '.join(MEMORY_ORDERS)} and "
                                   f"scope= one of {', '.join(SYNC_SCOPES)}, got {sem!r}, "
                                   f"{scope!r}")
        attrs = {"order": sem, "sync_scope": scope}
        if is_tile(place):
            if op == "cas":
                raise CompilationError(f"{name} updates one element: tj.atomic_cas(buf[i], "
                                       "cmp, val)")
            return self.sem.tile.atomic(op, place, val, **attrs)
        if not isinstance(place, ElementRef):
            raise CompilationError(
                f"{name} updates an element or a tile written in the call, e.g. {name}(buf[i], "
                f"v) or {name}(out[r:r + BM, c:c + BN], tile); got {describe(place)} (a value "
                "read from a buffer is not the place it was read from)")
        buf, dtype = place.buffer, place.buffer.type.dtype
        operands = []
        for role, x in (("cmp", cmp), ("val", val)):
            if x is None:
                continue
            if not (is_scalar(x) or is_number(x)):
                raise CompilationError(f"{name} on one element takes a scalar {role}, got "
                                       f"{describe(x)}")
            operands.append(self.sem.to_ir(x, dtype))
        if op == "cas":
            return self.b.atomic_cas(buf, *operands, place.indices, **attrs)
        return self.b.atomic(op, buf, operands[0], place.indices, **attrs)

    # ------------------------------------------------------------------- barriers
    def barrier_ref(self, bars: Value, index) -> BarrierRef:
        self._check_index(index, bars.type.count, 0)
        return BarrierRef(bars, index)

    def barrier_operands(self, barrier) -> tuple[Value, Value]:
        """(barrier array, index) of ``bars[i]``, or of a one-barrier array."""
        if isinstance(barrier, BarrierRef):
            return barrier.barrier, self.sem.to_ir(barrier.index)
        if is_value(barrier) and isinstance(barrier.type, BarrierType):
            return barrier, self.sem.to_ir(0)
        raise CompilationError(f"expected a barrier such as bars[i] (from tj.alloc_barriers), "
                               f"got {describe(barrier)}")

    def remote(self, x, rank):
        """``tj.remote(x, rank)``: ``x`` in the cluster's CTA of ``rank``."""
        if not (is_int_number(rank) and not isinstance(rank, bool)
                or is_scalar(rank) and rank.type.is_int):
            raise CompilationError(f"tj.remote's CTA rank is an integer, got {describe(rank)}")
        rank = self.sem.to_ir(rank, i32)
        if isinstance(x, BarrierRef):
            return BarrierRef(self.b.create("cluster_map", (x.barrier, rank)).result, x.index)
        if is_value(x) and isinstance(x.type, (BufferType, BarrierType)):
            return self.b.create("cluster_map", (x, rank)).result
        raise CompilationError("tj.remote maps a shared buffer (from tj.alloc_shared) or "
                               f"mbarriers into another CTA of the cluster, got {describe(x)}")

    def mbarrier(self, action: str, barrier, arg=None):
        bar, index = self.barrier_operands(barrier)
        if action == "arrive":
            return self.b.mbarrier_arrive(bar, index)
        if not (is_number(arg) or (is_scalar(arg) and arg.type.is_int)) or isinstance(arg, float):
            raise CompilationError(f"tj.mbarrier_{action} needs an integer, got {describe(arg)}")
        arg = self.sem.to_ir(arg)
        if action == "init":
            return self.b.mbarrier_init(bar, index, arg)
        if action == "wait":
            return self.b.mbarrier_wait(bar, index, arg)
        return self.b.mbarrier_expect_tx(bar, index, arg, arrive=action == "arrive_expect_tx")


@builtin("view")
def _view(buf, shape, layout=None, *, _sem):
    return _sem.memory.view(buf, shape, layout)


@builtin("to")
def _to(x, dtype, *, _sem):
    """``x.to(dtype)``: a scalar or a tile (as a new fragment) converted to ``dtype``."""
    return _sem.tile.convert(x, dtype)


def _is_integer(x) -> bool:
    """A compile-time int or a run-time integer scalar."""
    return is_int_number(x) or (is_scalar(x) and x.type.is_int)


def _product(shape) -> int:
    total = 1
    for d in shape:
        total *= d
    return total


def _check_tmem_shape(shape, dtype: ScalarType) -> None:
    """A tensor-memory buffer is rows (lanes) x columns of 32-bit cells within one CTA's
    128 lanes x 512 columns."""
    if len(shape) != 2 or dtype.itemsize != 4:
        raise CompilationError(f"tj.alloc_tmem makes a rank-2 buffer of 32-bit elements (rows "
                               f"on lanes, one column each), got {list(shape)} {dtype}")
    rows, columns = shape
    if rows > TMEM_LANES or columns > TMEM_COLS:
        raise CompilationError(f"tj.alloc_tmem({list(shape)}): a CTA's tensor memory is "
                               f"{TMEM_LANES} lanes x {TMEM_COLS} 32-bit columns")
