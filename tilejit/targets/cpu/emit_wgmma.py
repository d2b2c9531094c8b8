"""The wgmma ops (``ir/ops_wgmma.py``) on the CPU's per-thread (SIMT) units.

``wgmma_desc`` encodes the descriptor as a GPU does: the element's byte address in the
CTA's shared window -- on the CPU its offset from the start of the CTA's data arena, where
the shared-memory plan puts every shared buffer -- in bits 0-13 (>> 4), or'ed with the
op's constant fields (``MatrixDescriptor.encode``).

``wgmma_mma_async`` decodes both descriptors at run time exactly as the hardware reads
them (``MatrixDescriptor.element_address``: start address, LBO, SBO, the swizzle's XOR of
the 16-byte chunk with the 128-byte row), so a descriptor that names the wrong bytes gives
the wrong numbers here too. Each thread computes its own N / 2 accumulators of D -- row
and column from ``layout/hw_nvidia.wgmma_acc_layout`` over ``tid_in_wg``, one constant
table of positions -- as ``D[r, c] (* scale_d) + sum_k A[r, k] * B[k, c]`` in f32, k in
order (16 k's, 32 for fp8, whose values and products are exact in f32), reading A and B
from shared memory when the multiply is issued: a legal schedule of the asynchronous op
(its operands must stay unchanged until the wait). No thread needs another's values, so
the warpgroup does not meet here; the op is ``.sync.aligned``, so the whole warpgroup must
be active (a compile error otherwise).

``wgmma_mma_async_reg_a`` (A from registers) computes the same dot products with A's
rows taken from the registers of the four lanes that hold each: a warp owns the same 16
rows of A (``wgmma_a_register_layout``) and of D, so the warp meets (``warp_exchange``)
and each lane reads its rows whole from the exchanged 16 x K block; B as above.

The multiply's shared reads complete late, as on a GPU: with the race detector on, each
``wgmma_mma_async`` is queued in its unit's queue of multiplies (``deferred.py``: its
descriptors, A's and B's buffers and race sites) in the open group, ``wgmma_commit_group``
closes the group and ``wgmma_wait_group {pending = N}`` records, for the race detector,
the reads of the whole 64 x K block of A (none with A in registers) and K x N block of B
of each multiply in the groups before the N most recent, then drops them. A kernel that
lets another thread overwrite an operand (an mbarrier arrive, a barrier) before the wait
that retires its multiply is a race there, as the hardware may still read it; so is any
write to an operand made between the issue and that wait (the queued multiply keeps the
CTA's count of writes at its issue: ``race.access_function``'s ``since``), by any thread,
the multiplying one too, whatever barriers lie between: the values are computed at the
issue, a legal schedule, so without that check such a kernel would come out right here
and not on a GPU. (A full queue drops its multiplies without recording their reads: that
can hide such a race, never invent one.) Fence, commit and wait hand the accumulators on. That a wait is missing before a read of the
accumulators is the verifier's refusal and the ``wgmma-groups`` pass's, before any target.

``setmaxnreg`` is a no-op: a CPU thread's registers are the compiler's. Its checks (the
count, whole warpgroups at team warpgroup) are the verifier's and scope analysis's, so a
kernel that breaks them fails on the CPU as it would for the GPU.
"""
from __future__ import annotations

import functools

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.ops_wgmma import (CORE_BYTES, CORE_ROWS, DESCRIPTOR_SWIZZLE, WGMMA_A_VALUES,
                                  WGMMA_K_BYTES, WGMMA_M, MatrixDescriptor, wgmma_k)
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP
from tilejit.layout.hw_nvidia import wgmma_a_register_layout, wgmma_acc_layout

from . import race, types
from .deferred import DeferredQueue
from .emit_mma import constant_table, table_entry
from .emit_sync import warp_exchange
from .frames import counted_loop
from .types import F32, I1, I32, I64, PTR

__all__ = ["HANDLERS", "descriptor_bits", "element_address", "operand_buffer"]

QUEUE = 32                          # multiplies a unit keeps in flight (8 K steps of 4)
# A queued multiply: its descriptors, A's and B's buffers, their race sites, N, whether A
# and B are read MN-major, the operands' element size (both the same: 2, or 1 for fp8), the
# CTA's count of writes at its issue (``race.writes_so_far``), its group; a unit's queue:
# length, groups committed, entries.
ENTRY = ir.LiteralStructType([I64, I64, PTR, PTR, I32, I32, I32, I32, I32, I32, I32, I32])
DESC_A, DESC_B, BASE_A, BASE_B, SITE_A, SITE_B, N, TRANS_A, TRANS_B, ITEMSIZE, ISSUED, GROUP = \
    range(12)
STATE = ir.LiteralStructType([I32, I32, ir.ArrayType(ENTRY, QUEUE)])
LENGTH, COMMITTED, ENTRIES = range(3)
A_FROM_REGISTERS = 2                # TRANS_A of a multiply with A in registers: no A reads
ENTRY_BYTES = 64                    # 4 x 8 bytes, then 8 x 4
STATE_BYTES = 8 + ENTRY_BYTES * QUEUE


def _require_whole_warpgroup(em) -> None:
    active = em.state.active
    if active is None or not active.whole_warpgroups:
        where = "not known here" if active is None else active.describe()
        raise CompilationError(f"wgmma_mma_async needs every thread of its warpgroup (128); "
                               f"the active threads are {where}")


def descriptor_bits(em, buf, offset, fields: MatrixDescriptor) -> ir.Value:
    """The descriptor of ``buf[offset]``: its byte offset in the CTA's shared window (the
    data arena) in bits 0-13 (>> 4), or'ed with ``fields`` (their start 0) encoded."""
    b, ref = em.b, em[buf]
    element = ref.element_ptr_at(b, types.to_i64(b, em[offset], offset.type))
    address = b.sub(b.ptrtoint(element, I64), b.ptrtoint(em.frame.data, I64))
    start = b.and_(b.lshr(address, ir.Constant(I64, 4)), ir.Constant(I64, 0x3FFF))
    return b.or_(ir.Constant(I64, fields.encode()), start)


def emit_wgmma_desc(em, op):
    return [descriptor_bits(em, *op.operands, MatrixDescriptor(
        0, op.attrs["lbo"], op.attrs["sbo"], op.attrs["swizzle"], op.attrs["base_offset"]))]


def element_address(b: ir.IRBuilder, desc, mn, k, itemsize, k_major: bool):
    """``MatrixDescriptor.element_address`` on a run-time descriptor of either version
    (wgmma's or tcgen05's swizzle field, told apart by bit 46), in i64 (``itemsize`` an i64
    value: the race detector reads it from a queued multiply)."""
    def const(value):
        return ir.Constant(I64, value)

    def field(shift):
        return b.shl(b.and_(b.lshr(desc, const(shift)), const(0x3FFF)), const(4))
    start, lbo, sbo = field(0), field(16), field(32)
    version = b.and_(b.lshr(desc, const(46)), const(1))
    swizzle = const(0)
    for number, (shift, codes) in DESCRIPTOR_SWIZZLE.items():
        code = b.and_(b.lshr(desc, const(shift)), const(7))
        for nbytes, value in codes.items():
            hit = b.and_(b.icmp_unsigned("==", version, const(number)),
                         b.icmp_unsigned("==", code, const(value)))
            swizzle = b.select(hit, const(nbytes), swizzle)
    swizzled = b.icmp_unsigned("!=", swizzle, const(0))
    per_chunk = b.udiv(const(CORE_BYTES), itemsize)
    if k_major:
        plain = b.add(b.add(b.mul(b.udiv(mn, const(CORE_ROWS)), sbo),
                            b.mul(b.urem(mn, const(CORE_ROWS)), const(CORE_BYTES))),
                      b.add(b.mul(b.udiv(k, per_chunk), lbo),
                            b.mul(b.urem(k, per_chunk), itemsize)))
        wide = b.add(b.add(b.mul(b.udiv(mn, const(CORE_ROWS)), sbo),
                           b.mul(b.urem(mn, const(CORE_ROWS)), swizzle)),
                     b.mul(k, itemsize))
    else:
        plain = b.add(b.add(b.mul(b.udiv(mn, per_chunk), sbo),
                            b.mul(b.urem(mn, per_chunk), itemsize)),
                      b.add(b.mul(b.udiv(k, const(CORE_ROWS)), lbo),
                            b.mul(b.urem(k, const(CORE_ROWS)), const(CORE_BYTES))))
        across = b.udiv(b.select(swizzled, swizzle, const(CORE_BYTES)), itemsize)
        wide = b.add(b.add(b.mul(b.udiv(mn, across), lbo),
                           b.mul(b.urem(mn, across), itemsize)),
                     b.add(b.mul(b.udiv(k, const(CORE_ROWS)), sbo),
                           b.mul(b.urem(k, const(CORE_ROWS)), swizzle)))
    address = b.add(start, b.select(swizzled, wide, plain))
    mask = b.select(swizzled, b.sub(b.udiv(swizzle, const(CORE_BYTES)), const(1)), const(0))
    return b.xor(address, b.shl(b.and_(b.lshr(address, const(7)), mask), const(4)))


def _dot_function(mc, a_type, b_type, trans_a: bool, trans_b: bool,
                  a_in_registers: bool = False) -> ir.Function:
    """``dot(data, a, desc_b, row, col, acc)``: ``acc + sum_k A[row, k] * B[k, col]`` in
    f32, B read from the shared window at ``data`` through its descriptor; A too, ``a``
    its descriptor, or with ``a_in_registers`` from the warp's exchanged A rows (``a`` a
    pointer to 16 x K f32, row-major; ``row`` then counts from the warp's first)."""
    name = (f"tj.wgmma.dot.{a_type}.{b_type}.{'t' if trans_a else 'n'}"
            f"{'t' if trans_b else 'n'}{'.reg_a' if a_in_registers else ''}")
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(
        F32, [PTR, PTR if a_in_registers else I64, I64, I64, I64, F32]), name)
    fn.linkage = "internal"
    data, a_source, desc_b, row, col, acc = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    depth = wgmma_k(a_type)

    def element(desc, dtype, mn, k, k_major):
        address = element_address(b, desc, mn, ir.Constant(I64, k),
                                  ir.Constant(I64, dtype.itemsize), k_major)
        ptr = b.gep(data, [address], source_etype=ir.IntType(8))
        return types.widen(b, types.load(b, ptr, dtype), dtype)

    def a_element(k):
        if not a_in_registers:
            return element(a_source, a_type, row, k, not trans_a)
        index = b.add(b.mul(row, ir.Constant(I64, depth)), ir.Constant(I64, k))
        return b.load(b.gep(a_source, [index], source_etype=F32), typ=F32)
    for k in range(depth):
        acc = b.fadd(acc, b.fmul(a_element(k), element(desc_b, b_type, col, k, not trans_b)))
    b.ret(acc)
    return fn


def emit_wgmma_mma_async(em, op):
    _require_whole_warpgroup(em)
    attrs = op.attrs
    dot = _dot_function(em.mc, attrs["a_type"], attrs["b_type"] or attrs["a_type"],
                        attrs["trans_a"], attrs["trans_b"])
    desc_a, desc_b, *acc = em.operands(op)
    if em.mc.race is not None:
        _queue_multiply(em, op, desc_a, desc_b)
    return _multiply(em, op, dot, desc_a, desc_b, acc, lambda row: row)


def emit_wgmma_mma_async_reg_a(em, op):
    """A from registers: the four lanes holding a row's A values are in one warp (a warp
    owns 16 rows of A and the same 16 of D), so the warp meets (``warp_exchange``) with
    each lane's eight values widened to f32 at their places in its 16 x 16 block of A
    (``wgmma_a_register_layout``), and each lane then reads its rows whole."""
    _require_whole_warpgroup(em)
    b, attrs = em.b, op.attrs
    depth, rows = wgmma_k(attrs["a_type"]), WGMMA_M // WARPS_PER_WARPGROUP
    places = _a_register_places(depth)
    table = constant_table(em.mc, "tj.wgmma.reg_a.places", places)
    b_desc, *values = em.operands(op)
    a_values, acc = values[:WGMMA_A_VALUES], values[WGMMA_A_VALUES:]
    first = b.mul(em.mc.units.thread_index(b, "lane_id", em.frame.unit),
                  ir.Constant(I32, WGMMA_A_VALUES))

    def deposit(area):
        for i, (value, operand) in enumerate(zip(a_values, op.operands[1:])):
            at = b.zext(table_entry(em, table, b.add(first, ir.Constant(I32, i))), I64)
            b.store(types.widen(b, value, operand.type), b.gep(area, [at], source_etype=F32))
    area = warp_exchange(em, op, "wgmma_reg_a", len(places) * 4, deposit, op.name)
    dot = _dot_function(em.mc, attrs["a_type"], attrs["a_type"], False, attrs["trans_b"],
                        a_in_registers=True)
    if em.mc.race is not None:
        _queue_multiply(em, op, None, b_desc)
    return _multiply(em, op, dot, area, b_desc, acc,
                     lambda row: b.urem(row, ir.Constant(I64, rows)))


@functools.cache
def _a_register_places(depth: int) -> tuple[int, ...]:
    """Per lane, per A value (lane * 8 + i): its place row * K + k in warp 0's 16 x K
    block of A (the same in every warp), by ``wgmma_a_register_layout``; computed once per
    K, not per multiply."""
    layout = wgmma_a_register_layout((WGMMA_M, depth))
    places = [None] * (LANES_PER_WARP * WGMMA_A_VALUES)
    for flat in range(WGMMA_M // WARPS_PER_WARPGROUP * depth):
        place = layout.apply(flat)
        places[place["laneid"] * WGMMA_A_VALUES + place["m"]] = flat
    return tuple(places)


@functools.cache
def _accumulator_places(n: int) -> tuple[int, ...]:
    """Per thread of the warpgroup, per accumulator (thread * N / 2 + i): its row * N +
    column in wgmma's D layout; computed once per N, not per multiply (64 N layout
    lookups each)."""
    layout = wgmma_acc_layout(n, warp_axis="tid_in_wg")
    places = [None] * (WGMMA_M * n)
    for flat in range(WGMMA_M * n):
        place = layout.apply(flat)
        places[place["tid_in_wg"] * (n // 2) + place["m"]] = flat
    return tuple(places)


def _multiply(em, op, dot, a_source, desc_b, acc, a_row):
    """The thread's new accumulators: each ``dot(data, a_source, desc_b, a_row(row), col,
    D[row, col] or 0)``, row and column from one constant table of wgmma's D layout."""
    b, units, attrs = em.b, em.mc.units, op.attrs
    n = attrs["n"]
    table = constant_table(em.mc, f"tj.wgmma.m64n{n}.places", _accumulator_places(n))
    thread = b.and_(units.thread_index(b, "thread_id", em.frame.unit),
                    ir.Constant(I32, LANES_PER_WARP * WARPS_PER_WARPGROUP - 1))
    first = b.mul(thread, ir.Constant(I32, n // 2))
    results = []
    for i, value in enumerate(acc):
        flat = b.zext(table_entry(em, table, b.add(first, ir.Constant(I32, i))), I64)
        row, col = b.udiv(flat, ir.Constant(I64, n)), b.urem(flat, ir.Constant(I64, n))
        start = value if attrs["scale_d"] else ir.Constant(F32, 0.0)
        results.append(b.call(dot, [em.frame.data, a_source, desc_b, a_row(row), col, start]))
    return results


def _retire(b, mc, state, i) -> None:
    """A multiply leaves the queue: its reads were recorded at the wait that retired it
    (emit_wgmma_wait_group), or, from a full queue, are not."""


MULTIPLIES = DeferredQueue("wgmma", STATE, STATE_BYTES, ENTRY_BYTES, QUEUE, LENGTH, COMMITTED,
                           ENTRIES, GROUP, _retire)


def operand_buffer(em, op, desc: ir.Value, side: str):
    """The buffer a descriptor names (the wgmma_desc's or tcgen05_desc's root buffer) and a
    race site for its reads; the CTA's whole shared window where the descriptor comes from
    elsewhere."""
    owner = desc.owner
    if getattr(owner, "name", None) in ("wgmma_desc", "tcgen05_desc"):
        ref = em[owner.operands[0]]
        return ref.ptr, em.mc.add_site("race", op, buffer=ref.name, access=race.READ)
    return em.frame.data, em.mc.add_site("race", op, buffer=f"wgmma's {side}",
                                         access=race.READ)


def _queue_multiply(em, op, desc_a, desc_b) -> None:
    """Queue a multiply's shared reads; ``desc_a`` None: A is in registers (B's only)."""
    b_desc = op.operands[0 if desc_a is None else 1]
    base_b, site_b = operand_buffer(em, op, b_desc, "B")
    base_a, site_a = (base_b, site_b) if desc_a is None else \
        operand_buffer(em, op, op.operands[0], "A")
    attrs = op.attrs
    trans_a = A_FROM_REGISTERS if desc_a is None else int(attrs["trans_a"])
    MULTIPLIES.enqueue(em, MULTIPLIES.unit_state(em), {
        DESC_A: desc_a or ir.Constant(I64, 0), DESC_B: desc_b, BASE_A: base_a, BASE_B: base_b,
        SITE_A: ir.Constant(I32, site_a), SITE_B: ir.Constant(I32, site_b),
        N: ir.Constant(I32, attrs["n"]), TRANS_A: ir.Constant(I32, trans_a),
        TRANS_B: ir.Constant(I32, int(attrs["trans_b"])),
        ITEMSIZE: ir.Constant(I32, attrs["a_type"].itemsize), ISSUED: race.writes_so_far(em)})


def _reads_function(mc) -> ir.Function:
    """``i1 tj.wgmma.reads(err, sync, data, clock, unit, entry)``: record, for the race detector,
    the reads of the queued multiply ``entry``: A's 64 x K block and B's K x N (K of 32
    bytes), in flight since its issue; true on a race (the error record filled)."""
    name = "tj.wgmma.reads"
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(I1, [PTR, PTR, PTR, PTR, I32, PTR]), name)
    fn.linkage = "internal"
    err, sync, data, clock, unit, entry = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    raced = fn.append_basic_block("raced")

    def field(index, typ):
        return b.load(b.gep(entry, [ir.Constant(I32, 0), ir.Constant(I32, index)],
                            source_etype=ENTRY), typ=typ)

    itemsize, since = b.zext(field(ITEMSIZE, I32), I64), field(ISSUED, I32)
    depth = b.udiv(ir.Constant(I64, WGMMA_K_BYTES), itemsize)

    def read_block(desc, base, site, trans, count):
        """Every (mn, k) of a count x K block read through ``desc``."""
        mn_major = b.icmp_unsigned("!=", trans, ir.Constant(I32, 0))

        def row(mn):
            def element(k):
                address = b.select(mn_major,
                                   element_address(b, desc, mn, k, itemsize, False),
                                   element_address(b, desc, mn, k, itemsize, True))
                ptr = b.gep(data, [address], source_etype=ir.IntType(8))
                failed = b.call(race.access_function(mc),
                                [err, sync, data, clock, unit, ptr, base, itemsize,
                                 site, ir.Constant(I32, race.READ), since])
                go_on = fn.append_basic_block("read.ok")
                b.cbranch(failed, raced, go_on)
                b.position_at_end(go_on)
            counted_loop(b, depth, element, "k")
        counted_loop(b, count, row, "mn")
    trans_a = field(TRANS_A, I32)
    with b.if_then(b.icmp_unsigned("!=", trans_a, ir.Constant(I32, A_FROM_REGISTERS))):
        read_block(field(DESC_A, I64), field(BASE_A, PTR), field(SITE_A, I32), trans_a,
                   ir.Constant(I64, WGMMA_M))
    read_block(field(DESC_B, I64), field(BASE_B, PTR), field(SITE_B, I32),
               field(TRANS_B, I32), b.zext(field(N, I32), I64))
    b.ret(ir.Constant(I1, 0))
    b.position_at_end(raced)
    b.ret(ir.Constant(I1, 1))
    return fn


def emit_wgmma_commit_group(em, op):
    if em.mc.race is not None:
        MULTIPLIES.commit(em)
    return list(em.operands(op))


def emit_wgmma_wait_group(em, op):
    """Record the reads of the multiplies the wait retires (the queue's prefix of groups
    before the ``pending`` most recent), then drop them."""
    if em.mc.race is not None:
        pending = op.attrs["pending"]
        MULTIPLIES.retiring(em, pending,
                            lambda entry: race.check_retired(em, _reads_function(em.mc), entry))
        MULTIPLIES.wait(em, pending)
    return list(em.operands(op))


def _hand_on(em, op):
    return list(em.operands(op))


def _no_op(em, op):
    return []


HANDLERS = {"wgmma_desc": emit_wgmma_desc, "wgmma_mma_async": emit_wgmma_mma_async,
            "wgmma_mma_async_reg_a": emit_wgmma_mma_async_reg_a,
            "wgmma_fence": _hand_on, "wgmma_commit_group": emit_wgmma_commit_group,
            "wgmma_wait_group": emit_wgmma_wait_group,
            "setmaxnreg": _no_op}
