"""TMA on the CPU: ``tma_load_at``, ``tma_store_at``, ``bulk_commit``, ``bulk_wait`` and
``fence_proxy_async`` (``ir/ops_tma.py``).

A box moves element by element through a function per (direction, box, swizzle, element
size): element ``i`` of the box (row-major) sits at shared byte ``swizzle(offset + i *
itemsize)``, the XOR the hardware applies (``ops_tma.swizzled_byte``), and at the
tensor's coordinates ``coords + (i's place in the box)``; one past the tensor's end (or
before its start) reads as zero and is never written, as TMA's out-of-bounds fill.

A load lands at once and then completes the box's bytes on its mbarrier, so waits behave
exactly as on the GPU (an ``expect_tx`` of another size never completes the phase); a
multicast load lands in each CTA of its mask and completes on each one's mbarrier (the
cluster's CTAs run together: ``emit_cluster.in_cta`` reaches their arenas). A store
lands late, so that a kernel that forgets to wait loses it and its test sees that, as
``cp_async`` does (``emit_async``): ``tma_store_at`` queues the box (its function, both
places and the tensor's dims, strides and coordinates) in its unit's queue in the CTA's
sync arena, tagged with the unit's current bulk group; ``bulk_commit`` closes the group;
``bulk_wait {pending = N}`` lands, in issue order, the boxes of all groups but the N most
recently committed (the box reads shared memory then: it may not have been reused yet). A
full queue lands its boxes early, a legal schedule. ``fence_proxy_async`` orders nothing
the CPU reorders.

Each copy first checks what ``cuTensorMapEncodeTiled`` would refuse for the tensor at
launch on a GPU -- a stride (but the innermost) of bytes not a multiple of 16 -- and fails
with a LaunchError naming it (``abi.TENSOR_MAP``). The race
detector records a load's shared writes and a store's shared reads when they are issued.
"""
from __future__ import annotations

import math

from llvmlite import ir

from tilejit.ir.ops_tma import TMA_CHUNK, TMA_MAX_RANK, box_bytes, multicast_ranks

from . import abi, race, types
from .deferred import DeferredQueue
from .emit_cluster import in_cta
from .emit_sync import complete_tx
from .frames import counted_loop
from .types import I1, I8, I32, I64, PTR, VOID

__all__ = ["HANDLERS", "QUEUE"]

QUEUE = 4                   # stores a unit keeps in flight
ARGS = 3 * TMA_MAX_RANK     # a box's tensor: dims, strides (elements), coordinates
DIMS, STRIDES, COORDS = 0, TMA_MAX_RANK, 2 * TMA_MAX_RANK
BOX_FN = ir.FunctionType(VOID, [PTR, I64, PTR, PTR])   # shared, byte offset, tensor, args
# A queued store: its box function, shared root, byte offset, tensor, args, group; a
# unit's state: queue length, groups committed, the args of its loads, the queue.
ENTRY = ir.LiteralStructType([PTR, PTR, I64, PTR, ir.ArrayType(I64, ARGS), I32])
FN, SHARED, OFFSET, TENSOR, ARGV, GROUP = range(6)
STATE = ir.LiteralStructType([I32, I32, ir.ArrayType(I64, ARGS), ir.ArrayType(ENTRY, QUEUE)])
LENGTH, COMMITTED, SCRATCH, ENTRIES = range(4)
ENTRY_BYTES = 4 * 8 + ARGS * 8 + 8
STATE_BYTES = 8 + ARGS * 8 + ENTRY_BYTES * QUEUE


def _shared_byte(b: ir.IRBuilder, offset, i, itemsize: int, swizzle: int):
    """The shared byte of the box's element ``i`` (i64) whose first element is at byte
    ``offset``: bits [4, 4 + log2(swizzle / 16)) XOR the bits 3 above them."""
    byte = b.add(offset, b.mul(i, ir.Constant(I64, itemsize)))
    if not swizzle:
        return byte
    flips = b.and_(b.lshr(byte, ir.Constant(I64, 7)), ir.Constant(I64, swizzle // TMA_CHUNK - 1))
    return b.xor(byte, b.shl(flips, ir.Constant(I64, 4)))


def _box_fn(mc, load: bool, box: tuple, swizzle: int, itemsize: int) -> ir.Function:
    """``tj.tma.<load|store>...(shared, offset, tensor, args)``: move one box."""
    name = f"tj.tma.{'load' if load else 'store'}.{itemsize}.{swizzle}." + \
        "x".join(map(str, box))
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, BOX_FN, name)
    fn.linkage = "internal"
    shared, offset, tensor, argv = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    memcpy = mc.function("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1])
    size = ir.Constant(I64, itemsize)

    def arg(k: int):
        return b.load(b.gep(argv, [ir.Constant(I64, k)], source_etype=I64), typ=I64)

    def element(i):
        rest, inside, place = i, ir.Constant(I1, 1), ir.Constant(I64, 0)
        for d in reversed(range(len(box))):
            extent = ir.Constant(I64, box[d])
            at = b.add(arg(COORDS + d), b.urem(rest, extent))
            rest = b.udiv(rest, extent)
            ok = b.and_(b.icmp_signed(">=", at, ir.Constant(I64, 0)),
                        b.icmp_signed("<", at, arg(DIMS + d)))
            inside = b.and_(inside, ok)
            place = b.add(place, b.mul(at, arg(STRIDES + d)))
        smem = b.gep(shared, [_shared_byte(b, offset, i, itemsize, swizzle)], source_etype=I8)
        gmem = b.gep(tensor, [b.mul(place, size)], source_etype=I8)
        if not load:
            with b.if_then(inside):
                b.call(memcpy, [gmem, smem, size, ir.Constant(I1, 0)])
            return
        with b.if_else(inside) as (then, otherwise):
            with then:
                b.call(memcpy, [smem, gmem, size, ir.Constant(I1, 0)])
            with otherwise:
                b.call(mc.function("llvm.memset.p0.i64", VOID, [PTR, I8, I64, I1]),
                       [smem, ir.Constant(I8, 0), size, ir.Constant(I1, 0)])

    counted_loop(b, ir.Constant(I64, math.prod(box)), element, "box")
    b.ret_void()
    return fn


def _land_store(b: ir.IRBuilder, mc, state, i) -> None:
    field = STORES.field
    box = b.load(field(b, state, ENTRIES, i, FN), typ=BOX_FN.as_pointer())
    b.call(box, [b.load(field(b, state, ENTRIES, i, SHARED), typ=PTR),
                 b.load(field(b, state, ENTRIES, i, OFFSET), typ=I64),
                 b.load(field(b, state, ENTRIES, i, TENSOR), typ=PTR),
                 field(b, state, ENTRIES, i, ARGV, 0)])


STORES = DeferredQueue("tma", STATE, STATE_BYTES, ENTRY_BYTES, QUEUE, LENGTH, COMMITTED,
                       ENTRIES, GROUP, _land_store)


def _check_tensor_map(em, op, ref) -> None:
    """Fail as the tensor map's encoding would on a stride (but the innermost) of bytes not
    a multiple of 16 (the rule proved the address aligned: ``aligned16``)."""
    b, itemsize = em.b, ref.dtype.itemsize
    site = em.mc.add_site("tensor_map", op, buffer=ref.name)
    sixteen, zero = ir.Constant(I64, TMA_CHUNK), ir.Constant(I64, 0)
    for d, stride in enumerate(ref.strides[:-1]):
        if isinstance(stride, int):   # static: the rule refused it already
            continue
        nbytes = b.mul(stride, ir.Constant(I64, itemsize))
        em.fail_unless(b.icmp_unsigned("==", b.urem(nbytes, sixteen), zero), abi.TENSOR_MAP,
                       site, [ir.Constant(I64, d), nbytes])


def _write_args(em, argv, ref, coords) -> None:
    """The tensor's dims, strides and the box's coordinates into ``argv`` (i64[ARGS])."""
    b = em.b
    for base, values in ((DIMS, ref.shape), (STRIDES, ref.strides),
                         (COORDS, [types.to_i64(b, em[c], c.type) for c in coords])):
        for d, value in enumerate(values):
            b.store(em.i64(value), b.gep(argv, [ir.Constant(I64, base + d)], source_etype=I64))


def _race_box(em, op, ref, offset, box, swizzle: int, reads: bool) -> None:
    """The race detector's record of the box's shared elements."""
    if em.mc.race is None:
        return
    itemsize = ref.dtype.itemsize

    def element(i):
        byte = _shared_byte(em.b, offset, i, itemsize, swizzle)
        race.check_access(em, op, ref, em.byte_ptr(ref.ptr, byte), reads=reads)
    counted_loop(em.b, ir.Constant(I64, math.prod(box)), element, "tma.race")


def emit_tma_load_at(em, op):
    dst, dst_offset, src, _, _, *coords = op.operands
    b, box, swizzle = em.b, op.attrs["box"], op.attrs["swizzle"]
    shared, tensor = em[dst], em[src]
    _check_tensor_map(em, op, tensor)
    offset = b.mul(types.to_i64(b, em[dst_offset], dst_offset.type),
                   ir.Constant(I64, shared.dtype.itemsize))
    argv = STORES.field(b, STORES.unit_state(em), SCRATCH, 0)
    _write_args(em, argv, tensor, coords)
    # A multicast box lands in each CTA of the mask: its tile and barrier at our offsets.
    landings = [(shared, None)] if not op.attrs["multicast"] else \
        [(in_cta(em, op, shared, rank), in_cta(em, op, em[op.operands[3]], rank))
         for rank in multicast_ranks(op)]
    for tile, bar in landings:
        _race_box(em, op, tile, offset, box, swizzle, reads=False)
        b.call(_box_fn(em.mc, True, box, swizzle, shared.dtype.itemsize),
               [tile.ptr, offset, tensor.ptr, argv])
        complete_tx(em, op, 3, ir.Constant(I32, box_bytes(op)), bar)
    return []


def emit_tma_store_at(em, op):
    dst, src, src_offset, *coords = op.operands
    b, box, swizzle = em.b, op.attrs["box"], op.attrs["swizzle"]
    tensor, shared = em[dst], em[src]
    _check_tensor_map(em, op, tensor)
    offset = b.mul(types.to_i64(b, em[src_offset], src_offset.type),
                   ir.Constant(I64, shared.dtype.itemsize))
    _race_box(em, op, shared, offset, box, swizzle, reads=True)
    state = STORES.unit_state(em)
    fn = _box_fn(em.mc, False, box, swizzle, shared.dtype.itemsize)
    index = STORES.enqueue(em, state, {FN: fn, SHARED: shared.ptr, OFFSET: offset,
                                       TENSOR: tensor.ptr})
    _write_args(em, STORES.field(b, state, ENTRIES, index, ARGV, 0), tensor, coords)
    return []


def emit_bulk_commit(em, op):
    STORES.commit(em)
    return []


def emit_bulk_wait(em, op):
    STORES.wait(em, op.attrs["pending"])
    return []


def emit_fence_proxy_async(em, op):
    return []


HANDLERS = {"tma_load_at": emit_tma_load_at, "tma_store_at": emit_tma_store_at,
            "bulk_commit": emit_bulk_commit, "bulk_wait": emit_bulk_wait,
            "fence_proxy_async": emit_fence_proxy_async}
