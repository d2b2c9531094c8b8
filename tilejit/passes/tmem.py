"""``lower-tmem``: tensor memory allocated for real, in per-thread kernels (after
``lower-tiles``, whose tcgen05 rules address a ``tj.alloc_tmem`` buffer through
``tmem_address``).

Each ``alloc {scope = tmem}`` of shape (rows, columns) becomes the allocation protocol of
PTX ISA 9.7.16 ("Tensor Memory Allocation"): a one-element shared i32 slot; warp 0
allocates the smallest power of two of 32-bit columns (at least 32) that holds the
buffer's columns, the address landing in the slot, and after the last buffer's allocation
relinquishes the permit (the CTA allocates nothing more);
``tcgen05.fence::before_thread_sync``, a CTA barrier, ``::after_thread_sync``; every
thread reads the address from the slot. Its
``tmem_address`` uses become that address. At the kernel's end: fence, barrier, and warp 0
frees the columns (``tcgen05_dealloc``), as a CTA must before it exits.

Refused (a CompilationError at the alloc): a tensor-memory buffer allocated inside control
flow or a team region (the allocation is the whole CTA's, once), or one wider than 512
columns.
"""
from __future__ import annotations

from ..errors import CompilationError
from ..ir.attrs import FilterSpec
from ..ir.builder import Builder
from ..ir.core import KernelIR, Operation
from ..ir.ops_tcgen05 import TMEM_ALLOC_COLUMNS
from ..ir.rewrite import RewriteContext, Rewriter
from ..ir.types import MemScope, i32
from .dispatch import PER_THREAD
from .dispatch.registry import context_for

__all__ = ["run"]


def _columns(op: Operation) -> int:
    """The columns to allocate for a tensor-memory buffer: its last dim in 32-bit cells,
    rounded up to a power of two of at least 32."""
    shape, itemsize = op.attrs["shape"], op.attrs["dtype"].itemsize
    needed = shape[-1] * itemsize // 4 if shape else 1
    for columns in TMEM_ALLOC_COLUMNS:
        if needed <= columns:
            return columns
    raise CompilationError(f"a tensor-memory buffer of {list(shape)} {op.attrs['dtype']} needs "
                           f"{needed} 32-bit columns; a CTA has {TMEM_ALLOC_COLUMNS[-1]}",
                           op.loc)


def _warp0(b: Builder, then) -> None:
    """``then(b)`` on warp 0."""
    warp = b.thread_index("warp_id")
    _, inside, outside = b.if_(b.cmp("eq", warp, b.const(0, i32)),
                               filter=FilterSpec("warp", 0, 1))
    with b.insert_into(inside):
        then(b)
        b.yield_()
    with b.insert_into(outside):
        b.yield_()


def _fenced_sync(b: Builder) -> None:
    b.create("tcgen05_fence", attrs={"kind": "before_thread_sync"})
    b.sync()
    b.create("tcgen05_fence", attrs={"kind": "after_thread_sync"})


def run(kernel: KernelIR) -> KernelIR:
    if context_for(kernel).distribution != PER_THREAD or not any(
            op.name == "alloc" and op.attrs["scope"] is MemScope.TMEM for op in kernel.walk()):
        return kernel
    addresses, allocated = {}, []
    remaining = sum(op.name == "alloc" and op.attrs["scope"] is MemScope.TMEM
                    for op in kernel.walk())

    def allocate(op: Operation, ctx: RewriteContext):
        nonlocal remaining
        if op.attrs["scope"] is not MemScope.TMEM:
            return None
        if ctx.parents:
            raise CompilationError("tensor memory is allocated once for the whole CTA: call "
                                   "tj.alloc_tmem at the kernel's top level, outside control "
                                   "flow and team regions", op.loc)
        b, columns = ctx.builder, _columns(op)
        slot = b.alloc(MemScope.SHARED, i32, (1,))
        slot.name_hint = f"{op.result.name_hint or 'tmem'}_slot"

        remaining -= 1
        last = not remaining

        def grab(b: Builder) -> None:
            b.create("tcgen05_alloc", (slot,), {"cols": columns})
            if last:   # after the last allocation: none may follow
                b.create("tcgen05_relinquish_alloc_permit")
        _warp0(b, grab)
        _fenced_sync(b)
        address = b.load(slot, [b.const(0, i32)])
        address.name_hint = f"{op.result.name_hint or 'tmem'}_addr"
        addresses[slot] = address
        allocated.append((address, columns, op.loc))
        return slot   # stands for the buffer until its tmem_address uses are replaced

    def address(op: Operation, ctx: RewriteContext):
        return addresses[op.operands[0]]

    lowered = Rewriter([("alloc", allocate), ("tmem_address", address)],
                       "lower-tmem").sweep(kernel)
    b = Builder()
    with b.insert_into(lowered.body):
        for taddr, columns, loc in allocated:
            b.loc = loc
            _fenced_sync(b)
            _warp0(b, lambda b, taddr=taddr, columns=columns: b.create(
                "tcgen05_dealloc", (taddr,), {"cols": columns}))
    return lowered
