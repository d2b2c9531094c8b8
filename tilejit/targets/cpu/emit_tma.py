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
detector records a load's shared writes when it is issued, and a store's shared reads
both then and at the ``bulk_wait`` that retires it: they are in flight in between (the
hardware reads the box any time before ``cp.async.bulk.wait_group.read``), so a write to
the box made after the issue races with them, whatever barriers lie between
(``race.access_function``'s ``since``), as one that the wait is not ordered before does.
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
# the race detector's record of a store's box read (err, sync, data, clock, unit, shared,
# byte offset, site, the CTA's count of writes at the issue): true on a race
READS_FN = ir.FunctionType(I1, [PTR, PTR, PTR, PTR, I32, PTR, I64, I32, I32])
# A queued store: its box function, shared root, byte offset, tensor, args, and for the
# race detector its reads' function, race site and count of writes at the issue; its
# group; a unit's state: queue length, groups committed, the args of its loads, the queue.
ENTRY = ir.LiteralStructType([PTR, PTR, I64, PTR, ir.ArrayType(I64, ARGS), PTR, I32, I32,
                              I32])
FN, SHARED, OFFSET, TENSOR, ARGV, READS, SITE, ISSUED, GROUP = range(9)
STATE = ir.LiteralStructType([I32, I32, ir.ArrayType(I64, ARGS), ir.ArrayType(ENTRY, QUEUE)])
LENGTH, COMMITTED, SCRATCH, ENTRIES = range(4)
ENTRY_BYTES = 4 * 8 + ARGS * 8 + 8 + 16      # ..., the reads' function, 3 x 4 padded to 8
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


def _reads_fn(mc, box: tuple, swizzle: int, itemsize: int) -> ir.Function:
    """``tj.tma.reads...`` (``READS_FN``): check and record a retired store's reads of
    its box, in flight since the CTA had made ``since`` writes."""
    name = f"tj.tma.reads.{itemsize}.{swizzle}." + "x".join(map(str, box))
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, READS_FN, name)
    fn.linkage = "internal"
    err, sync, data, clock, unit, shared, offset, site, since = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    raced = fn.append_basic_block("raced")

    def element(i):
        ptr = b.gep(shared, [_shared_byte(b, offset, i, itemsize, swizzle)], source_etype=I8)
        failed = b.call(race.access_function(mc),
                        [err, sync, data, clock, unit, ptr, shared, ir.Constant(I64, itemsize),
                         site, ir.Constant(I32, race.READ), since])
        go_on = fn.append_basic_block("read.ok")
        b.cbranch(failed, raced, go_on)
        b.position_at_end(go_on)
    counted_loop(b, ir.Constant(I64, math.prod(box)), element, "box")
    b.ret(ir.Constant(I1, 0))
    b.position_at_end(raced)
    b.ret(ir.Constant(I1, 1))
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
    itemsize = shared.dtype.itemsize
    fields = {FN: _box_fn(em.mc, False, box, swizzle, itemsize), SHARED: shared.ptr,
              OFFSET: offset, TENSOR: tensor.ptr}
    if em.mc.race is not None:
        fields.update({READS: _reads_fn(em.mc, box, swizzle, itemsize),
                       SITE: ir.Constant(I32, race.access_site(em, op, shared, race.READ)),
                       ISSUED: race.writes_so_far(em)})
    index = STORES.enqueue(em, state, fields)
    _write_args(em, STORES.field(b, state, ENTRIES, index, ARGV, 0), tensor, coords)
    return []


def emit_bulk_commit(em, op):
    STORES.commit(em)
    return []


def emit_bulk_wait(em, op):
    """Record the retired stores' reads of their boxes (for the race detector), then land
    them."""
    pending, b = op.attrs["pending"], em.b
    if em.mc.race is not None:
        def reads(entry):
            def field(index, typ):
                return b.load(b.gep(entry, [ir.Constant(I32, 0), ir.Constant(I32, index)],
                                    source_etype=ENTRY), typ=typ)
            race.check_retired(em, field(READS, READS_FN.as_pointer()), field(SHARED, PTR),
                               field(OFFSET, I64), field(SITE, I32), field(ISSUED, I32))
        STORES.retiring(em, pending, reads)
    STORES.wait(em, pending)
    return []


def emit_fence_proxy_async(em, op):
    return []


HANDLERS = {"tma_load_at": emit_tma_load_at, "tma_store_at": emit_tma_store_at,
            "bulk_commit": emit_bulk_commit, "bulk_wait": emit_bulk_wait,
            "fence_proxy_async": emit_fence_proxy_async}
