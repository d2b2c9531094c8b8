"""The functions units run (their scheduler is in ``scheduler``).

With one unit per CTA the CTA body is a plain function (:class:`PlainFrame`); a wait that
is not already satisfied is a deadlock. Otherwise each unit is an LLVM coroutine
(:class:`CoroFrame`, ``presplitcoroutine``; CoroSplit in the O2/O3 pipeline lowers it)
resumed round-robin by a per-CTA (or per-cluster) scheduler (``scheduler.
emit_scheduler``). Units suspend
inside :meth:`CoroFrame.wait_until` loops, and now and then in ``while`` loops that read
memory (:meth:`_Frame.spin_point`), so that spinning on a flag works; there a unit of
either kind also leaves when the launch is being stopped (Ctrl-C), so that spinning on a
flag nobody sets does not hang the process. Every state change (an arrival, a passed
wait, a finished unit) bumps a progress counter; a round of resumes that leaves it
unchanged while units remain is a deadlock, reported with the wait site of the first
waiting unit.

A frame's function takes ``(ctx, unit, data, sync, cta x/y/z, grid x/y/z, argument
slots...)``. ``data`` and ``sync`` are the CTA's private arenas, passed as ``noalias``
parameters: no kernel argument can point into them, and saying so lets LLVM vectorize
copies between them and global memory (not in a cluster, whose CTAs reach each other's
arenas through the peers table of the context).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from . import abi
from .types import I1, I8, I32, I64, PTR, VOID, alloca

# Per-CTA context shared by the units: error record, progress counter, units still
# running, error code of a failed unit, the launch's stop word, and in a cluster the peers
# table (every CTA's data arena, then every sync arena, then the cluster's own state).
CTX = ir.LiteralStructType([PTR, I64, I32, I32, PTR, PTR])
CTX_ERR, CTX_PROGRESS, CTX_ALIVE, CTX_ERROR, CTX_STOP, CTX_PEERS = range(6)
PEER_DATA, PEER_SYNC, PEER_CLUSTER = range(3)
WAIT_RECORD_SLOTS = 3  # site, two values (barrier index, phase)
STACK_BUDGET = 256 * 1024   # bytes of tiles per unit kept on the stack
SPIN_YIELD_PERIOD = 64  # a power of two: passes of a memory-reading loop between yields


# llvmlite's IR layer has neither the ``token`` type of the coroutine intrinsics nor the
# ``presplitcoroutine`` attribute; these three small classes supply them.
class _TokenType(ir.Type):
    def _to_string(self) -> str:
        return "token"

    def __eq__(self, other) -> bool:
        return isinstance(other, _TokenType)

    def __hash__(self) -> int:
        return hash(_TokenType)


TOKEN = _TokenType()


class _NoneToken(ir.Constant):
    def __init__(self):
        super().__init__(TOKEN, None)

    def get_reference(self) -> str:
        return "none"


class _CoroutineAttributes(ir.values.FunctionAttributes):
    _known = ir.values.FunctionAttributes._known | {"presplitcoroutine"}


def body_signature(slot_types: Sequence[ir.Type]) -> list[ir.Type]:
    """(ctx, unit, data, sync, cta x/y/z, grid x/y/z, argument slots...)"""
    return [PTR, I32, PTR, PTR, I32, I32, I32, I32, I32, I32, *slot_types]


def counted_loop(b: ir.IRBuilder, count, body: Callable[[ir.Value], None], name: str = "loop"):
    """``for i in range(count): body(i)`` with a counter of ``count``'s type (i32 for an
    int)."""
    count = count if isinstance(count, ir.Value) else ir.Constant(I32, count)
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    step = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    index = b.phi(count.type)
    index.add_incoming(ir.Constant(count.type, 0), pre)
    b.cbranch(b.icmp_unsigned("<", index, count), step, done)
    b.position_at_end(step)
    body(index)
    index.add_incoming(b.add(index, ir.Constant(count.type, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)


class _Frame:
    """The function one unit runs: its parameters, entry block and error exit."""

    def __init__(self, mc, name: str, ret: ir.Type, slot_types, slot_attrs):
        self.mc = mc
        self.fn = ir.Function(mc.module, ir.FunctionType(ret, body_signature(slot_types)), name)
        self.fn.linkage = "internal"
        args = self.fn.args
        for arg, attrs in zip(args[10:], slot_attrs):
            for attr in attrs.get("flags", ()):
                arg.add_attribute(attr)
            if attrs.get("align"):
                arg.attributes.align = attrs["align"]
        self.ctx, self.unit, self.data, self.sync = args[:4]
        # In a cluster a unit also reaches its own arenas through the peers table
        # (tj.remote of its own rank, a multicast to itself): then they may alias.
        for arena in (self.data, self.sync) if mc.units.ctas == 1 else ():
            arena.add_attribute("noalias")
        self.cta, self.grid, self.slots = args[4:7], args[7:10], list(args[10:])
        # Allocas get a block of their own, first in the function, so that adding one never
        # disturbs the main builder's position.
        self._allocas = ir.IRBuilder(self.fn.append_basic_block("allocas"))
        self.entry = self.fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(self.entry)
        self.error_exit = self.fn.append_basic_block("error")
        self.stack_bytes = 0
        self.spin_loops = False   # whether a loop may wait on memory (see spin_point)

    def _load_ctx(self, field: int, typ: ir.Type):
        return self.builder.load(self.ctx_field(field), typ=typ)

    def ctx_field(self, field: int):
        return self.builder.gep(self.ctx, [ir.Constant(I32, 0), ir.Constant(I32, field)],
                                source_etype=CTX)

    def _prologue(self):
        self.err = self._load_ctx(CTX_ERR, PTR)

    def take_stack(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more of per-unit memory may live on the stack (where LLVM can
        keep small tiles in registers); the rest goes to the heap arena, since a thread's
        stack is a few MiB."""
        if self.stack_bytes + nbytes > STACK_BUDGET:
            return False
        self.stack_bytes += nbytes
        return True

    def alloca(self, typ: ir.Type, count: int, align: int = 64):
        """Per-unit memory (an entry-block alloca; live across suspends it moves into the
        coroutine frame)."""
        return alloca(self._allocas, ir.ArrayType(typ, count), align)

    def _close_allocas(self) -> None:
        self._allocas.branch(self.entry)

    def spin_point(self) -> None:
        """In a loop that reads memory (a flag another unit or CTA sets), every
        ``SPIN_YIELD_PERIOD``-th pass leaves the unit with ``INTERRUPTED`` when the launch
        is being stopped, and lets the other units run (:meth:`_pause`)."""
        self.spin_loops = True
        b = self.builder
        counter = self.alloca(I32, 1, 4)
        self._allocas.store(ir.Constant(ir.ArrayType(I32, 1), [0]), counter)
        slot = b.gep(counter, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                     source_etype=ir.ArrayType(I32, 1))
        count = b.add(b.load(slot, typ=I32), ir.Constant(I32, 1))
        b.store(count, slot)
        due = b.icmp_unsigned("==", b.and_(count, ir.Constant(I32, SPIN_YIELD_PERIOD - 1)),
                              ir.Constant(I32, 0))
        pause = b.append_basic_block("spin.yield")
        resume = b.append_basic_block("spin.resume")
        b.cbranch(due, pause, resume)
        b.position_at_end(pause)
        stop = b.load(self.ctx_field(CTX_STOP), typ=PTR)
        stopping = b.icmp_unsigned("!=", b.load_atomic(stop, "monotonic", 4, typ=I32),
                                   ir.Constant(I32, 0))
        with b.if_then(stopping, likely=False):
            b.store(ir.Constant(I64, abi.INTERRUPTED),
                    b.gep(self.err, [ir.Constant(I32, abi.ERR_CODE)], source_etype=I64))
            b.branch(self.error_exit)
        self._pause(resume)
        b.position_at_end(resume)


class PlainFrame(_Frame):
    """One unit per CTA: returns 0 or the error code of the record it filled."""

    def __init__(self, mc, slot_types, slot_attrs):
        super().__init__(mc, "tj.cta", I32, slot_types, slot_attrs)
        self._prologue()

    def progress(self) -> None:
        pass

    def wait_until(self, em, ready: Callable[[], ir.Value], site: int, values=()) -> None:
        em.fail_unless(ready(), abi.DEADLOCK, site, values)

    def _pause(self, resume: ir.Block) -> None:
        self.builder.branch(resume)   # the only unit of its CTA: no other to let run

    def finish(self) -> None:
        self._close_allocas()
        self.builder.ret(ir.Constant(I32, 0))
        b = ir.IRBuilder(self.error_exit)
        code = b.load(b.gep(self.err, [ir.Constant(I32, abi.ERR_CODE)], source_etype=I64), typ=I64)
        b.ret(b.trunc(code, I32))


class CoroFrame(_Frame):
    """A unit as a coroutine; the scheduler resumes it until it reaches its end."""

    def __init__(self, mc, slot_types, slot_attrs):
        super().__init__(mc, "tj.unit", PTR, slot_types, slot_attrs)
        self.fn.attributes = _CoroutineAttributes(["presplitcoroutine"])
        b = self.builder
        null = ir.Constant(PTR, None)
        self.coro_id = b.call(mc.function("llvm.coro.id", TOKEN, [I32, PTR, PTR, PTR]),
                              [ir.Constant(I32, 0), null, null, null])
        # The frame holds values live across a suspend, vectors included: LLVM may keep an
        # AVX-512 splat there and store it with a 64-byte aligned move (malloc's 16-byte
        # alignment made such a unit crash), so the frame starts on the frame's alignment
        # (coro.align), its size rounded up to it as aligned_alloc asks.
        size = b.call(mc.function("llvm.coro.size.i64", I64, []), [])
        align = b.call(mc.function("llvm.coro.align.i64", I64, []), [])
        rounded = b.and_(b.add(size, b.sub(align, ir.Constant(I64, 1))),
                         b.neg(align))
        memory = b.call(mc.function("aligned_alloc", PTR, [I64, I64]), [align, rounded])
        self._return_null_unless_allocated(memory, size)
        self.handle = b.call(mc.function("llvm.coro.begin", PTR, [TOKEN, PTR]),
                             [self.coro_id, memory])
        self._prologue()
        self.wait_records = mc.sync.reserve(mc.units.count * WAIT_RECORD_SLOTS * 8, 8)
        self.final = self.fn.append_basic_block("final")
        self.cleanup = self.fn.append_basic_block("cleanup")
        self.suspended = self.fn.append_basic_block("suspended")

    def take_stack(self, nbytes: int) -> bool:
        """Never: a unit's tiles live in the heap arena, one copy per unit. CoroSplit keeps
        an alloca it judges dead across suspends on the resume stack, which every unit
        shares, and it misjudges a tile written piecewise in a loop that suspends (one
        element per iteration, each stored between two warp shuffles, read after the
        loop): every unit then read the last one's elements."""
        return False

    def _return_null_unless_allocated(self, memory, size) -> None:
        """A unit whose frame (its private arrays) cannot be allocated fails the launch:
        the ramp records the error and returns no handle before the coroutine begins (the
        pattern CoroSplit supports for allocation failure)."""
        b = self.builder
        failed = b.append_basic_block("alloc.failed")
        begin = b.append_basic_block("alloc.ok")
        b.cbranch(b.icmp_unsigned("==", memory, ir.Constant(PTR, None)), failed, begin)
        b.position_at_end(failed)
        err = b.load(self.ctx_field(CTX_ERR), typ=PTR)
        for slot, value in ((abi.ERR_CODE, ir.Constant(I64, abi.OUT_OF_MEMORY)),
                            (abi.ERR_SITE, ir.Constant(I64, -1)),
                            (abi.ERR_UNIT, b.zext(self.unit, I64)), (abi.ERR_VALUES, size)):
            b.store(value, b.gep(err, [ir.Constant(I32, slot)], source_etype=I64))
        b.store(ir.Constant(I32, abi.OUT_OF_MEMORY), self.ctx_field(CTX_ERROR))
        b.ret(ir.Constant(PTR, None))
        b.position_at_end(begin)

    def _suspend(self, resume: ir.Block, final: bool = False) -> None:
        b = self.builder
        state = b.call(self.mc.function("llvm.coro.suspend", I8, [TOKEN, I1]),
                       [_NoneToken(), ir.Constant(I1, int(final))])
        switch = b.switch(state, self.suspended)
        switch.add_case(ir.Constant(I8, 0), resume)
        switch.add_case(ir.Constant(I8, 1), self.cleanup)

    def _bump(self, field: int, delta: int, typ: ir.Type) -> None:
        b, ptr = self.builder, self.ctx_field(field)
        b.store(b.add(b.load(ptr, typ=typ), ir.Constant(typ, delta)), ptr)

    def progress(self) -> None:
        self._bump(CTX_PROGRESS, 1, I64)

    def wait_until(self, em, ready: Callable[[], ir.Value], site: int, values=()) -> None:
        b = self.builder
        check = b.append_basic_block("wait.check")
        b.branch(check)
        b.position_at_end(check)
        ok = ready()
        passed = b.append_basic_block("wait.passed")
        blocked = b.append_basic_block("wait.blocked")
        b.cbranch(ok, passed, blocked)
        b.position_at_end(blocked)
        record = b.gep(self.sync, [b.add(ir.Constant(I64, self.wait_records),
                                         b.mul(b.zext(self.unit, I64),
                                               ir.Constant(I64, WAIT_RECORD_SLOTS * 8)))],
                       source_etype=I8)
        for slot, value in enumerate([ir.Constant(I64, site), *values][:WAIT_RECORD_SLOTS]):
            b.store(value, b.gep(record, [ir.Constant(I32, slot)], source_etype=I64))
        self._suspend(check)
        b.position_at_end(passed)
        self.progress()

    def _pause(self, resume: ir.Block) -> None:
        """Let the other units run. It counts as progress: a unit that spins forever hangs,
        as it would on a GPU, rather than being reported as a deadlock while it may yet see
        the write it waits for."""
        self.progress()
        self._suspend(resume)

    def finish(self) -> None:
        self._close_allocas()
        b, mc = self.builder, self.mc
        self._bump(CTX_ALIVE, -1, I32)
        self.progress()
        b.branch(self.final)
        b.position_at_end(self.error_exit)
        code = b.load(b.gep(self.err, [ir.Constant(I32, abi.ERR_CODE)], source_etype=I64), typ=I64)
        b.store(b.trunc(code, I32), self.ctx_field(CTX_ERROR))
        b.branch(self.final)
        b.position_at_end(self.final)
        self._suspend(self.cleanup, final=True)
        b.position_at_end(self.cleanup)
        coro_free = mc.function("llvm.coro.free", PTR, [TOKEN, PTR])
        memory = b.call(coro_free, [self.coro_id, self.handle])
        b.call(mc.function("free", VOID, [PTR]), [memory])
        b.branch(self.suspended)
        b.position_at_end(self.suspended)
        b.call(mc.function("llvm.coro.end", VOID, [PTR, I1, TOKEN]),
               [self.handle, ir.Constant(I1, 0), _NoneToken()])
        b.ret(self.handle)
