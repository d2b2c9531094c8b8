"""Kernel IR -> one LLVM module: the unit function(s), the scheduler, ``run_ctas``.

``run_ctas(args)`` unpacks the argument slots once, allocates the per-CTA memory (shared
data and sync state) once per call, and runs the CTAs of the chunks it claims (``abi``)
one after the other: return early if the launcher asked it to stop, compute the CTA's
coordinates, zero the sync state (NaN-fill the data in debug mode), then call the CTA
body -- the plain unit function, or the scheduler of the unit coroutines. A kernel with
clusters of C > 1 CTAs runs whole clusters instead (the linear ids it claims are
clusters'): C copies of each arena and of the context, the peers table that lets each CTA
reach the others' arenas, and the cluster's own state (``ModuleContext.cluster``). Argument slots
reach the body as function parameters so that LLVM sees them as loop invariants (and
global pointers as ``noalias`` when the caller promises it).
"""
from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from tilejit.ir.core import KernelIR
from tilejit.ir.types import MemScope, f64

from . import (abi, emit_async, emit_cluster, emit_control, emit_memory, emit_mma,
               emit_native, emit_sync, emit_tcgen05, emit_tma, emit_vector, emit_wgmma, race,
               types)
from .emit_memory import BufferRef, fill_bytes
from .emitter import CompileOptions, Emitter, ModuleContext
from .types import F32, F64, I32, I64, PTR, VOID
from .frames import (CTX, CTX_ALIVE, CTX_ERR, CTX_ERROR, CTX_PEERS, CTX_PROGRESS, CTX_STOP,
                     CoroFrame, PlainFrame, counted_loop)
from .scheduler import emit_scheduler
from .units import UnitModel

HANDLERS = {**emit_native.HANDLERS, **emit_memory.HANDLERS, **emit_control.HANDLERS,
            **emit_sync.HANDLERS, **emit_mma.HANDLERS, **emit_async.HANDLERS,
            **emit_tma.HANDLERS, **emit_wgmma.HANDLERS, **emit_cluster.HANDLERS,
            **emit_tcgen05.HANDLERS, **emit_vector.HANDLERS}
ENTRY = "run_ctas"
ARENA_ALIGN = 64


def build_module(kernel: KernelIR, options: CompileOptions) -> tuple[ir.Module, dict]:
    """The LLVM module of ``kernel`` and the launcher's metadata for it."""
    module = ir.Module(name=kernel.name)
    units = UnitModel.for_kernel(kernel, options.granularity)
    mc = ModuleContext(module, kernel, options, units)
    # The shared-memory plan (passes/shared_plan.py) placed the shared buffers in one
    # block of this many bytes: it starts the data arena, so their offsets are its own.
    mc.data.reserve(kernel.attrs["shared_bytes"] or 0, ARENA_ALIGN, "the kernel's shared memory")
    mc.tmem = emit_tcgen05.reserve_tmem(mc)   # tensor memory follows, when tcgen05 runs
    mc.race = race.setup(mc)   # SIMT mode's race detector (with bounds checks)
    params = abi.param_slots(kernel)
    slot_types, slot_attrs = _slot_types(kernel, params, options)
    frame = (CoroFrame if units.coroutine else PlainFrame)(mc, slot_types, slot_attrs)
    em = Emitter(mc, frame, HANDLERS)
    race.start(em)
    values = _param_values(params, frame.slots)
    _assume_multiples_of_16(frame.builder, kernel, params, values)
    em.bind(kernel.params, values)
    em.emit_block(kernel.body)
    race.finish(em)
    frame.finish()
    body = emit_scheduler(mc, frame.fn, frame.wait_records) if units.coroutine else frame.fn
    _emit_run_ctas(mc, params, body)
    meta = {
        "name": kernel.name, "entry": ENTRY, "file": kernel.loc.file, "line": kernel.loc.line,
        "params": [p.describe() for p in params], "struct_format": abi.struct_format(params),
        "num_warps": kernel.attrs["num_warps"], "cluster": list(kernel.attrs["cluster"]),
        "granularity": str(units.kind),
        "units_per_cta": units.count, "sites": mc.sites, "debug": options.debug,
        "noalias": options.noalias, "data_bytes": mc.data.size, "sync_bytes": mc.sync.size,
        "spin_loops": frame.spin_loops, "race_check": mc.race is not None,
        "cluster_ctas": units.ctas,
    }
    return module, meta


def _slot_types(kernel, params, options) -> tuple[list, list]:
    """LLVM type and parameter attributes of every argument slot."""
    slot_types, slot_attrs = [], []
    specialization = kernel.attrs["specialization"]
    for p in params:
        if not p.is_buffer:
            slot_types.append(types.register_type(p.type))
            slot_attrs.append({})
            continue
        flags = specialization.get(p.name, ())
        slot_types.append(PTR)
        slot_attrs.append({"flags": ("noalias",) if options.noalias else (),
                           "align": 16 if "aligned16" in flags else None})
        slot_types += [I64] * (2 * p.type.rank)
        slot_attrs += [{}] * (2 * p.type.rank)
    return slot_types, slot_attrs


def _param_values(params, slots) -> list:
    """What each kernel parameter is inside the body: a BufferRef or a scalar value."""
    values, slots = [], iter(slots)
    for p in params:
        if not p.is_buffer:
            values.append(next(slots))
            continue
        t = p.type
        ptr = next(slots)
        dims = [next(slots) for _ in range(t.rank)]
        strides = [next(slots) for _ in range(t.rank)]
        # Static sizes are checked at launch; as constants they let LLVM vectorize.
        dims = [d if static is None else static for d, static in zip(dims, t.shape)]
        static_strides = t.strides or (None,) * t.rank
        strides = [s if static is None else static for s, static in zip(strides, static_strides)]
        values.append(BufferRef(ptr, t.dtype, MemScope.GLOBAL, p.name, dims, strides=strides))
    return values


def _assume_multiples_of_16(b: ir.IRBuilder, kernel, params, values) -> None:
    """Tell LLVM which int arguments the runtime found divisible by 16 (``div16``), so that
    loops bounded by them need no remainder code for vectors of up to 16 lanes."""
    specialization = kernel.attrs["specialization"]
    for p, value in zip(params, values):
        if not p.is_buffer and "div16" in specialization.get(p.name, ()):
            low_bits = b.and_(value, ir.Constant(value.type, 15))
            b.assume(b.icmp_signed("==", low_bits, ir.Constant(value.type, 0)))


def _load_slots(b: ir.IRBuilder, args, params) -> list:
    def slot(index):
        return b.gep(args, [ir.Constant(I32, index)], source_etype=I64)

    values = []
    for p in params:
        if p.is_buffer:
            values.append(b.load(slot(p.first_slot), typ=PTR))
            values += [b.load(slot(p.first_slot + 1 + i), typ=I64) for i in range(2 * p.type.rank)]
        elif p.type.is_float:
            wire = F64 if p.type == f64 else F32  # narrower floats travel as f32
            values.append(types.narrow(b, b.load(slot(p.first_slot), typ=wire), p.type))
        else:
            values.append(types.load(b, slot(p.first_slot), p.type, align=8))
    return values


def _emit_run_ctas(mc: ModuleContext, params, body: ir.Function) -> None:
    m, units, ctas = mc.module, mc.units, mc.units.ctas
    fn = ir.Function(m, ir.FunctionType(I32, [PTR]), ENTRY)
    args, = fn.args
    args.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def header(slot: int, typ=I64):
        return b.load(b.gep(args, [ir.Constant(I32, slot)], source_etype=I64), typ=typ)

    first, last = header(abi.FIRST_CTA), header(abi.LAST_CTA)
    err, stop = header(abi.ERR_ADDRESS, PTR), header(abi.STOP_ADDRESS, PTR)
    shared_claim, chunk = header(abi.CLAIM_ADDRESS, PTR), header(abi.CHUNK)
    max_claims = header(abi.MAX_CLAIMS)
    grid64 = [header(abi.HEADER_SLOTS + d) for d in range(abi.GRID_SLOTS)]
    slot_values = _load_slots(b, args, params)
    contexts_type = ir.ArrayType(CTX, ctas)
    contexts = types.alloca(b, contexts_type)
    first_ctx = b.gep(contexts, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                      source_etype=contexts_type)
    private_claim = b.alloca(I64)

    def ctx_field(rank: int, field: int):
        return b.gep(contexts, [ir.Constant(I32, 0), ir.Constant(I32, rank),
                                ir.Constant(I32, field)], source_etype=contexts_type)

    b.store(first, private_claim)
    claim = b.select(b.icmp_unsigned("==", shared_claim, ir.Constant(PTR, None)),
                     private_claim, shared_claim)
    # One allocation per arena holds the copies of every CTA of a cluster.
    strides = [_arena_size(size) for size in (mc.data.size, mc.sync.size, mc.cluster.size)]
    arenas = [_allocate(mc, b, size * count)
              for size, count in zip(strides, (ctas, ctas, 1))]
    peers = ir.Constant(PTR, None)
    if ctas > 1:
        table_type = ir.ArrayType(PTR, 2 * ctas + 1)
        peers = types.alloca(b, table_type)
        for index in range(2 * ctas + 1):
            kind, rank = divmod(index, ctas)
            base, _ = arenas[kind]
            entry = b.gep(peers, [ir.Constant(I32, 0), ir.Constant(I32, index)],
                          source_etype=table_type)
            b.store(b.gep(base, [ir.Constant(I64, rank * strides[kind])],
                          source_etype=ir.IntType(8)), entry)
    for rank in range(ctas):
        b.store(err, ctx_field(rank, CTX_ERR))
        b.store(stop, ctx_field(rank, CTX_STOP))
        b.store(peers, ctx_field(rank, CTX_PEERS))

    def free_arenas():
        if mc.streaming_stores:  # non-temporal stores are weakly ordered: drain them
            _store_fence(mc, b)
        for ptr, size in arenas:
            if size:
                b.call(mc.function("free", VOID, [PTR]), [ptr])

    # A failed allocation (a tile too large for this machine) is an error, not a fault.
    for ptr, size in arenas:
        if size:
            with b.if_then(b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False):
                for slot, value in ((abi.ERR_CODE, abi.OUT_OF_MEMORY), (abi.ERR_SITE, -1),
                                    (abi.ERR_UNIT, 0), (abi.ERR_VALUES, size)):
                    b.store(ir.Constant(I64, value),
                            b.gep(err, [ir.Constant(I32, slot)], source_etype=I64))
                next_cta = b.load_atomic(claim, "monotonic", 8, typ=I64)   # none ran
                b.store(next_cta, b.gep(err, [ir.Constant(I32, abi.ERR_CTA)], source_etype=I64))
                free_arenas()   # free(NULL) does nothing
                b.ret(ir.Constant(I32, abi.OUT_OF_MEMORY))

    grid = [b.trunc(g, I32) for g in grid64]
    cluster = mc.kernel.attrs["cluster"]
    # The claimed ids count clusters: in clusters of one CTA, CTAs.
    clusters64 = [b.udiv(g, ir.Constant(I64, c)) for g, c in zip(grid64, cluster)]

    def run_chunk(_):
        start = b.atomic_rmw("add", claim, chunk, "monotonic")
        with b.if_then(b.icmp_signed(">=", start, last), likely=False):
            free_arenas()   # every CTA is claimed
            b.ret(ir.Constant(I32, 0))
        end = b.select(b.icmp_signed("<", b.sub(last, start), chunk), last, b.add(start, chunk))
        counted_loop(b, b.sub(end, start), lambda index: run_cta(b.add(start, index)), "cta")

    def run_cta(cta):
        # The launcher sets ``stop`` from another thread (Ctrl-C): end at a CTA boundary.
        stopped = b.load_atomic(stop, "monotonic", 4, typ=I32)
        with b.if_then(b.icmp_unsigned("!=", stopped, ir.Constant(I32, 0)), likely=False):
            free_arenas()
            b.ret(ir.Constant(I32, abi.INTERRUPTED))
        x, rest = b.urem(cta, clusters64[0]), b.udiv(cta, clusters64[0])
        y, z = b.urem(rest, clusters64[1]), b.udiv(rest, clusters64[1])
        for ptr, size in arenas[1:]:   # the sync arenas and the cluster's state
            if size:
                fill_bytes(b, mc, ptr, size, 0)
        if mc.options.debug and mc.data.size:
            fill_bytes(b, mc, arenas[0][0], arenas[0][1], 0xFF)
        for rank in range(ctas):
            for field, value in ((CTX_ALIVE, ir.Constant(I32, units.count)),
                                 (CTX_PROGRESS, ir.Constant(I64, 0)),
                                 (CTX_ERROR, ir.Constant(I32, 0))):
                b.store(value, ctx_field(rank, field))
        unit = [] if units.coroutine else [ir.Constant(I32, 0)]
        coords = [b.trunc(b.mul(c, ir.Constant(I64, n)), I32)
                  for c, n in zip((x, y, z), cluster)]
        data_and_sync = [ptr for ptr, _ in arenas[:2]]
        status = b.call(body, [first_ctx, *unit, *data_and_sync, *coords, *grid, *slot_values])
        with b.if_then(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), likely=False):
            if ctas == 1:   # the scheduler of a cluster names the CTA that failed
                b.store(cta, b.gep(err, [ir.Constant(I32, abi.ERR_CTA)], source_etype=I64))
            free_arenas()
            b.ret(status)

    counted_loop(b, max_claims, run_chunk, "claim")   # 64-bit: a grid may hold 2^31 CTAs
    free_arenas()
    b.ret(ir.Constant(I32, 0))


def _store_fence(mc: ModuleContext, b: ir.IRBuilder) -> None:
    """Order the CTAs' non-temporal stores before anything that follows the launch:
    ``sfence``, the fence x86 documents for them (LLVM may turn a ``seq_cst`` fence into
    a locked instruction), or a full fence on other hosts."""
    if llvm.get_process_triple().startswith(("x86_64", "i686")):  # code runs on the host
        b.call(mc.function("llvm.x86.sse.sfence", VOID, []), [])
    else:
        b.fence("seq_cst")


def _arena_size(size: int) -> int:
    return -(-size // ARENA_ALIGN) * ARENA_ALIGN


def _allocate(mc, b, size: int):
    if not size:
        return ir.Constant(PTR, None), 0
    alloc = mc.function("aligned_alloc", PTR, [I64, I64])
    return b.call(alloc, [ir.Constant(I64, ARENA_ALIGN), ir.Constant(I64, size)]), size
