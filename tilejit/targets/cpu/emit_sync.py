"""Synchronization between units: sync, warp shuffles, elect, mbarriers, single regions
and device_print.

All state lives in the CTA's sync arena (zeroed when a CTA starts). A rendezvous is
"arrive, then wait until the generation moves on": the last unit to arrive bumps the
generation (running a ``single`` region first), the others suspend in
``frame.wait_until``. With coarse units (one unit = the whole team) these ops need no
rendezvous: a shuffle returns its own (uniform) value, ``sync`` is a no-op and a
``single`` region runs inline.

mbarrier: per barrier ``(pending arrivals, expected count, tx bytes, phase)``. A phase
completes when no arrivals are pending and the tx count is zero; then the phase flips and
the pending count is reset. ``mbarrier_wait(bar, i, P)`` passes when the phase with
parity P has completed (current parity != P). Arrivals and expected bytes are scaled by
the threads the unit stands for. On the CPU an async copy completes at once and reports
its bytes with ``mbarrier_complete_tx(bar, i, bytes)`` (handled in ``emit_async``; a ``tma_load_at``
completes its box's bytes itself: ``emit_tma``).
A raw ``intrinsic`` op (``tj.ptx.<name>``) is refused: the CPU's own instructions are
typed ``cpu.*`` ops (``ops.py``, emitted by ``emit_vector``).

In SIMT mode the race detector (``race``) has arrivals release the unit's vector clock
and passed waits acquire it: ``sync`` and ``single`` rendezvous, mbarrier arrivals
(``mbarrier_arrive``, an arriving ``mbarrier_expect_tx``, ``mbarrier_complete_tx``) and
``mbarrier_wait``. Shuffles and ``elect_sync`` order no memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.ops_native import printf_conversions
from tilejit.ir.scope import LANES_PER_WARP
from tilejit.ir.types import TeamKind, i32

from . import abi, emit_native, race, types
from .frames import CTX_ALIVE
from .types import I1, I32, I64, PTR, VOID
from .units import instance_counts, threads_per_unit

MBARRIER_BYTES = 16
PENDING, EXPECTED, TX, PHASE = range(4)


@dataclass
class BarrierRef:
    ptr: ir.Value
    count: int
    name: str
    clocks: int | None = None   # offset of the race detector's clocks, one per index
    sync: ir.Value | None = None   # the sync arena holding it: another CTA's (tj.remote)


def rendezvous_field(em, base, index: int):
    """Field ``index`` (0: arrivals, 1: generation) of the rendezvous at ``base``."""
    return em.b.gep(base, [ir.Constant(I32, index)], source_etype=I32)



def _i32(em, value, t):
    return emit_native.cast(em, value, t, i32) if t != i32 else value


def _arrive(em, base) -> None:
    """Count this unit into the rendezvous at ``base`` (count, generation)."""
    count = rendezvous_field(em, base, 0)
    em.b.store(em.b.add(em.b.load(count, typ=I32), ir.Constant(I32, 1)), count)
    em.frame.progress()


def _generation_moved(em, base, gen0):
    return em.b.icmp_unsigned("!=", em.b.load(rendezvous_field(em, base, 1), typ=I32), gen0)


# ----------------------------------------------------------------------------- sync
def emit_sync(em, op):
    if not em.mc.units.coroutine:
        return []
    b, frame = em.b, em.frame
    base = em.byte_ptr(frame.sync, em.mc.sync_state("sync", 8))
    gen0 = b.load(rendezvous_field(em, base, 1), typ=I32)
    clocks = race.Rendezvous.make(em, 1, None, gen0, key=race.SYNC_CLOCKS)
    if clocks is not None:
        clocks.arrive(em)
    _arrive(em, base)
    site = em.mc.add_site("wait", op, what="sync() (CTA barrier)")

    def ready():  # finished units no longer take part
        count = b.load(rendezvous_field(em, base, 0), typ=I32)
        alive = b.load(frame.ctx_field(CTX_ALIVE), typ=I32)
        release = b.and_(b.icmp_unsigned(">=", count, alive),
                         b.not_(_generation_moved(em, base, gen0)))
        with b.if_then(release):
            b.store(ir.Constant(I32, 0), rendezvous_field(em, base, 0))
            if clocks is not None:
                clocks.released(em)
            b.store(b.add(gen0, ir.Constant(I32, 1)), rendezvous_field(em, base, 1))
        return _generation_moved(em, base, gen0)

    frame.wait_until(em, ready, site)
    if clocks is not None:
        clocks.depart(em)
    return []


# ----------------------------------------------------------------------------- warps
def warp_exchange(em, op, key: str, nbytes: int, deposit, what: str):
    """The meeting of a warp collective (a shuffle, an mma): ``deposit(area)`` writes this
    lane's values into its warp's area, every lane of the warp arrives, and the area --
    now holding what each lane wrote -- is returned for reading. Per warp the sync arena
    holds a count, a generation and two areas of ``nbytes``, used alternately by
    generation, so a lane already at its next collective cannot overwrite values slower
    lanes are still reading."""
    units, b, frame = em.mc.units, em.b, em.frame
    warp = units.warp_id(b, frame.unit)
    stride = 8 + 2 * nbytes
    offset = em.mc.sync_state(key, stride * units.num_warps)
    base = em.byte_ptr(frame.sync, b.add(ir.Constant(I64, offset),
                                         b.mul(b.zext(warp, I64), ir.Constant(I64, stride))))
    gen0 = b.load(rendezvous_field(em, base, 1), typ=I32)
    parity = b.zext(b.and_(gen0, ir.Constant(I32, 1)), I64)
    area = em.byte_ptr(base, b.add(ir.Constant(I64, 8), b.mul(parity, ir.Constant(I64, nbytes))))
    deposit(area)
    _arrive(em, base)
    with b.if_then(b.icmp_unsigned("==", b.load(rendezvous_field(em, base, 0), typ=I32),
                                   ir.Constant(I32, em.state.lanes))):
        b.store(ir.Constant(I32, 0), rendezvous_field(em, base, 0))
        b.store(b.add(gen0, ir.Constant(I32, 1)), rendezvous_field(em, base, 1))
    site = em.mc.add_site("wait", op, what=what)
    frame.wait_until(em, lambda: _generation_moved(em, base, gen0), site)
    return area


def emit_warp_shuffle(em, op):
    value, lane_arg = em.operands(op)
    units, b = em.mc.units, em.b
    if units.kind is not TeamKind.THREAD:
        return [value]  # every lane of the unit holds the same value
    lane = units.thread_index(b, "lane_id", em.frame.unit)

    def slot(area, index):
        return b.gep(area, [b.zext(index, I64)], source_etype=I64)

    area = warp_exchange(em, op, "shuffle", LANES_PER_WARP * 8,
                         lambda area: b.store(types.int_bits(b, value), slot(area, lane)),
                         f"warp_shuffle {op.attrs['mode']}")
    source = _shuffle_source(em, op.attrs["mode"], lane, _i32(em, lane_arg, op.operands[1].type))
    return [types.from_int_bits(b, b.load(slot(area, source), typ=I64), value.type)]


def _shuffle_source(em, mode: str, lane, delta):
    """The lane to read; out-of-range sources read the lane's own value (CUDA)."""
    b, width = em.b, ir.Constant(I32, LANES_PER_WARP)
    if mode == "idx":
        return b.and_(delta, ir.Constant(I32, LANES_PER_WARP - 1))
    source = {"xor": b.xor, "down": b.add, "up": b.sub}[mode](lane, delta)
    return b.select(b.icmp_unsigned("<", source, width), source, lane)


def emit_elect_sync(em, op):
    units, active = em.mc.units, em.state.active
    if units.kind is not TeamKind.THREAD:
        return [ir.Constant(I1, 1)]  # warp units run both sides of an elect branch
    lane = units.thread_index(em.b, "lane_id", em.frame.unit)
    first = active.lanes[0] if active is not None else 0
    return [em.b.icmp_unsigned("==", lane, ir.Constant(I32, first))]


# ----------------------------------------------------------------------------- mbarriers
def emit_alloc_barrier(em, op):
    count = op.attrs["count"]
    offset = em.mc.sync.reserve(count * MBARRIER_BYTES, 16)
    name = op.result.name_hint or f"barrier allocated at line {op.loc.line}"
    return [BarrierRef(em.byte_ptr(em.frame.sync, offset), count, name,
                       race.reserve_clocks(em.mc, count))]


def _barrier(em, op, first: int = 0, bar: BarrierRef | None = None):
    """Pointer to the state of ``bar[index]`` (operands ``first`` and ``first + 1``; ``bar``:
    the barriers operand ``first`` names, as another CTA holds them), bounds-checked in
    debug."""
    bar = bar or em[op.operands[first]]
    index = types.to_i64(em.b, em[op.operands[first + 1]], op.operands[first + 1].type)
    if em.options.debug:
        site = em.mc.add_site("bounds", op, buffer=bar.name, scope="barrier", rank=1)
        em.fail_unless(em.b.icmp_unsigned("<", index, ir.Constant(I64, bar.count)),
                       abi.OUT_OF_BOUNDS, site, [index], [bar.count])
    return em.byte_ptr(bar.ptr, em.b.mul(index, ir.Constant(I64, MBARRIER_BYTES))), bar, index


def _update_fn(mc) -> ir.Function:
    """``tj.mbar_update(state, arrivals, tx_delta)``: apply arrivals and tx, maybe complete."""
    fn = mc.module.globals.get("tj.mbar_update")
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(VOID, [PTR, I32, I32]), "tj.mbar_update")
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    state, arrivals, tx_delta = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def field(index):
        return b.gep(state, [ir.Constant(I32, index)], source_etype=I32)

    pending = b.sub(b.load(field(PENDING), typ=I32), arrivals)
    tx = b.add(b.load(field(TX), typ=I32), tx_delta)
    done = b.and_(b.icmp_signed("<=", pending, ir.Constant(I32, 0)),
                  b.icmp_signed("==", tx, ir.Constant(I32, 0)))
    b.store(b.select(done, b.load(field(EXPECTED), typ=I32), pending), field(PENDING))
    b.store(tx, field(TX))
    b.store(b.add(b.load(field(PHASE), typ=I32), b.zext(done, I32)), field(PHASE))
    b.ret_void()
    return fn


def _release(em, bar: BarrierRef, index) -> None:
    """The race detector's release of what this unit did, on ``bar[index]``."""
    if bar.clocks is not None:
        race.release(em, race.clock_at(em, bar.clocks, index, bar.sync))


def _update(em, state, arrivals, tx_delta) -> None:
    def as_i32(v):
        return ir.Constant(I32, v) if isinstance(v, int) else v
    em.b.call(_update_fn(em.mc), [state, as_i32(arrivals), as_i32(tx_delta)])
    em.frame.progress()


def emit_mbarrier_init(em, op):
    state, _, _ = _barrier(em, op)
    count = _i32(em, em[op.operands[2]], op.operands[2].type)
    for index, value in ((PENDING, count), (EXPECTED, count), (TX, ir.Constant(I32, 0)),
                         (PHASE, ir.Constant(I32, 0))):
        em.b.store(value, rendezvous_field(em, state, index))
    return []


def emit_mbarrier_arrive(em, op):
    state, bar, index = _barrier(em, op)
    _release(em, bar, index)
    _update(em, state, threads_per_unit(em), 0)
    return []


def emit_mbarrier_expect_tx(em, op):
    state, bar, index = _barrier(em, op)
    if op.attrs["arrive"]:
        _release(em, bar, index)
    threads = threads_per_unit(em)
    nbytes = _i32(em, em[op.operands[2]], op.operands[2].type)
    if not (isinstance(threads, int) and threads == 1):
        count = ir.Constant(I32, threads) if isinstance(threads, int) else threads
        nbytes = em.b.mul(nbytes, count)
    _update(em, state, threads if op.attrs["arrive"] else 0, nbytes)
    return []


def emit_mbarrier_wait(em, op):
    state, bar, index = _barrier(em, op)
    phase = _i32(em, em[op.operands[2]], op.operands[2].type)
    site = em.mc.add_site("wait", op, what=f"mbarrier_wait on {bar.name}")
    b = em.b

    def ready():
        current = b.load(rendezvous_field(em, state, PHASE), typ=I32)
        parity = b.and_(b.xor(current, phase), ir.Constant(I32, 1))
        return b.icmp_unsigned("!=", parity, ir.Constant(I32, 0))

    em.frame.wait_until(em, ready, site, [index, b.sext(phase, I64)])
    if bar.clocks is not None:
        race.acquire(em, race.clock_at(em, bar.clocks, index, bar.sync))
    return []


def mbarrier_complete_tx(em, op):
    """``mbarrier_complete_tx``: an asynchronous copy's bytes landed (``emit_async``)."""
    complete_tx(em, op, 0, _i32(em, em[op.operands[2]], op.operands[2].type))
    return []


def complete_tx(em, op, first: int, nbytes, bar: BarrierRef | None = None) -> None:
    """``nbytes`` (i32) of the barrier at operands ``first``, ``first + 1`` (of ``bar``,
    another CTA's, when given) landed."""
    state, bar, index = _barrier(em, op, first, bar)
    _release(em, bar, index)   # on behalf of the thread that issued the async copy
    _update(em, state, 0, em.b.neg(nbytes))


def emit_intrinsic(em, op):
    raise CompilationError(f"intrinsic {op.attrs['target']}.{op.attrs['name']} is not "
                           "available on the CPU target: it runs no raw target intrinsics")


# ----------------------------------------------------------------------------- single
def emit_single(em, op):
    team: TeamKind = op.attrs["team"]
    units, b = em.mc.units, em.b
    if units.kind >= team:  # the unit already is (one or more) whole teams
        with em.scoped(single_team=team, team=team):
            em.emit_block(op.regions[0])
        return []
    if em.state.active is None:
        raise CompilationError("a single region needs a statically known set of active threads")
    units.instances(team)  # rejects teams wider than a CTA
    counts = instance_counts(units, em.state.active, team)
    base_offset = em.mc.sync.reserve(8 * len(counts), 8)
    instance = b.udiv(em.frame.unit, ir.Constant(I32, units.units_per_team(team)))
    base = em.byte_ptr(em.frame.sync, b.add(ir.Constant(I64, base_offset),
                                            b.mul(b.zext(instance, I64), ir.Constant(I64, 8))))
    gen0 = b.load(rendezvous_field(em, base, 1), typ=I32)
    clocks = race.Rendezvous.make(em, len(counts), instance, gen0)
    if clocks is not None:
        clocks.arrive(em)
    _arrive(em, base)
    arrived = b.load(rendezvous_field(em, base, 0), typ=I32)
    site = em.mc.add_site("wait", op, what=f"single region (team {team})")
    is_last = b.icmp_unsigned("==", arrived, _expected(em, counts, instance))
    region = op.regions[0]
    with b.if_else(is_last) as (last, other):
        with last:  # the last unit to arrive runs the region for its team
            b.store(ir.Constant(I32, 0), rendezvous_field(em, base, 0))
            if clocks is not None:
                clocks.released(em)
                clocks.depart(em)
            with em.scoped(single_team=team, team=team):
                em.emit_block(region)
            if clocks is not None and any(not o.opdef.terminator for o in region.ops):
                clocks.region_done(em)
            b.store(b.add(gen0, ir.Constant(I32, 1)), rendezvous_field(em, base, 1))
            em.frame.progress()
        with other:
            em.frame.wait_until(em, lambda: _generation_moved(em, base, gen0), site)
            if clocks is not None:
                clocks.depart(em)
    return []


def _expected(em, counts: list[int], instance):
    present = {c for c in counts if c}
    if len(present) == 1:
        return ir.Constant(I32, present.pop())
    table = ir.GlobalVariable(em.mc.module, ir.ArrayType(I32, len(counts)),
                              em.mc.module.get_unique_name("single_counts"))
    table.initializer = ir.Constant(table.value_type, counts)
    table.linkage, table.global_constant = "internal", True
    return em.b.load(em.b.gep(types.opaque(table), [ir.Constant(I32, 0), instance],
                              source_etype=table.value_type), typ=I32)


# ----------------------------------------------------------------------------- printing
def emit_device_print(em, op):
    """printf, one line per call: a printf format (``printf`` attr) as written, or ``{}``
    placeholders filled by the arguments in order (extra arguments are appended)."""
    b = em.b
    text, args = (_printf_format if op.attrs["printf"] else _placeholder_format)(em, op)
    if not text.endswith("\n"):
        text += "\n"
    printf = em.mc.function("printf", I32, [PTR], var_arg=True)
    b.call(printf, [em.mc.string(text), *args])
    b.call(em.mc.function("fflush", I32, [PTR]), [ir.Constant(PTR, None)])
    return []


def _placeholder_format(em, op):
    pieces = op.attrs["fmt"].replace("%", "%%").split("{}")
    specs, args = zip(*(_printf_arg(em, v) for v in op.operands)) if op.operands else ((), ())
    parts = [pieces[0]]
    for i, spec in enumerate(specs):
        parts += [spec, pieces[i + 1]] if i + 1 < len(pieces) else [" ", spec]
    parts += ["{}" + piece for piece in pieces[len(specs) + 1:]]  # holes without arguments
    return "".join(parts), args


def _printf_format(em, op):
    """The verifier matched each conversion to its operand's kind. Integers are passed as
    64 bits (the conversion gets ``ll``): sign-extended for %d/%i of a signed type,
    zero-extended otherwise, so %x of an int32 -1 prints ffffffff as in C; floats as
    doubles, as C's variadic promotion does."""
    fmt, parts, args, pos = op.attrs["fmt"], [], [], 0
    conversions = [c for c in printf_conversions(fmt) if c["kind"] != "%"]
    for conversion, value in zip(conversions, op.operands):
        t, v, spec = value.type, em[value], conversion[0]
        if t.is_float:
            v = _printf_arg(em, value)[1]
        else:
            spec = spec[:-1] + "ll" + spec[-1]
            if v.type.width < 64:
                signed = t.kind == "int" and conversion["kind"] in "di"
                v = em.b.sext(v, I64) if signed else em.b.zext(v, I64)
        args.append(v)
        parts += [fmt[pos:conversion.start()], spec]
        pos = conversion.end()
    parts.append(fmt[pos:])
    return "".join(parts), args


def _printf_arg(em, value):
    t, v = value.type, em[value]
    if t.is_float:
        wide = types.widen(em.b, v, t)
        return "%g", em.b.fpext(wide, types.F64) if wide.type == types.F32 else wide
    if t.is_bool or t.kind == "uint":
        return "%llu", em.b.zext(v, I64) if v.type != I64 else v
    return "%lld", types.to_i64(em.b, v, t)


HANDLERS = {
    "sync": emit_sync, "warp_shuffle": emit_warp_shuffle, "elect_sync": emit_elect_sync,
    "alloc_barrier": emit_alloc_barrier, "mbarrier_init": emit_mbarrier_init,
    "mbarrier_arrive": emit_mbarrier_arrive, "mbarrier_expect_tx": emit_mbarrier_expect_tx,
    "mbarrier_wait": emit_mbarrier_wait, "intrinsic": emit_intrinsic,
    "device_print": emit_device_print, "single": emit_single,
}
