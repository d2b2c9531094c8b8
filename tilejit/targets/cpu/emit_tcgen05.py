"""The tcgen05 ops (``ir/ops_tcgen05.py``) on the CPU's per-thread (SIMT) units.

Tensor memory is a per-CTA array of 128 lanes x 512 columns of 32-bit cells in the data
arena, right after the planned shared memory (:func:`reserve_tmem`, when the kernel has
tcgen05 ops): NaN-filled in debug mode as shared memory is, and watched by the race
detector as shared memory is (its shadow covers both). Which columns are allocated is a
32-bit mask of 16 granules of 32 columns in the sync arena (zeroed per CTA), its top bit
set once the CTA relinquished its permit.

* ``tcgen05_alloc``: lane 0 of the warp takes the first run of free granules aligned to
  the request (columns are handed out in powers of two) and writes its address (lane 0,
  the first column) to the slot; none free, or an allocation after the permit was
  relinquished, is a run-time error naming the op. ``tcgen05_dealloc`` frees the run (an
  error when they are not allocated); ``tcgen05_relinquish_alloc_permit`` sets the mask's
  top bit; the fences order nothing the CPU defers.
* ``tcgen05_desc``: the version-1 descriptor of the element's shared address, as wgmma's.
* ``tcgen05_mma`` queues the multiply (its descriptors, TMEM address, instruction
  descriptor, whether it accumulates) in the issuing thread's queue; ``tcgen05_commit``
  completes every queued multiply -- decoding the instruction descriptor (M, N, A / B
  type, transposes) and both shared descriptors as the hardware does, reading A and B and
  writing D into tensor memory, each access recorded for the race detector as the issuing
  thread's -- then arrives once on the mbarrier. So a thread that reads the accumulator,
  or overwrites an operand, without waiting on that barrier races with the multiply; so
  does a write to an operand between the tcgen05_mma and its commit, barriers or not (the
  entry keeps the CTA's count of writes at the issue, as wgmma's queue does).
  D's rows sit on lanes as the data path lays them out (PTX ISA 9.7.16.10.5,
  ``layout/hw_nvidia.tmem_datapath_layout``): M = 128 is layout D (row r on lane r), M =
  64 layout F (rows 16w..16w+15 on lanes 32w..32w+15).
* ``tcgen05_ld`` (32x32b): warp w of its warpgroup reads lanes 32w..32w+31 only (another
  lane is a run-time error), thread l lane ``taddr.lane + l``, ``num`` columns from
  ``taddr.column``; ``tcgen05_wait_ld`` hands them on. ``tcgen05_st`` writes the same
  cells when it is issued (finishing early is a legal schedule), ``tcgen05_wait_st``
  waits for nothing.
"""
from __future__ import annotations

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.ops_tcgen05 import TCGEN05_K, TMEM_DESCRIPTOR_VERSION, instruction_descriptor
from tilejit.ir.ops_wgmma import MatrixDescriptor
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP
from tilejit.layout.hw_nvidia import TMEM_COLS, TMEM_LANES

from . import abi, race
from .emit_sync import emit_mbarrier_arrive
from .emit_wgmma import descriptor_bits, element_address, operand_buffer
from .frames import counted_loop
from .types import F32, I1, I32, I64, PTR
from .units import THREAD

__all__ = ["HANDLERS", "TMEM_BYTES", "reserve_tmem"]

TMEM_BYTES = TMEM_LANES * TMEM_COLS * 4
GRANULE = 32                 # columns per bit of the allocation mask
RELINQUISHED = 1 << 31       # the mask's bit for a relinquished permit
COLUMN_BITS = (1 << TMEM_COLS // GRANULE) - 1
QUEUE = 32                   # multiplies a thread may issue before it commits
# A queued multiply: A's and B's descriptors, A's and B's buffers (race sites' bases), the
# TMEM address, the instruction descriptor, whether it accumulates, its race sites for A,
# B and D, the CTA's count of writes at its issue (``race.writes_so_far``); a thread's
# queue: its length, then the entries.
ENTRY = ir.LiteralStructType([I64, I64, PTR, PTR, I32, I32, I32, I32, I32, I32, I32])
DESC_A, DESC_B, BASE_A, BASE_B, TADDR, IDESC, ACCUMULATE, SITE_A, SITE_B, SITE_D, ISSUED = \
    range(11)
STATE = ir.LiteralStructType([I32, ir.ArrayType(ENTRY, QUEUE)])
ENTRY_BYTES = 64                    # 4 x 8 bytes, then 7 x 4, padded to the i64s' 8
STATE_BYTES = 8 + ENTRY_BYTES * QUEUE


def uses_tmem(kernel) -> bool:
    return any(op.name.startswith("tcgen05_") for op in kernel.walk())


def reserve_tmem(mc) -> int | None:
    """The data arena's offset of tensor memory, reserved when the kernel has tcgen05 ops."""
    if not uses_tmem(mc.kernel):
        return None
    return mc.data.reserve(TMEM_BYTES, 64, "tensor memory (128 lanes x 512 columns)")


def _tmem(em) -> ir.Value:
    return em.byte_ptr(em.frame.data, em.mc.tmem)


def _per_thread(em, op) -> None:
    if em.mc.units.kind is not THREAD:
        raise CompilationError(f"{op.name} runs per thread on the CPU (SIMT mode); this kernel "
                               f"runs {em.mc.units.kind} units", op.loc)


def _i64(b, value):
    return b.zext(value, I64) if value.type != I64 else value


def _fail(em, op, ok, what: str, values=()) -> None:
    """A run-time error at ``op`` unless ``ok``: ``what`` formatted with ``values``."""
    em.fail_unless(ok, abi.TMEM, em.mc.add_site("tmem", op, what=what), values)


def _record(em, ptr, base, itemsize: int, site: int, kind: int) -> None:
    """The race detector's check of one access (nothing when it is off)."""
    if em.mc.race is not None:
        race.record_access(em, ptr, base, itemsize, site, kind)


def _mask(em):
    return em.byte_ptr(em.frame.sync, em.mc.sync_state("tcgen05.columns", 4))


def _lane0(em):
    b = em.b
    return b.icmp_unsigned("==", em.mc.units.thread_index(b, "lane_id", em.frame.unit),
                           ir.Constant(I32, 0))


def emit_tcgen05_alloc(em, op):
    _per_thread(em, op)
    b, cols = em.b, op.attrs["cols"]
    need = cols // GRANULE
    run = (1 << need) - 1
    with b.if_then(_lane0(em)):
        mask_ptr = _mask(em)
        mask = b.load(mask_ptr, typ=I32)
        _fail(em, op, b.icmp_unsigned("==", b.and_(mask, ir.Constant(I32, RELINQUISHED)),
                                      ir.Constant(I32, 0)),
              f"tcgen05_alloc of {cols} columns after the CTA relinquished its allocation "
              "permit (tcgen05_relinquish_alloc_permit)")
        start = ir.Constant(I32, -1)
        for first in reversed(range(0, TMEM_COLS // GRANULE, need)):   # the lowest wins
            free = b.icmp_unsigned("==", b.and_(mask, ir.Constant(I32, run << first)),
                                   ir.Constant(I32, 0))
            start = b.select(free, ir.Constant(I32, first), start)
        found = b.icmp_signed(">=", start, ir.Constant(I32, 0))
        used = b.mul(b.call(em.mc.function("llvm.ctpop.i32", I32, [I32]),
                            [b.and_(mask, ir.Constant(I32, COLUMN_BITS))]),
                     ir.Constant(I32, GRANULE))
        _fail(em, op, found, f"tcgen05_alloc of {cols} columns finds no free run: {{0}} of the "
                             f"{TMEM_COLS} tensor-memory columns are allocated", [used])
        b.store(b.or_(mask, b.shl(ir.Constant(I32, run), start)), mask_ptr)
        slot = em[op.operands[0]]
        ptr = slot.element_ptr_at(b, ir.Constant(I64, 0))
        _record(em, ptr, slot.ptr, 4, em.mc.add_site("race", op, buffer=slot.name,
                                                         access=race.WRITE), race.WRITE)
        b.store(b.mul(start, ir.Constant(I32, GRANULE)), ptr)
    return []


def emit_tcgen05_dealloc(em, op):
    _per_thread(em, op)
    b, cols = em.b, op.attrs["cols"]
    with b.if_then(_lane0(em)):
        taddr = em[op.operands[0]]
        column = b.and_(taddr, ir.Constant(I32, 0xFFFF))
        run = b.shl(ir.Constant(I32, (1 << cols // GRANULE) - 1),
                    b.udiv(column, ir.Constant(I32, GRANULE)))
        mask_ptr = _mask(em)
        mask = b.load(mask_ptr, typ=I32)
        _fail(em, op, b.icmp_unsigned("==", b.and_(mask, run), run),
              f"tcgen05_dealloc of {cols} columns at column {{0}}: they are not allocated",
              [b.zext(column, I64)])
        b.store(b.and_(mask, b.not_(run)), mask_ptr)
    return []


def emit_tcgen05_relinquish(em, op):
    _per_thread(em, op)
    b = em.b
    with b.if_then(_lane0(em)):
        mask_ptr = _mask(em)
        b.store(b.or_(b.load(mask_ptr, typ=I32), ir.Constant(I32, RELINQUISHED)), mask_ptr)
    return []


def emit_tcgen05_desc(em, op):
    return [descriptor_bits(em, *op.operands, MatrixDescriptor(
        0, op.attrs["lbo"], op.attrs["sbo"], op.attrs["swizzle"],
        version=TMEM_DESCRIPTOR_VERSION))]


def _queue(em):
    state = em.mc.sync_state("tcgen05.queue", em.mc.units.count * STATE_BYTES)
    offset = em.b.add(ir.Constant(I64, state), em.b.mul(em.b.zext(em.frame.unit, I64),
                                                        ir.Constant(I64, STATE_BYTES)))
    return em.byte_ptr(em.frame.sync, offset)


def _field(b, state, *path):
    return b.gep(state, [ir.Constant(I32, 0), *(ir.Constant(I32, p) if isinstance(p, int)
                                                  else p for p in path)], source_etype=STATE)


def emit_tcgen05_mma(em, op):
    _per_thread(em, op)
    b, (taddr, desc_a, desc_b) = em.b, em.operands(op)
    state = _queue(em)
    length = b.load(_field(b, state, 0), typ=I32)
    _fail(em, op, b.icmp_unsigned("<", length, ir.Constant(I32, QUEUE)),
          f"more than {QUEUE} tcgen05_mma issued by one thread before its tcgen05_commit")
    (base_a, site_a), (base_b, site_b) = (operand_buffer(em, op, value, side) for value, side
                                          in ((op.operands[1], "A"), (op.operands[2], "B")))
    site_d = em.mc.add_site("race", op, buffer="tensor memory", access=race.WRITE)
    values = {DESC_A: desc_a, DESC_B: desc_b, BASE_A: base_a, BASE_B: base_b, TADDR: taddr,
              IDESC: ir.Constant(I32, instruction_descriptor(op.attrs).encode()),
              ACCUMULATE: ir.Constant(I32, int(op.attrs["accumulate"])),
              SITE_A: ir.Constant(I32, site_a), SITE_B: ir.Constant(I32, site_b),
              SITE_D: ir.Constant(I32, site_d),
              ISSUED: race.writes_so_far(em) if em.mc.race is not None
              else ir.Constant(I32, race.NOT_IN_FLIGHT)}
    for index, value in values.items():
        b.store(value, _field(b, state, 1, length, index))
    b.store(b.add(length, ir.Constant(I32, 1)), _field(b, state, 0))
    return []


def _operand_ptr(b, data, desc, mn, k, k_major):
    """Where A's or B's 16-bit element (mn, k) lies, through ``desc`` (``k_major`` an i1)."""
    address = b.select(k_major, element_address(b, desc, mn, k, ir.Constant(I64, 2), True),
                       element_address(b, desc, mn, k, ir.Constant(I64, 2), False))
    return b.gep(data, [address], source_etype=ir.IntType(8))


def _operand(b, ptr, bf16):
    """The f16 or bf16 (``bf16`` an i1) element at ``ptr``, in f32."""
    bits = b.load(ptr, typ=ir.IntType(16))
    as_f16 = b.fpext(b.bitcast(bits, ir.HalfType()), F32)
    as_bf16 = b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)
    return b.select(bf16, as_bf16, as_f16)


def _multiply_function(mc) -> ir.Function:
    """``i1 tj.tcgen05.mma(err, sync, data, clock, unit, tmem, entry)``: complete the queued
    multiply ``entry``, recording its accesses for the race detector (when on); true on a
    race (the error record filled)."""
    name = "tj.tcgen05.mma"
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(I1, [PTR, PTR, PTR, PTR, I32, PTR, PTR]), name)
    fn.linkage = "internal"
    err, sync, data, clock, unit, tmem, entry = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    raced = fn.append_basic_block("raced")

    def field(index, typ):
        return b.load(b.gep(entry, [ir.Constant(I32, 0), ir.Constant(I32, index)],
                            source_etype=ENTRY), typ=typ)

    def const(value):
        return ir.Constant(I64, value)

    def bits(value, shift, width):
        return b.zext(b.and_(b.lshr(value, ir.Constant(I32, shift)),
                             ir.Constant(I32, (1 << width) - 1)), I64)
    # PTX ISA 9.7.16.4.2: M >> 4 at 24-28, N >> 3 at 17-22, transposes 15 / 16, A type 7-9
    idesc, taddr = field(IDESC, I32), field(TADDR, I32)
    m, n = b.shl(bits(idesc, 24, 5), const(4)), b.shl(bits(idesc, 17, 6), const(3))
    a_k_major = b.icmp_unsigned("==", bits(idesc, 15, 1), const(0))
    b_k_major = b.icmp_unsigned("==", bits(idesc, 16, 1), const(0))
    bf16 = b.icmp_unsigned("==", bits(idesc, 7, 3), const(1))
    accumulate = b.icmp_unsigned("!=", field(ACCUMULATE, I32), ir.Constant(I32, 0))
    desc_a, desc_b = field(DESC_A, I64), field(DESC_B, I64)
    lane0, column0 = bits(taddr, 16, 16), bits(taddr, 0, 16)

    def check(ptr, base, itemsize, site, kind):
        """The access, for the race detector: the operands' reads were in flight since
        the issue, D's write is the commit's."""
        if mc.race is None:
            return
        since = field(ISSUED, I32) if kind == race.READ else \
            ir.Constant(I32, race.NOT_IN_FLIGHT)
        failed = b.call(race.access_function(mc), [err, sync, data, clock, unit, ptr, base,
                                                   const(itemsize), site,
                                                   ir.Constant(I32, kind), since])
        go_on = fn.append_basic_block("access.ok")
        b.cbranch(failed, raced, go_on)
        b.position_at_end(go_on)

    def reads(desc, count, k_major, base, site):
        def row(mn):
            def element(k):
                check(_operand_ptr(b, data, desc, mn, k, k_major), base, 2, site, race.READ)
            counted_loop(b, const(TCGEN05_K), element, "k")
        counted_loop(b, count, row, "mn")
    reads(desc_a, m, a_k_major, field(BASE_A, PTR), field(SITE_A, I32))
    reads(desc_b, n, b_k_major, field(BASE_B, PTR), field(SITE_B, I32))

    def row(r):
        # data path D (M = 128): lane r; F (M = 64): 16 rows per 32-lane slab
        slab = b.add(b.mul(b.udiv(r, const(16)), const(32)), b.urem(r, const(16)))
        lane = b.add(lane0, b.select(b.icmp_unsigned("==", m, const(128)), r, slab))

        def column(c):
            cell = b.gep(tmem, [b.mul(b.add(b.mul(lane, const(TMEM_COLS)),
                                            b.add(column0, c)), const(4))],
                         source_etype=ir.IntType(8))
            check(cell, tmem, 4, field(SITE_D, I32), race.WRITE)
            total = b.select(accumulate, b.load(cell, typ=F32), ir.Constant(F32, 0.0))
            for k in range(TCGEN05_K):
                a = _operand(b, _operand_ptr(b, data, desc_a, r, const(k), a_k_major), bf16)
                w = _operand(b, _operand_ptr(b, data, desc_b, c, const(k), b_k_major), bf16)
                total = b.fadd(total, b.fmul(a, w))
            b.store(total, cell)
        counted_loop(b, n, column, "n")
    counted_loop(b, m, row, "m")
    b.ret(ir.Constant(I1, 0))
    b.position_at_end(raced)
    b.ret(ir.Constant(I1, 1))
    return fn


def emit_tcgen05_commit(em, op):
    """Complete the thread's queued multiplies, then arrive once on the barrier."""
    _per_thread(em, op)
    b, frame, state = em.b, em.frame, _queue(em)

    # the race detector's clock and clock entry of this thread (unused when it is off)
    clock, unit = (race.own_clock(em), race.unit_id(em)) if em.mc.race is not None else \
        (ir.Constant(PTR, None), frame.unit)

    def complete(i):
        failed = b.call(_multiply_function(em.mc), [frame.err, frame.sync, frame.data, clock,
                                                    unit, _tmem(em), _field(b, state, 1, i)])
        go_on = b.append_basic_block("tcgen05.done")
        b.cbranch(failed, frame.error_exit, go_on)
        b.position_at_end(go_on)
    counted_loop(b, b.load(_field(b, state, 0), typ=I32), complete, "tcgen05.complete")
    b.store(ir.Constant(I32, 0), _field(b, state, 0))
    return emit_mbarrier_arrive(em, op)


def _lane_cells(em, op):
    """This thread's first cell of a 32x32b access at the op's TMEM address (its lane: the
    address's lane, which must be its warp's first, plus its lane id) and a race site."""
    b, units, unit = em.b, em.mc.units, em.frame.unit
    taddr = em[op.operands[0]]
    lane, column = b.lshr(taddr, ir.Constant(I32, 16)), b.and_(taddr, ir.Constant(I32, 0xFFFF))
    warp = b.urem(units.thread_index(b, "warp_id", unit), ir.Constant(I32, WARPS_PER_WARPGROUP))
    first = b.mul(warp, ir.Constant(I32, LANES_PER_WARP))
    _fail(em, op, b.icmp_unsigned("==", b.and_(lane, ir.Constant(I32, ~31 & 0xFFFF)), first),
          f"{op.name} 32x32b by warp {{0}} of its warpgroup names TMEM lane {{1}}: the warp "
          "reaches lanes 32w..32w+31 only", [b.zext(warp, I64), b.zext(lane, I64)])
    mine = b.add(first, units.thread_index(b, "lane_id", unit))
    kind = race.WRITE if op.name == "tcgen05_st" else race.READ
    site = em.mc.add_site("race", op, buffer="tensor memory", access=kind)

    def cell(i: int) -> ir.Value:
        index = b.add(b.mul(_i64(b, mine), ir.Constant(I64, TMEM_COLS)),
                      _i64(b, b.add(column, ir.Constant(I32, i))))
        ptr = b.gep(_tmem(em), [b.mul(index, ir.Constant(I64, 4))], source_etype=ir.IntType(8))
        _record(em, ptr, _tmem(em), 4, site, kind)
        return ptr
    return cell


def emit_tcgen05_ld(em, op):
    _per_thread(em, op)
    cell = _lane_cells(em, op)
    return [em.b.load(cell(i), typ=F32) for i in range(op.attrs["num"])]


def emit_tcgen05_st(em, op):
    _per_thread(em, op)
    cell = _lane_cells(em, op)
    for i, value in enumerate(em.operands(op)[1:]):
        em.b.store(value, cell(i))
    return []


def _hand_on(em, op):
    return list(em.operands(op))


def _no_op(em, op):
    return []


HANDLERS = {"tcgen05_alloc": emit_tcgen05_alloc, "tcgen05_dealloc": emit_tcgen05_dealloc,
            "tcgen05_relinquish_alloc_permit": emit_tcgen05_relinquish, "tcgen05_fence": _no_op,
            "tcgen05_desc": emit_tcgen05_desc, "tcgen05_mma": emit_tcgen05_mma,
            "tcgen05_commit": emit_tcgen05_commit, "tcgen05_ld": emit_tcgen05_ld,
            "tcgen05_wait_ld": _hand_on, "tcgen05_st": emit_tcgen05_st,
            "tcgen05_wait_st": _no_op}
