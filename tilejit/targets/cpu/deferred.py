"""A unit's queue of copies that land late: ``cp.async`` chunks (``emit_async.py``) and
TMA stores (``emit_tma.py``), so that a kernel that reads before waiting reads what was
there before, as on a GPU.

The queue lives in the CTA's sync arena (zeroed when a CTA starts), one per unit: a state
struct holding the queue's length, the number of groups committed and the entries, each
tagged with the group that was open when it was queued. Committing closes the group;
waiting with N pending lands every entry of the groups before the N most recently
committed, in issue order (the queue's prefix: groups only grow along it). Entries of a
group never committed are not waited for, as PTX's wait_group does not. A full queue lands
its entries early: landing sooner is always a legal schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from .frames import counted_loop
from .types import I1, I32, I64, PTR, VOID

__all__ = ["DeferredQueue"]

_EVERY_GROUP = 2 ** 31 - 1


@dataclass(frozen=True)
class DeferredQueue:
    """One kind of queue: ``state`` is its struct, whose fields ``length``, ``committed``
    and ``entries`` (an array of ``capacity`` entries of ``entry_bytes`` bytes) are at
    those indices, an entry's group at ``group``; ``land(b, mc, state, i)`` emits the
    landing of entry ``i``."""

    name: str
    state: ir.LiteralStructType
    state_bytes: int
    entry_bytes: int
    capacity: int
    length: int
    committed: int
    entries: int
    group: int
    land: Callable

    def field(self, b: ir.IRBuilder, state, *path):
        return b.gep(state, [ir.Constant(I32, 0), *(ir.Constant(I32, p) if isinstance(p, int)
                                                      else p for p in path)],
                     source_etype=self.state)

    def unit_state(self, em):
        """This unit's queue."""
        base = em.mc.sync_state(self.name, em.mc.units.count * self.state_bytes)
        offset = em.b.add(ir.Constant(I64, base),
                          em.b.mul(em.b.zext(em.frame.unit, I64),
                                   ir.Constant(I64, self.state_bytes)))
        return em.byte_ptr(em.frame.sync, offset)

    def enqueue(self, em, state, values) -> ir.Value:
        """Queue an entry with ``values`` (field index -> value) in the open group, landing
        the whole queue first when it is full; the entry's index, for fields written
        through :meth:`field`."""
        b = em.b
        with b.if_then(b.icmp_signed("==", b.load(self.field(b, state, self.length), typ=I32),
                                     ir.Constant(I32, self.capacity)), likely=False):
            b.call(self._drain_fn(em.mc), [state, ir.Constant(I32, _EVERY_GROUP)])
        length = b.load(self.field(b, state, self.length), typ=I32)
        group = b.load(self.field(b, state, self.committed), typ=I32)
        for index, value in [*values.items(), (self.group, group)]:
            b.store(value, self.field(b, state, self.entries, length, index))
        b.store(b.add(length, ir.Constant(I32, 1)), self.field(b, state, self.length))
        return length

    def commit(self, em) -> None:
        b, state = em.b, self.unit_state(em)
        committed = self.field(b, state, self.committed)
        b.store(b.add(b.load(committed, typ=I32), ir.Constant(I32, 1)), committed)

    def retiring(self, em, pending: int, body: Callable) -> None:
        """Emit ``body(entry)`` (a pointer to it) for each entry a wait with ``pending``
        groups left retires, in queue order (before :meth:`wait` lands them)."""
        b, state = em.b, self.unit_state(em)
        limit = b.sub(b.load(self.field(b, state, self.committed), typ=I32),
                      ir.Constant(I32, pending))

        def each(i):
            group = b.load(self.field(b, state, self.entries, i, self.group), typ=I32)
            with b.if_then(b.icmp_signed("<", group, limit)):
                body(self.field(b, state, self.entries, i))
        counted_loop(b, b.load(self.field(b, state, self.length), typ=I32), each,
                     f"{self.name}.retire")

    def wait(self, em, pending: int) -> None:
        b, state = em.b, self.unit_state(em)
        committed = b.load(self.field(b, state, self.committed), typ=I32)
        b.call(self._drain_fn(em.mc), [state, b.sub(committed, ir.Constant(I32, pending))])

    def _drain_fn(self, mc) -> ir.Function:
        """``tj.<name>.drain(state, limit)``: land the queued entries of groups below
        ``limit`` (a prefix of the queue) and keep the rest at its front."""
        name = f"tj.{self.name}.drain"
        fn = mc.module.globals.get(name)
        if fn is not None:
            return fn
        fn = ir.Function(mc.module, ir.FunctionType(VOID, [PTR, I32]), name)
        fn.linkage = "internal"
        state, limit = fn.args
        entry, head, check, land, done = (fn.append_basic_block(name) for name in
                                          ("entry", "head", "check", "land", "done"))
        b = ir.IRBuilder(entry)
        length = b.load(self.field(b, state, self.length), typ=I32)
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I32)
        i.add_incoming(ir.Constant(I32, 0), entry)
        b.cbranch(b.icmp_signed("<", i, length), check, done)
        b.position_at_end(check)
        group = b.load(self.field(b, state, self.entries, i, self.group), typ=I32)
        b.cbranch(b.icmp_signed("<", group, limit), land, done)
        b.position_at_end(land)
        self.land(b, mc, state, i)
        i.add_incoming(b.add(i, ir.Constant(I32, 1)), b.block)
        b.branch(head)
        b.position_at_end(done)
        kept = b.sub(length, i)
        b.call(mc.function("llvm.memmove.p0.p0.i64", VOID, [PTR, PTR, I64, I1]),
               [self.field(b, state, self.entries, 0), self.field(b, state, self.entries, i),
                b.mul(b.zext(kept, I64), ir.Constant(I64, self.entry_bytes)),
                ir.Constant(I1, 0)])
        b.store(kept, self.field(b, state, self.length))
        b.ret_void()
        return fn
