"""``cp.async`` per thread: a ``copy_async`` from a global tensor into shared memory as
asynchronous chunk copies (``cp_async``, docs/ir.md), one lowering that every target
registering the family shares (the CUDA target prints it as PTX ``cp.async``; the CPU's
per-thread mode runs the same IR).

The tile's last dim is cut into chunks of ``width`` elements, ``width * itemsize`` of 16,
8 or 4 bytes (the widest that every condition below allows), and the team's threads take
the chunks cyclically (one elected thread takes them all). Legal, else a decline saying
which condition fails, when the call keeps cp.async's contract
(``async_contracts.cp_async_reasons``: global -> shared, no conversion) and:

* src has dst's shape and moves zeros, not another fill, past the tensor's end (the
  hardware zero-fills what a chunk does not read);
* dst is a (region of a) shared allocation storing each chunk contiguously at an offset
  that is a multiple of ``width``: its layout's strides on memory are multiples of
  ``width`` but for a unit-stride iter of a multiple of ``width`` elements, a swizzle
  atom holds whole chunks, and a region starts at a multiple of ``width`` in the last dim;
* src, for chunks of more than one element, is a region of a kernel argument proved
  ``aligned16``, of unit stride in its last dim (``copy_vector.alignment_checks``); the
  strides and starts not known to keep chunks aligned are tested per chunk at run time;
* with ``barrier=``, one thread issues the whole tile (``async_contracts.one_thread_reasons``).

Each chunk whose first element lies inside the tensor and whose source is aligned is one
``cp_async`` reading ``min(valid, width) * itemsize`` bytes (the rest zero-filled: the
ragged edge); any other chunk (misaligned at run time, or wholly past the end) is copied
element by element at once, past the end as zeros. With a barrier, the thread then
commits and waits for its chunks and completes the tile's bytes on the barrier
(``mbarrier_complete_tx``), so the barrier protocol is TMA's (``expect_tx`` of the tile's
bytes). Without one, the kernel commits and waits itself (``tj.cp_async_commit()``,
``tj.cp_async_wait(n)``) before reading the tile.
"""
from __future__ import annotations

from ...ir.ops_async import CP_ASYNC_BYTES
from ...ir.types import i32
from ...layout import ComposeLayout
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import Decline, Plan
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter
from .async_contracts import cp_async_reasons, one_thread_reasons, tile_bytes
from .common import element_access_reasons
from .copy_vector import alignment_checks, run_aligned

__all__ = ["check_cp_async", "lower_cp_async"]


def _storage_reason(dst: Operand, width: int) -> str | None:
    """Why ``dst``'s chunks of ``width`` elements are not each contiguous at an offset
    that is a multiple of ``width`` in shared memory (None: they are)."""
    region = dst.value.owner if dst.is_region else None
    root = region.operands[0] if region is not None else dst.value
    if getattr(root.owner, "name", None) != "alloc":
        return f"{dst.name} is not a region of a shared allocation (a view of one)"
    layout, shape = root.type.layout, root.type.shape
    if isinstance(layout, ComposeLayout):
        atom = 1 << layout.per_element
        if atom % width:
            return f"{dst.name}'s swizzle keeps runs of {atom} elements, not chunks of {width}"
        layout = layout.tile_layout
    if layout is None:   # row-major: each stride but the last a multiple of shape[-1]
        bad = shape[-1] % width != 0
    else:   # the innermost iter holds whole chunks; every other step keeps them aligned
        canon = layout.canonicalize()
        if not canon.shard:   # a single element
            return None if width == 1 else f"{dst.name} holds one element, not {width}"
        *outer, inner = canon.shard
        bad = any(it.axis.name != "m" for it in canon.shard) or inner.stride != 1 \
            or inner.extent % width != 0 or canon.offset.get("m", 0) % width != 0 \
            or any(it.stride % width for it in outer)
    if bad:
        return (f"{dst.name}'s layout does not store chunks of {width} elements contiguously "
                f"at multiples of {width}")
    start = region.operands[-1] if region is not None and region.attrs["keep"][-1] else None
    static = getattr(start.owner, "attrs", {}).get("value") if start is not None else 0
    if not isinstance(static, int) or static % width:
        return f"{dst.name} does not start at a static multiple of {width} in its last dim"
    return None


def _width(call: PrimitiveCall) -> tuple[int, tuple, list[str]]:
    """(the widest chunk, in elements, the src dims its alignment leaves to run-time
    checks; or why no chunk size works, one reason per size)."""
    dst, src = call["dst"], call["src"]
    why = []
    for nbytes in reversed(CP_ASYNC_BYTES):
        width = nbytes // dst.dtype.itemsize
        if nbytes % dst.dtype.itemsize:
            continue
        problem = f"dst's last dim of {dst.shape[-1]} is not a multiple of {width}" \
            if dst.shape[-1] % width else _storage_reason(dst, width)
        checked = ()
        if problem is None and width > 1:
            checked, problem = alignment_checks(call, src, width)
        if problem is None:
            return width, checked, []
        why.append(f"{nbytes}-byte chunks: {problem}")
    return 0, (), why or [f"a {dst.dtype} element is not 4, 8 or 16 bytes"]


def check_cp_async(call: PrimitiveCall) -> Plan | Decline:
    reasons = cp_async_reasons(call) + one_thread_reasons(call)
    if reasons:
        return Decline(*reasons)
    dst, src = call["dst"], call["src"]
    reasons = element_access_reasons(call)
    if tuple(src.shape) != tuple(dst.shape):
        reasons.append(f"cp.async copies src {list(src.shape)} into dst of its own shape, "
                       f"not {list(dst.shape)}")
    fill = call.attrs.get("other")
    fill = call.config.get("fill", 0) if fill is None else fill
    if fill != 0:
        reasons.append(f"cp.async zero-fills past the tensor's end, not with {fill}")
    if reasons:
        return Decline(*reasons)
    dist = choose(call, [dst, src])
    if isinstance(dist, Decline):
        return dist
    if isinstance(dist, Owned):
        return Decline("cp.async chunks go to threads cyclically: no operand is laid out "
                       "over threads")
    width, checked, why = _width(call)
    if why:
        return Decline(*why)
    return Plan([(width,)], {"distribution": dist, "checked_dims": checked})


def lower_cp_async(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src, width = call["dst"], call["src"], plan.shape[0]
    itemsize, b = dst.dtype.itemsize, em.b
    last = len(dst.shape) - 1

    def elements(idx: list) -> None:   # at once; past the tensor's end reads 0
        for k in range(width):
            element = [*idx[:-1], em.add(idx[-1], k)]
            em.store(dst, em.load(src, element, checked=True), element)

    def issue(idx: list) -> None:
        limit = em.limits(src)[last]
        if isinstance(limit, int):
            size = em.const(width * itemsize, i32)
        else:   # the chunk's elements inside the tensor (its first one is)
            valid = b.binary("min", b.binary("sub", limit, em.index(idx[-1])), em.const(width))
            size = b.binary("mul", valid, em.const(itemsize))
        place = [em.index(i) for i in idx]
        b.create("cp_async", (dst.value, src.value, size, *place, *place),
                 {"bytes": width * itemsize})

    def chunk(idx: list) -> None:
        ok = em.all_of([c for c in (em.in_bounds(src, idx),
                                    run_aligned(em, src, plan.details["checked_dims"], idx,
                                                width)) if c is not None])
        if ok is None:
            issue(idx)
            return
        _, then, orelse = b.if_(ok)
        for block, body in ((then, issue), (orelse, elements)):
            with b.insert_into(block):
                body(idx)
                b.yield_()

    step = (1,) * last + (width,)
    plan.details["distribution"].emit(em, [(Box((0,) * len(dst.shape), tuple(dst.shape), step),
                                            chunk)])
    if call.extras:
        bar, index = call.extras
        b.cp_async_commit()
        b.cp_async_wait(0)
        b.mbarrier_complete_tx(bar, index, em.const(tile_bytes(call), i32))
