"""The race detector of the per-thread (SIMT) mode: happens-before with vector clocks.

On in SIMT mode (``distribution = "per_thread"``, one unit per thread) whenever bounds
checks are (``TILEJIT_BOUNDS_CHECK``, on by default, or debug mode), for kernels with
planned shared memory. Every CTA-private piece of its state lives in the CTA's sync arena,
which ``run_ctas`` zeroes per CTA.

- **Clocks**: unit (thread) ``t`` of the ``T = 32 * num_warps`` has a vector clock
  ``C_t[0..T)`` of i32 entries; ``C_t[t]`` starts at 1 (:func:`start`).
- **Shadow**: one record per granule of the planned shared block (and of tensor memory,
  which follows it in the data arena where the kernel has tcgen05 ops), the granule being the
  smallest element size of the kernel's shared buffers; an access keys on the granule of
  its first byte. The record holds the last write (unit + 1, its ``C_w[w]``, site index,
  whether it was an atomic, its number among the CTA's writes) and the last read (unit +
  1, ``C_r[r]``, site). Only one read
  is kept (the latest): reads that run concurrently with each other can hide a race of
  the earlier one with a later write, never invent one. Mixed-size views of one buffer
  (none in the IR the passes make) key on different granules and are not compared.
- **Checks** (``tj.race.access``, called by every access of a shared buffer): a read races
  with the last write by another unit ``w`` when ``C_t[w]`` is below the write's clock; a
  write (or atomic) also with the last read. Atomics are a read and a write to plain
  accesses, but never race with each other (relaxed atomics are still atomic). Lanes of one
  warp storing to one element from the same op do not race either: that is one warp
  store, of which one lane's value lands (PTX), as in ``if warp == 1: s[0] = v``. A race
  is a ``RACE`` error record: the other unit, its site, what it did, the element.
- **Asynchronous reads** (a wgmma's operands, a TMA store's box) last from their issue to
  the wait that retires them: the hardware may read any time in between. They are checked
  and recorded at that wait, with its clock, and also race with any write made since the
  issue -- by any unit, the issuing one too, barriers or not: a write the CTA made after
  the issue (its number among the CTA's writes, counted in the sync arena, is above the
  count at the issue) cannot be ordered before it, and the wait has not run yet.
- **Off** for kernels whose shadow would pass ``SHADOW_LIMIT`` (2 MiB of f32 shared memory,
  ten times a GPU's): they run unchecked rather than fail to fit the CTA's memory.
- **Synchronization** releases a clock into a barrier clock ``B = max(B, C_t)`` then
  ``C_t[t] += 1``, and acquires ``C_t = max(C_t, B)`` when the wait passes:

  * ``sync`` and ``single`` rendezvous (a CTA, warpgroup or warp barrier): each arriving
    unit releases into the rendezvous' clock for this generation, each passing one acquires
    it. A unit that has finished counts as arrived at every later ``sync`` (as the
    rendezvous counts it): at its end it releases into the generation collecting arrivals.
    Two clocks alternate by generation parity (a unit that passes generation g can
    arrive at g + 1 before slower units have acquired g); whoever releases generation g
    clears the other one, which every unit has acquired by then. The unit that runs a
    ``single`` region acquires before it and releases after it.
  * mbarriers: ``mbarrier_arrive``, an arriving ``mbarrier_expect_tx`` and ``cpu.
    mbarrier_complete_tx`` (an async copy, on behalf of its issuing thread) release into a
    clock per barrier index; ``mbarrier_wait`` acquires it once it passes. Phases are not
    told apart (the clock only grows), which can hide a race but never invents one.
  * Warp shuffles and ``elect_sync`` order no memory (the CUDA memory model: ``shfl.sync``
    exchanges registers, ``__syncwarp`` / a barrier orders memory), so they join nothing.
  * Flags: a shared buffer that a ``while`` condition reads is a flag threads spin on
    (as the sync-hazards pass treats it): its accesses are not checked; a store to it
    releases into the flag's clock, a load acquires it, an atomic does both.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from tilejit.ir.addressing import Addressing
from tilejit.ir.ops_native import ATOMIC_ACCESSES, WRITING_ACCESSES
from tilejit.ir.scope import LANES_PER_WARP
from tilejit.ir.types import MemScope
from tilejit.passes.dispatch import PER_THREAD
from tilejit.passes.effects import root_buffer, spin_flags

from . import abi
from .frames import PEER_CLUSTER, counted_loop
from .scheduler import cluster_rank, ctx_peer
from .types import I1, I8, I32, I64, PTR, VOID
from .units import THREAD

READ, WRITE, ATOMIC = 0, 1, 2                      # what an access does
# what the access it races with did (PRIOR_WRITE_IN_FLIGHT: a write while it was in flight)
PRIOR_WRITE, PRIOR_ATOMIC, PRIOR_READ, PRIOR_WRITE_IN_FLIGHT = 1, 2, 3, 4
# A shadow record: i32 fields.
W_UNIT, W_CLOCK, W_SITE, W_ATOMIC, R_UNIT, R_CLOCK, R_SITE, W_NUMBER = range(8)
RECORD_BYTES = 32
NOT_IN_FLIGHT = -1   # ``since`` of a plain access: no write's number is above it (unsigned)
SYNC_CLOCKS = "sync.race"   # ``ModuleContext.named_state`` key of the ``sync`` clocks
CLUSTER_CLOCKS = "cluster.barrier.race"   # ... and of ``cluster_sync``'s
SHADOW_LIMIT = 64 << 20   # bytes of shadow records: 2 MiB of f32 shared memory, 10x a GPU's


@dataclass
class RaceState:
    """The detector's layout in the sync arena, and the functions it emitted."""

    threads: int                 # units (threads) per cluster: a clock's entries
    granule: int                 # bytes of shared memory per shadow record
    shared_bytes: int
    clocks: int                  # offset of the units' vector clocks
    shadow: int                  # offset of the shadow records
    writes: int                  # offset of the count of the CTA's writes (an i32)
    flags: set = field(default_factory=set)     # root buffers threads spin on
    flag_clocks: dict = field(default_factory=dict)

    @property
    def clock_bytes(self) -> int:
        return self.threads * 4


def setup(mc) -> RaceState | None:
    """The detector's state for this module, or None where it is off."""
    kernel, options, units = mc.kernel, mc.options, mc.units
    shared_bytes = mc.data.size   # the planned shared block, then any tensor memory
    if not (options.debug or options.bounds_check) or units.kind is not THREAD \
            or not units.coroutine or kernel.attrs.get("distribution") != PER_THREAD \
            or not shared_bytes:
        return None
    sizes = [op.attrs["dtype"].itemsize for op in kernel.walk()
             if op.name == "alloc" and op.attrs["scope"] is MemScope.SHARED]
    if not sizes:
        return None
    threads, granule = units.scheduled, min(sizes)
    records = -(-shared_bytes // granule)
    if records * RECORD_BYTES > SHADOW_LIMIT:
        return None   # far more shared memory than any GPU has: run unchecked
    clocks = mc.sync.reserve(units.count * threads * 4, 64, "the race detector's clocks")
    shadow = mc.sync.reserve(records * RECORD_BYTES, 64, "the race detector's shadow memory")
    writes = mc.sync.reserve(4, 4, "the race detector's count of writes")
    return RaceState(threads, granule, shared_bytes, clocks, shadow, writes, spin_flags(kernel))


def writes_so_far(em) -> ir.Value:
    """The count of the CTA's writes to shared memory so far: an asynchronous read issued
    now races with every write numbered above it (``since`` of :func:`access_function`)."""
    return em.b.load(em.byte_ptr(em.frame.sync, ir.Constant(I64, em.mc.race.writes)), typ=I32)


# ----------------------------------------------------------------------------- clocks
def unit_id(em):
    """The current unit's entry in the clocks: its thread in the CTA, after the threads of
    the cluster's CTAs of lower rank (every CTA of a cluster runs together)."""
    units, frame = em.mc.units, em.frame
    if units.ctas == 1:
        return frame.unit
    rank = cluster_rank(em.b, frame.cta, em.mc.kernel)
    return em.b.add(em.b.mul(rank, ir.Constant(I32, units.count)), frame.unit)


def own_clock(em):
    """Pointer to the current unit's vector clock (in its CTA's sync arena)."""
    race, b = em.mc.race, em.b
    offset = b.add(ir.Constant(I64, race.clocks),
                   b.mul(b.zext(em.frame.unit, I64), ir.Constant(I64, race.clock_bytes)))
    return em.byte_ptr(em.frame.sync, offset)


def start(em) -> None:
    """``C_t[t] = 1``: a unit's first accesses are after nothing another unit did."""
    if em.mc.race is None:
        return
    b = em.b
    own = b.gep(own_clock(em), [unit_id(em)], source_etype=I32)
    b.store(ir.Constant(I32, 1), own)


def finish(em) -> None:
    """A unit at its end counts as arrived at every later ``sync`` (``CTX_ALIVE``): it
    releases what it did into the clock of the generation now collecting arrivals."""
    mc = em.mc
    if mc.race is None:
        return
    b = em.b
    for state, clocks in _rendezvous_at_end(em):
        generation = b.load(b.gep(state, [ir.Constant(I32, 1)], source_etype=I32), typ=I32)
        release(em, _generation_clock(em, clocks, None, generation, arena=state))


def _rendezvous_at_end(em) -> list:
    """(state, clocks) of the rendezvous a finished unit counts as arrived at: ``sync``,
    and ``cluster_sync`` (its clocks lie after its state, in the cluster's own arena)."""
    mc, found = em.mc, []
    if SYNC_CLOCKS in mc.named_state:
        state = em.byte_ptr(em.frame.sync, mc.named_state["sync"])
        clocks = em.byte_ptr(em.frame.sync, mc.named_state[SYNC_CLOCKS])
        found.append((state, clocks))
    if CLUSTER_CLOCKS in mc.named_state:
        state = cluster_state(em)
        found.append((em.byte_ptr(state, mc.named_state["cluster.barrier"]),
                      em.byte_ptr(state, mc.named_state[CLUSTER_CLOCKS])))
    return found


def cluster_state(em):
    """The cluster's own arena (``ModuleContext.cluster_state``)."""
    b = em.b
    return b.load(ctx_peer(b, em.frame.ctx, PEER_CLUSTER, None, em.mc.units.ctas), typ=PTR)


def reserve_clocks(mc, count: int) -> int | None:
    """Offset of ``count`` barrier clocks in the sync arena (None when the detector is off)."""
    race = mc.race
    return None if race is None else mc.sync.reserve(count * race.clock_bytes, 64)


def clock_at(em, offset, index, arena=None) -> ir.Value:
    """Pointer to barrier clock ``index`` (an i64/i32 value or int) of those at ``offset``
    (an int, in ``arena``: the unit's sync arena by default; or a pointer)."""
    b, size = em.b, em.mc.race.clock_bytes
    index = ir.Constant(I64, index) if isinstance(index, int) else \
        (b.zext(index, I64) if index.type != I64 else index)
    scaled = b.mul(index, ir.Constant(I64, size))
    if not isinstance(offset, int):
        return em.byte_ptr(offset, scaled)
    return em.byte_ptr(arena if arena is not None else em.frame.sync,
                       b.add(ir.Constant(I64, offset), scaled))


def release(em, barrier_clock) -> None:
    """``B = max(B, C_t); C_t[t] += 1``."""
    em.b.call(_release_fn(em.mc), [own_clock(em), barrier_clock, unit_id(em)])


def acquire(em, barrier_clock) -> None:
    """``C_t = max(C_t, B)``."""
    em.b.call(_acquire_fn(em.mc), [own_clock(em), barrier_clock])


def clear(em, barrier_clock) -> None:
    memset = em.mc.function("llvm.memset.p0.i64", VOID, [PTR, I8, I64, I1])
    em.b.call(memset, [barrier_clock, ir.Constant(I8, 0),
                       ir.Constant(I64, em.mc.race.clock_bytes), ir.Constant(I1, 0)])


def _generation_clock(em, offset, instance, generation, parity: int = 0, arena=None):
    """The clock of rendezvous generation ``generation + parity`` (two per instance)."""
    b = em.b
    which = b.zext(b.and_(b.add(generation, ir.Constant(I32, parity)), ir.Constant(I32, 1)),
                   I64)
    pair = ir.Constant(I64, 0) if instance is None else b.mul(b.zext(instance, I64),
                                                              ir.Constant(I64, 2))
    return clock_at(em, offset, b.add(pair, which), arena)


@dataclass
class Rendezvous:
    """The clocks of one rendezvous (a ``sync``, or one ``single`` op's team instances)."""

    offset: int
    instance: ir.Value | None
    generation: ir.Value
    arena: ir.Value | None = None   # where the clocks lie: the unit's sync arena by default

    @classmethod
    def make(cls, em, instances: int, instance, generation, key: str | None = None):
        mc = em.mc
        if mc.race is None:
            return None
        if key is not None:   # every sync shares one rendezvous
            offset = mc.sync_state(key, 2 * instances * mc.race.clock_bytes)
        else:
            offset = reserve_clocks(mc, 2 * instances)
        return cls(offset, instance, generation)

    @classmethod
    def for_cluster(cls, em, generation):
        """The clocks of ``cluster_sync``, in the cluster's own arena."""
        mc = em.mc
        if mc.race is None:
            return None
        offset = mc.cluster_state("barrier.race", 2 * mc.race.clock_bytes)
        return cls(offset, None, generation, cluster_state(em))

    def _clock(self, em, parity: int = 0):
        return _generation_clock(em, self.offset, self.instance, self.generation, parity,
                                 self.arena)

    def arrive(self, em) -> None:
        release(em, self._clock(em))

    def released(self, em) -> None:
        """At the release of this generation: clear the next one's clock."""
        clear(em, self._clock(em, 1))

    def depart(self, em) -> None:
        acquire(em, self._clock(em))

    def region_done(self, em) -> None:
        """The unit that ran a ``single`` region publishes what it did there."""
        self.arrive(em)


# ----------------------------------------------------------------------------- accesses
def check_access(em, op, ref, ptr, reads: bool = False) -> None:
    """Check (and record) ``op``'s access of the element at ``ptr`` of ``ref`` (``reads``:
    a read, whatever the op writes elsewhere -- a TMA store reads its shared box)."""
    race = em.mc.race
    if race is None or ref.scope is not MemScope.SHARED:
        return
    kind = READ if reads else ATOMIC if op.name in ATOMIC_ACCESSES \
        else WRITE if op.name in WRITING_ACCESSES else READ
    root = root_buffer(op.operands[0])
    if root in race.flags:
        flag = race.flag_clocks.get(root)
        if flag is None:
            flag = race.flag_clocks[root] = reserve_clocks(em.mc, 1)
        clock = clock_at(em, flag, 0)
        if kind != WRITE:
            acquire(em, clock)
        if kind != READ:
            release(em, clock)
        return
    record_access(em, ptr, ref.ptr, ref.dtype.itemsize, access_site(em, op, ref, kind), kind,
                  ref.arenas)


def access_site(em, op, ref, kind: int) -> int:
    """The race site of ``op``'s accesses (``kind``) of shared ``ref``."""
    info = {"buffer": ref.name, "access": kind}
    if ref.reshaped is None and ref.addressing == Addressing.row_major(tuple(ref.shape)):
        info["shape"] = list(ref.shape)   # row-major: the launcher names indices
    return em.mc.add_site("race", op, **info)


def check_retired(em, fn, *args) -> None:
    """Call ``fn(err, sync, data, clock, unit, *args)``, a function that checks and records
    the reads of an asynchronous op the current unit retires (true on a race), leaving
    through the frame's error exit on a race."""
    frame, b = em.frame, em.b
    failed = b.call(fn, [frame.err, frame.sync, frame.data, own_clock(em), unit_id(em), *args])
    go_on = b.append_basic_block("retired.ok")
    b.cbranch(failed, frame.error_exit, go_on)
    b.position_at_end(go_on)


def record_access(em, ptr, base, itemsize: int, site: int, kind: int, arenas=None) -> None:
    """Check and record the current unit's access ``kind`` of the ``itemsize`` bytes at
    ``ptr`` (in the buffer at ``base``; ``site`` the add_site number), leaving through the
    frame's error exit on a race. ``arenas``: another CTA's (data, sync), through
    tj.remote; default the unit's own."""
    frame, b = em.frame, em.b
    data, sync = arenas or (frame.data, frame.sync)
    # Few instructions per access (SIMT binaries compile at O0): the call fills the error
    # record itself.
    failed = b.call(access_function(em.mc),
                    [frame.err, sync, data, own_clock(em), unit_id(em), ptr, base,
                     ir.Constant(I64, itemsize), ir.Constant(I32, site), ir.Constant(I32, kind),
                     ir.Constant(I32, NOT_IN_FLIGHT)])
    go_on = b.append_basic_block("race.ok")
    b.cbranch(failed, frame.error_exit, go_on)
    b.position_at_end(go_on)


# ----------------------------------------------------------------------------- functions
def _function(mc, name: str, ret, args) -> tuple[ir.Function, ir.IRBuilder, bool]:
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn, None, False
    fn = ir.Function(mc.module, ir.FunctionType(ret, args), name)
    fn.linkage = "internal"
    return fn, ir.IRBuilder(fn.append_basic_block("entry")), True


def _max_into(b, dst, src, threads: int) -> None:
    """``dst[i] = max(dst[i], src[i])`` for the ``threads`` entries."""
    def body(i):
        d = b.gep(dst, [i], source_etype=I32)
        a, c = b.load(d, typ=I32), b.load(b.gep(src, [i], source_etype=I32), typ=I32)
        b.store(b.select(b.icmp_unsigned("<", a, c), c, a), d)
    counted_loop(b, threads, body, "join")


def _release_fn(mc) -> ir.Function:
    fn, b, new = _function(mc, "tj.race.release", VOID, [PTR, PTR, I32])
    if new:
        clock, barrier, unit = fn.args
        _max_into(b, barrier, clock, mc.race.threads)
        own = b.gep(clock, [unit], source_etype=I32)
        b.store(b.add(b.load(own, typ=I32), ir.Constant(I32, 1)), own)
        b.ret_void()
    return fn


def _acquire_fn(mc) -> ir.Function:
    fn, b, new = _function(mc, "tj.race.acquire", VOID, [PTR, PTR])
    if new:
        clock, barrier = fn.args
        _max_into(b, clock, barrier, mc.race.threads)
        b.ret_void()
    return fn


def access_function(mc) -> ir.Function:
    """``i1 tj.race.access(err, sync, data, clock, unit, ptr, base, itemsize, site, kind,
    since)``: check and record the access of the element at ``ptr`` (of the buffer at
    ``base``, in the shared memory ``data`` whose shadow lies in ``sync``: the arenas of the
    CTA that holds it) by ``unit`` (its entry in the clocks) whose clock is at ``clock``; an
    asynchronous read retired now, issued when the CTA had made ``since`` writes, also
    races with any later write (``NOT_IN_FLIGHT`` for every other access); on a race fill
    the error record (``abi.RACE``: the other unit, its site, what it did, the element) and
    return true (the access is then not recorded)."""
    fn, b, new = _function(mc, "tj.race.access", I1,
                           [PTR, PTR, PTR, PTR, I32, PTR, PTR, I64, I32, I32, I32])
    if not new:
        return fn
    race = mc.race
    err, sync, data, clock, unit, ptr, base, itemsize, site, kind, since = fn.args
    byte = b.sub(b.ptrtoint(ptr, I64), b.ptrtoint(data, I64))
    check = fn.append_basic_block("check")
    outside = fn.append_basic_block("outside")   # shared buffers the plan has not placed
    b.cbranch(b.icmp_unsigned("<", byte, ir.Constant(I64, race.shared_bytes)), check, outside)
    b.position_at_end(outside)
    b.ret(ir.Constant(I1, 0))
    b.position_at_end(check)
    slot = b.udiv(byte, ir.Constant(I64, race.granule))
    record = b.gep(sync, [b.add(ir.Constant(I64, race.shadow),
                                b.mul(slot, ir.Constant(I64, RECORD_BYTES)))], source_etype=I8)
    me = b.add(unit, ir.Constant(I32, 1))

    def field_ptr(index):
        return b.gep(record, [ir.Constant(I32, index)], source_etype=I32)

    def load(index):
        return b.load(field_ptr(index), typ=I32)

    def unordered(other, at):
        """``other`` (unit + 1, 0 for none) is another unit whose access at its clock
        ``at`` this unit has not seen."""
        another = b.and_(b.icmp_unsigned("!=", other, ir.Constant(I32, 0)),
                         b.icmp_unsigned("!=", other, me))
        index = b.select(another, b.sub(other, ir.Constant(I32, 1)), unit)
        seen = b.load(b.gep(clock, [index], source_etype=I32), typ=I32)
        return b.and_(another, b.icmp_unsigned("<", seen, at))

    def report(other, other_site, prior):
        element = b.udiv(b.sub(b.ptrtoint(ptr, I64), b.ptrtoint(base, I64)), itemsize)
        for slot, value in ((abi.ERR_CODE, ir.Constant(I64, abi.RACE)),
                            (abi.ERR_SITE, b.zext(site, I64)), (abi.ERR_UNIT, b.zext(unit, I64)),
                            (abi.ERR_VALUES, b.zext(b.sub(other, ir.Constant(I32, 1)), I64)),
                            (abi.ERR_VALUES + 1, b.zext(other_site, I64)),
                            (abi.ERR_VALUES + 2, prior),
                            (abi.ERR_VALUES + 3, element)):
            b.store(value, b.gep(err, [ir.Constant(I32, slot)], source_etype=I64))
        b.ret(ir.Constant(I1, 1))

    writer, reader = load(W_UNIT), load(R_UNIT)
    was_atomic = b.icmp_unsigned("!=", load(W_ATOMIC), ir.Constant(I32, 0))
    is_atomic = b.icmp_unsigned("==", kind, ir.Constant(I32, ATOMIC))
    is_read = b.icmp_unsigned("==", kind, ir.Constant(I32, READ))
    # One store of a warp writing an element from several lanes: one lane's value lands,
    # as PTX specifies (``if warp == 1: s[0] = v``), not a race.
    warp_store = b.and_(b.and_(b.icmp_unsigned("==", kind, ir.Constant(I32, WRITE)),
                               b.icmp_unsigned("==", load(W_SITE), site)),
                        b.icmp_unsigned("<", b.xor(b.sub(writer, ir.Constant(I32, 1)), unit),
                                        ir.Constant(I32, LANES_PER_WARP)))
    exempt = b.or_(b.and_(is_atomic, was_atomic), warp_store)
    after_write = b.and_(unordered(writer, load(W_CLOCK)), b.not_(exempt))
    after_read = b.and_(b.not_(is_read), unordered(reader, load(R_CLOCK)))
    with b.if_then(b.icmp_unsigned(">", load(W_NUMBER), since), likely=False):
        report(writer, load(W_SITE), ir.Constant(I64, PRIOR_WRITE_IN_FLIGHT))
    with b.if_then(after_write, likely=False):
        prior = b.select(was_atomic, ir.Constant(I64, PRIOR_ATOMIC), ir.Constant(I64, PRIOR_WRITE))
        report(writer, load(W_SITE), prior)
    with b.if_then(after_read, likely=False):
        report(reader, load(R_SITE), ir.Constant(I64, PRIOR_READ))
    own = b.load(b.gep(clock, [unit], source_etype=I32), typ=I32)
    with b.if_else(is_read) as (then, otherwise):
        with then:
            for index, value in ((R_UNIT, me), (R_CLOCK, own), (R_SITE, site)):
                b.store(value, field_ptr(index))
        with otherwise:
            # a plain increment: the CTAs of a cluster (all that write here) share a thread
            count = b.gep(sync, [ir.Constant(I64, race.writes)], source_etype=I8)
            number = b.add(b.load(count, typ=I32), ir.Constant(I32, 1))
            b.store(number, count)
            for index, value in ((W_UNIT, me), (W_CLOCK, own), (W_SITE, site),
                                 (W_ATOMIC, b.zext(is_atomic, I32)), (W_NUMBER, number)):
                b.store(value, field_ptr(index))
    b.ret(ir.Constant(I1, 0))
    return fn
