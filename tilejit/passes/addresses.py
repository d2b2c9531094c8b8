"""Where a per-thread kernel's elements live, and their addresses as plain integer IR.

Two passes of per-thread kernels (a ``per_thread`` target, or the CPU's SIMT mode); a
``team_once`` kernel passes through both unchanged (its instruction families address whole
tiles themselves).

``place-fragments`` (before ``plan-shared-memory``): a fragment that no layout spreads
over threads is shared by its team once tile primitives split per thread -- a cyclic
split hands its elements to other threads from one primitive to the next, which is why
``sync-hazards`` already orders its accesses as shared memory's. For the CTA team it
becomes what it is, a shared buffer, which the shared-memory plan then places (and a GPU
keeps in shared memory); a warp's or a warpgroup's becomes one with ``per_team`` copies,
one per team instance, each thread reaching its own team's. A thread's own fragment
becomes private (``local``) memory, and so does a fragment laid out over threads, keeping
its layout: each thread holds the elements the layout gives it (a GPU's registers), stored
without the layout's thread axes (``ir.storage.held_per_thread``); a layout giving a
thread two elements at one place is a CompilationError at its alloc.

``lower-addresses`` (after the plan): every ``load``/``store``/``atomic``/``atomic_cas``
through regions and views becomes the flat access of its root buffer (``load_at`` ...:
the data of a kernel argument, or an ``alloc``'s storage) at an element offset computed by
``binary`` ops: ``sum(index * stride)`` for a tensor (strides the signature fixed are
constants, the others ``buffer_stride``), the layout's storage offset for an on-chip
buffer (``ir.addressing``: row-major without a layout; split iters, offsets and swizzles
with one), region starts added, layout-less views re-split row-major; ``index_arith``
folds what is known at compile time (a fragment's register part: ``known_bits``). Each
access is preceded by a ``bounds_check`` of its indices against the shape of the buffer
under its regions, as the CPU checks logical accesses (a vector access,
``load_vec``/``store_vec``, of its run's first and last elements); targets print it where
their options ask.
Tensors are addressed in i64, on-chip buffers in i32 (unless their storage holds 2**31
elements or more, which only a CPU's private arrays may). Shared memory is stored over
every axis its layout reaches, thread axes too, on every target; private memory laid out
over threads without its thread axes (its offsets drop their digits); memory axes other
than ``m`` (Trainium's ``P`` and ``F``) are stored like ``m`` in both. Left as they
are: accesses of fragments laid out over threads that ``place-fragments`` did not place,
and of views of tensors. Emitters print the result; they never derive an address.
"""
from __future__ import annotations

import math

from ..errors import CompilationError
from ..ir.addressing import Addressing, row_major_flat, row_major_indices
from ..ir.builder import Builder
from ..ir.core import KernelIR, Operation, Value
from ..ir.ops_native import (ACCESS_OPS, FIRST_INDEX, FLAT_ACCESS, VECTOR_ACCESS_OPS, run_length,
                             stored_values)
from ..ir.rewrite import RewriteContext, Rewriter, retyped_from_yield
from ..ir.storage import held_per_thread, on_threads, storage_elements
from ..ir.types import MemScope, ScalarType, TeamKind, i32, i64
from ..layout import TileLayout
from .dispatch import PER_THREAD
from .dispatch.registry import context_for
from .effects import root_buffer
from .index_arith import IrArith
from .known_bits import KnownBits
from .ownership import colliding_elements, unflatten

__all__ = ["IrArith", "buffer_addressing", "lower_addresses", "place_fragments"]


def _per_thread(kernel: KernelIR) -> bool:
    return context_for(kernel).distribution == PER_THREAD


# ----------------------------------------------------------------------- place-fragments
def place_fragments(kernel: KernelIR) -> KernelIR:
    if not _per_thread(kernel):
        return kernel

    def place(op: Operation, ctx: RewriteContext):
        if op.attrs["scope"] is not MemScope.FRAGMENT:
            return None
        teams = [p.attrs["kind"] for p in ctx.parents if p.name == "team"]
        team = teams[-1] if teams else TeamKind.CTA
        # Private memory: a thread team's fragment is all its thread's, and a layout over
        # threads gives each thread its own elements (the layout stays: it says which).
        if team is TeamKind.THREAD or on_threads(op.attrs["layout"]):
            new = op.replace(attrs={**op.attrs, "scope": MemScope.LOCAL})
        elif team in (TeamKind.WARP, TeamKind.WARPGROUP, TeamKind.CTA):
            per_team = None if team is TeamKind.CTA else team
            new = op.replace(attrs={**op.attrs, "scope": MemScope.SHARED, "per_team": per_team})
        else:
            return None   # a cluster's: not in one CTA's memory
        new.result.name_hint = op.result.name_hint
        return new

    for op in kernel.walk():
        if op.name == "alloc" and op.attrs["scope"] in (MemScope.FRAGMENT, MemScope.LOCAL):
            _check_private_places(op)
    if not any(op.name == "alloc" and op.attrs["scope"] is MemScope.FRAGMENT
               for op in kernel.walk()):
        return kernel
    # One sweep: a placed alloc is no candidate again (to a fixpoint would sweep twice).
    return Rewriter([("alloc", place), ("team", retyped_from_yield),
                     ("if", retyped_from_yield)], "place-fragments").sweep(kernel)


def _check_private_places(alloc: Operation) -> None:
    """A CompilationError at ``alloc`` when its layout over threads gives a thread two
    elements at one place of the thread's own storage (a GPU could not keep both)."""
    layout, shape = alloc.attrs["layout"], alloc.attrs["shape"]
    if not isinstance(layout, TileLayout) or not on_threads(layout):
        return
    found = colliding_elements(layout, shape)
    if found is not None:
        first, second, thread = found
        raise CompilationError(
            f"the layout {layout} gives thread (lane, warp) {thread} elements "
            f"{list(unflatten(first, shape))} and {list(unflatten(second, shape))} at one "
            "place: per thread each thread holds its elements in its own storage, which "
            "has room for one (give them different coordinates on m)", alloc.loc)


# ----------------------------------------------------------------------- lower-addresses
def _owner_name(value: Value) -> str | None:
    return getattr(value.owner, "name", None)


def buffer_addressing(buf: Value) -> Addressing | None:
    """The addressing of an on-chip buffer or view in storage every target lays out alike:
    shared memory (over all the axes its layout reaches: the CTA's threads share it), or
    private memory (without thread axes: a thread holds only its own elements of a layout
    over threads); Trainium's partition and free axes, memory, are stored like ``m``.
    None: a fragment over threads that ``place-fragments`` did not place; a buffer reached
    through a loop-carried value; or a layout-less view of a buffer not stored row-major,
    which :func:`_offset` re-splits."""
    t, name = buf.type, _owner_name(buf)
    private = held_per_thread(t.scope, t.layout)
    if t.scope is not MemScope.SHARED and on_threads(t.layout) and not private:
        return None
    if name == "alloc":
        return (Addressing.row_major(t.shape) if t.layout is None
                else Addressing.from_layout(t.layout, t.shape, thread_private=private))
    if name == "cluster_map":   # another CTA's copy of the alloc, stored as it is
        return buffer_addressing(buf.owner.operands[0])
    if name != "view":
        return None
    parent = buffer_addressing(buf.owner.operands[0])
    if parent is None:
        return None
    if t.layout is not None:
        return Addressing.from_layout(t.layout, t.shape, parent.storage, private)
    parent_shape = buf.owner.operands[0].type.shape
    return Addressing.row_major(t.shape) if parent == Addressing.row_major(parent_shape) \
        else None


def _index_type(buf: Value):
    """i64 for a tensor, i32 for an on-chip buffer unless it is huge."""
    if buf.type.scope is MemScope.GLOBAL:
        return i64
    if _owner_name(buf) == "region":
        buf = buf.owner.operands[0]
    root = root_buffer(buf).type
    private = held_per_thread(root.scope, root.layout)
    stored = storage_elements(root.shape, root.layout, private)
    small = max(stored, math.prod(buf.type.shape)) < 2 ** 31
    return i32 if small else i64


def _under_regions(arith: IrArith, buf: Value, indices: list[Value]) -> tuple[Value, list]:
    """The buffer under ``buf``'s region (if any) and the indices into it."""
    indices = [arith.index(v) for v in indices]
    if _owner_name(buf) != "region":
        return buf, indices
    region, rest = buf.owner, iter(indices)
    return region.operands[0], [arith.add(arith.index(start), next(rest)) if kept else
                                arith.index(start)
                                for start, kept in zip(region.operands[1:],
                                                       region.attrs["keep"])]


def _offset(arith: IrArith, buf: Value, indices: list):
    name, t = _owner_name(buf), buf.type
    if t.scope is MemScope.GLOBAL:
        if name is not None:      # a view of a tensor: reaches it through a layout
            return None
        offset = 0
        for dim, (index, stride) in enumerate(zip(indices, t.strides)):
            stride = stride if isinstance(stride, int) else arith.op("buffer_stride", (buf,),
                                                                      dim=dim)
            offset = arith.add(offset, arith.mul(index, stride))
        return buf, offset
    addressing = buffer_addressing(buf)
    if addressing is not None:
        root = root_buffer(buf)
        offset = addressing.element_offset(arith, indices, t.shape)
        per_team = root.owner.attrs.get("per_team") if _owner_name(root) == "alloc" else None
        if per_team is not None:   # this thread's team's copy
            instance = arith.index(arith.op("thread_index", (), kind=f"{per_team}_id", dim=0))
            copy = storage_elements(root.type.shape, root.type.layout)
            offset = arith.add(offset, arith.mul(instance, copy))
        return root, offset
    if name == "view" and t.layout is None:   # a reshape of a laid-out buffer
        parent = buf.owner.operands[0]
        flat = row_major_flat(arith, indices, t.shape)
        return _offset(arith, parent, row_major_indices(arith, flat, parent.type.shape))
    return None


def _describe(buf: Value) -> str:
    """The buffer's name in a failed check (as the CPU names a logical access's buffer)."""
    owner = buf.owner
    if buf.name_hint or not hasattr(owner, "loc"):
        return buf.name_hint or "argument"
    return f"{buf.type.scope} buffer allocated at line {owner.loc.line}"


def _access_parts(op: Operation) -> tuple[tuple, list[Value], int]:
    """(the values an access stores or compares, its indices, how many consecutive
    elements of the last dim it touches)."""
    if op.name in VECTOR_ACCESS_OPS:
        count, stored = run_length(op), stored_values(op)
        return op.operands[1:1 + stored], list(op.operands[1 + stored:]), count
    first_index = FIRST_INDEX[op.name]
    return op.operands[1:first_index], list(op.operands[first_index:]), 1


def _flat_place(arith: IrArith, op: Operation, buf: Value, index_operands: list, count: int):
    """(root buffer, offset) of the element of ``buf`` at ``index_operands``, after a
    ``bounds_check`` of the first and ``count``-th elements of its run; None where the
    buffer cannot be addressed flat."""
    checked, indices = _under_regions(arith, buf, index_operands)
    found = _offset(arith, checked, indices)
    if found is None:
        return None
    extents = [extent if isinstance(extent, int) else arith.op("buffer_dim", (checked,), dim=d)
               for d, extent in enumerate(checked.type.shape)]
    # A run's first and last elements: the others lie between them.
    ends = [indices] if count == 1 else [indices, [*indices[:-1],
                                                   arith.add(indices[-1], count - 1)]]
    arith.b.create("bounds_check", [arith.value(v) for end in ends for v in end]
                   + [arith.value(v) for _ in ends for v in extents],
                   {"access": op.name, "buffer": _describe(checked),
                    "scope": checked.type.scope})
    root, offset = found
    return root, arith.value(offset)


class _IndexMath:
    """The pass's index arithmetic: a memo per block being built (the accesses of one loop
    body share their index math) and one ``KnownBits`` for the kernel (every access asks
    of the same thread coordinates), each buffer's index type worked out once."""

    def __init__(self):
        self.memos: dict[int, dict] = {}
        self.bits = KnownBits()
        self.types: dict[Value, ScalarType] = {}   # buffer -> the type of its offsets

    def memo(self, b: Builder) -> dict:
        return self.memos.setdefault(id(b.block), {})

    def arith(self, b: Builder, buf: Value) -> IrArith:
        """The arithmetic of ``buf``'s offsets (``_index_type``) at ``b``."""
        if buf not in self.types:
            self.types[buf] = _index_type(buf)
        return IrArith(b, self.types[buf], self.memo(b), self.bits)


def _lower_access(op: Operation, ctx: RewriteContext, index_math: _IndexMath):
    values, index_operands, count = _access_parts(op)
    b = ctx.builder
    memo = index_math.memo(b)
    known = set(memo)
    arith = index_math.arith(b, op.operands[0])
    found = _flat_place(arith, op, op.operands[0], index_operands, count)
    if found is None:   # the rewriter drops what was built: so must the memo
        for key in set(memo) - known:
            del memo[key]
        if count > 1:
            raise CompilationError(f"{op.name} reached lower-addresses on a buffer it cannot "
                                   "address flat (the rule that made it checks its operands)",
                                   op.loc)
        return None
    root, offset = found
    operands = (root, offset, *values) if count > 1 else (root, *values, offset)
    new = b.create(FLAT_ACCESS[op.name], operands, dict(op.attrs))
    for old, result in zip(op.results, new.results):
        result.name_hint = old.name_hint
    return new


def _lower_cp_async(op: Operation, ctx: RewriteContext, index_math: _IndexMath):
    """``cp_async`` -> ``cp_async_at``: the chunk's dst run is checked whole, its source at
    its first element (the rule issues a chunk only where that one lies inside the tensor,
    and reads no further than the tensor's end)."""
    dst, src, src_bytes, *indices = op.operands
    b, rank = ctx.builder, dst.type.rank
    count = op.attrs["bytes"] // dst.type.dtype.itemsize
    places = [_flat_place(index_math.arith(b, buf), op, buf, index_operands, n)
              for buf, index_operands, n in ((dst, indices[:rank], count),
                                             (src, indices[rank:], 1))]
    if None in places:
        raise CompilationError("cp_async reached lower-addresses on a buffer it cannot address "
                               "flat (the rule that made it checks its operands)", op.loc)
    (dst_root, dst_offset), (src_root, src_offset) = places
    return b.create("cp_async_at", (dst_root, dst_offset, src_root, src_offset, src_bytes),
                    dict(op.attrs))


def _lower_tma(op: Operation, ctx: RewriteContext, index_math: _IndexMath):
    """``tma_load`` / ``tma_store`` -> ``tma_load_at`` / ``tma_store_at``: the shared box's
    root and element offset (its first element checked), the tensor's root and the box's
    coordinates in it (a dim a region drops is a box dim of 1)."""
    load = op.name == "tma_load"
    dst, src = op.operands[:2]
    first = 4 if load else 2
    indices = op.operands[first:]
    shared, tensor = (dst, src) if load else (src, dst)
    dst_indices, src_indices = indices[:dst.type.rank], indices[dst.type.rank:]
    shared_indices, tensor_indices = (dst_indices, src_indices) if load else \
        (src_indices, dst_indices)
    b = ctx.builder
    place = _flat_place(index_math.arith(b, shared), op, shared, shared_indices, 1)
    arith = index_math.arith(b, tensor)
    root, coords = _under_regions(arith, tensor, tensor_indices)
    if place is None or _owner_name(root) is not None:
        raise CompilationError(f"{op.name} reached lower-addresses on a buffer it cannot address "
                               "flat (the rule that made it checks its operands)", op.loc)
    box = iter(op.attrs["box"])
    keep = tensor.owner.attrs["keep"] if _owner_name(tensor) == "region" else \
        (True,) * tensor.type.rank
    attrs = {**op.attrs, "box": tuple(next(box) if kept else 1 for kept in keep)}
    coords = [arith.value(c) for c in coords]
    if load:
        return b.create("tma_load_at", (place[0], place[1], root, *op.operands[2:4], *coords),
                        attrs)
    return b.create("tma_store_at", (root, place[0], place[1], *coords), attrs)


def lower_addresses(kernel: KernelIR) -> KernelIR:
    if not _per_thread(kernel):
        return kernel
    index_math = _IndexMath()

    def lower(op, ctx):
        return _lower_access(op, ctx, index_math)
    def lower_cp_async(op, ctx):
        return _lower_cp_async(op, ctx, index_math)
    def lower_tma(op, ctx):
        return _lower_tma(op, ctx, index_math)
    # One sweep: the flat accesses it makes are no candidates.
    return Rewriter([(name, lower) for name in ACCESS_OPS + VECTOR_ACCESS_OPS]
                    + [("cp_async", lower_cp_async), ("tma_load", lower_tma),
                       ("tma_store", lower_tma)], "lower-addresses").sweep(kernel)
