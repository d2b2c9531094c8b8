"""software-pipeline: ``tj.range(..., pipeline=S)`` as an S-stage ring of async copies.

A pipelined loop's body starts by copying global tiles into shared **stage buffers**
(``tj.copy_async(a_s, A[...])`` without ``barrier=``, ``a_s`` allocated outside the loop)
and then reads them (a gemm, any reader). This pass, run first, gives each stage buffer a
leading dim of S slots and rewrites the loop into (``n`` its trip count)::

    for j in 0 .. S-2:                 # prologue: iterations 0 .. S-2 in flight
        if j < n: copy iteration j's tiles into slot j
        cp_async_commit
        sync                           # (for sync-hazards: see pipeline())
    for i in range(n):                 # steady state
        if i + S-1 < n: copy iteration i+S-1's tiles into slot (i+S-1) % S
        cp_async_commit                # one group per iteration, empty near the end
        cp_async_wait {pending = S-1}  # this thread's copies of iteration i landed
        sync                           # ... and every thread's
        the body on slot i % S
        sync                           # slot i % S read before iteration i+1 refills it

The guarded copies are the epilogue: the last S-1 iterations issue nothing, and a trip
count below S (or a run-time one) needs no other case. The copies keep their family
(``dispatch=``): with ``cp.async`` they overlap the body; the immediate family completes at
once and the commit/wait do nothing. ``tma`` copies (one thread's, completing on an
mbarrier) get S full barriers instead of groups: thread 0 initializes them, announces each
issued stage's bytes (``mbarrier_expect_tx {arrive}``) and issues its copies on the slot's
barrier, and iteration i waits on slot i % S with the round's parity (i // S) % 2 in place
of the wait and the first sync. A loop this cannot rewrite is a CompilationError at its
line saying why; ``pipeline=1`` or None leaves the loop alone.
"""
from __future__ import annotations

from ..errors import CompilationError
from ..ir.attrs import FilterSpec
from ..ir.builder import Builder
from ..ir.core import Block, KernelIR, Operation, Value, walk
from ..ir.types import MemScope, i32

__all__ = ["run"]

# Ops a copy's source may be computed with inside the loop: scalar arithmetic on the
# induction variable and values from outside, and views of global tensors.
_SOURCE_OPS = frozenset({"const", "binary", "unary", "cmp", "select", "cast", "region", "view",
                         "buffer_dim", "buffer_stride", "thread_index"})


def _pipelined(op: Operation) -> bool:
    return op.name == "for" and (op.attrs["pipeline"] or 1) > 1


def run(kernel: KernelIR) -> KernelIR:
    loops = [op for op in kernel.walk() if _pipelined(op)]
    if not loops:
        return kernel
    uses = _uses(kernel.body)
    plans = {id(loop): _plan(loop, uses) for loop in loops}
    stages = {buf: plan.stages for plan in plans.values() for buf in plan.buffers}
    body = Block.with_arg_types([a.type for a in kernel.params], kernel.param_names)
    _Rewrite(plans, stages).block(kernel.body, body, dict(zip(kernel.params, body.args)))
    return kernel.replace(body=body)


class _Plan:
    """What one pipelined loop copies and computes: the stage copies (in body order), the
    ops that compute their sources, and the stage count."""

    def __init__(self, loop: Operation, copies: list[Operation], sources: set[int],
                 source_only: set[int]):
        self.loop = loop
        self.stages = loop.attrs["pipeline"]
        self.copies = copies
        self.buffers = [copy.operands[0] for copy in copies]
        self.sources = sources              # ids of the body ops the copies' sources need
        self.source_only = source_only      # ... of those, the ones nothing else needs
        # tma copies complete on a ring of mbarriers; the others in commit/wait groups
        self.tma = copies[0].attrs["dispatch"] == "tma"
        self.nbytes = sum(copy.operands[0].type.dtype.itemsize * _size(copy.operands[0])
                          for copy in copies)


def _size(buf: Value) -> int:
    size = 1
    for extent in buf.type.shape:
        size *= extent
    return size


def _uses(block: Block) -> dict[Value, list[Operation]]:
    """Value -> the ops (at any depth) that take it as an operand."""
    uses: dict[Value, list[Operation]] = {}
    for op in walk(block):
        for value in op.operands:
            uses.setdefault(value, []).append(op)
    return uses


def _refuse(loop: Operation, why: str, at: Operation | None = None):
    where = f" (line {at.loc.line})" if at is not None and at.loc.line else ""
    raise CompilationError(f"tj.range(pipeline={loop.attrs['pipeline']}) cannot pipeline this "
                           f"loop: {why}{where}", loop.loc)


def _plan(loop: Operation, uses: dict) -> _Plan:
    body = loop.regions[0]
    inside = {id(op) for op in walk(body)}
    for op in walk(body):
        if _pipelined(op):
            _refuse(loop, "it holds another pipelined loop", op)
    step = loop.operands[2].owner
    if not (isinstance(step, Operation) and step.name == "const" and step.attrs["value"] > 0):
        _refuse(loop, "its step must be a compile-time positive int")
    copies = [op for op in body.ops if op.name == "tile.copy_async"]
    nested = [op for op in walk(body) if op.name == "tile.copy_async" and op not in copies]
    if nested:
        _refuse(loop, "a copy_async under control flow in the body is not a stage copy",
                nested[0])
    if not copies:
        _refuse(loop, "its body starts no tj.copy_async into a shared tile")
    if len({copy.attrs["dispatch"] == "tma" for copy in copies}) > 1:
        _refuse(loop, "its copies mix dispatch=\"tma\" (mbarrier completion) with other "
                "families (commit/wait groups)")
    position = {id(op): n for n, op in enumerate(body.ops)}
    sources = set().union(*(_check_stage_copy(loop, copy, uses, inside, position)
                            for copy in copies))
    return _Plan(loop, copies, sources, _source_only(body, copies))


def _check_stage_copy(loop, copy, uses, inside, position):
    dst, src, *barrier = copy.operands
    if barrier:
        _refuse(loop, "a copy_async with barrier= completes on the kernel's own mbarriers; "
                "pipeline= places the barriers itself: drop barrier=", copy)
    alloc = dst.owner
    if not (isinstance(alloc, Operation) and alloc.name == "alloc"
            and alloc.attrs["scope"] is MemScope.SHARED and id(alloc) not in inside):
        _refuse(loop, "a stage copy's dst must be a whole shared tile allocated before the "
                "loop", copy)
    if alloc.attrs["layout"] is not None or alloc.attrs["offset"] is not None:
        _refuse(loop, f"stage buffer {_name(dst)} has a layout of its own; the pass adds the "
                "stage dim to a plain shared tile", copy)
    for user in uses.get(dst, ()):
        if user is copy:
            continue
        if id(user) not in inside:
            _refuse(loop, f"stage buffer {_name(dst)} is used outside the loop", user)
        if _writes(user, dst, uses):
            _refuse(loop, f"stage buffer {_name(dst)} is written in the loop by more than its "
                    "copy", user)
        if position.get(id(_top(user, loop)), 0) < position[id(copy)]:
            _refuse(loop, f"stage buffer {_name(dst)} is read before its copy", user)
    return _check_source(loop, copy, src)


def _name(buf: Value) -> str:
    return buf.name_hint or f"allocated at line {buf.owner.loc.line}"


def _writes(op: Operation, buf: Value, uses: dict) -> bool:
    """Whether ``op`` writes ``buf``: as a tile primitive's first operand, a store's or an
    atomic's buffer, or through a view of it."""
    if op.name in ("region", "view"):
        return any(_writes(user, op.result, uses) for user in uses.get(op.result, ()))
    return bool(op.operands) and op.operands[0] is buf and \
        (op.name.startswith("tile.") or op.name in ("store", "atomic", "atomic_cas"))


def _top(op: Operation, loop: Operation) -> Operation:
    """The op of the loop body's own block that holds ``op`` (itself, or a nested op's
    outermost ancestor in the body)."""
    body = loop.regions[0]
    for candidate in body.ops:
        if candidate is op or any(inner is op for region in candidate.regions
                                  for inner in walk(region)):
            return candidate
    return op


def _check_source(loop: Operation, copy: Operation, value: Value) -> set[int]:
    """Ids of the body ops the copy's source needs, which must compute it for a later
    iteration: from the induction variable and values defined before the loop, by ops of
    :data:`_SOURCE_OPS`."""
    body = loop.regions[0]
    seen: set[int] = set()
    todo = [value]
    while todo:
        value = todo.pop()
        owner = value.owner
        if owner is body:
            if value is not body.args[0]:
                _refuse(loop, f"the source of the copy at line {copy.loc.line} depends on a "
                        "value the loop carries")
            continue
        if not isinstance(owner, Operation) or id(owner) in seen or owner not in body.ops:
            continue
        seen.add(id(owner))
        if owner.name not in _SOURCE_OPS or owner.regions:
            _refuse(loop, f"the source of the copy at line {copy.loc.line} depends on "
                    f"`{owner.name}` at line {owner.loc.line}, computed in the loop")
        todo.extend(owner.operands)
    return seen


def _source_only(body: Block, copies: list[Operation]) -> set[int]:
    """Ids of body ops whose results only the stage copies (or other such ops) use."""
    used_by_rest: set[Value] = set()
    skipped = {id(copy) for copy in copies}
    for op in reversed(body.ops):
        if id(op) in skipped:
            continue
        if op.name in _SOURCE_OPS and not any(r in used_by_rest for r in op.results):
            skipped.add(id(op))
            continue
        for inner in (op, *(i for region in op.regions for i in walk(region))):
            used_by_rest.update(inner.operands)
    return skipped - {id(copy) for copy in copies}


class _Rewrite:
    """Copies the kernel op by op into new blocks (``values`` maps old values to new),
    turning stage buffers into rings and pipelined loops into prologue + steady state."""

    def __init__(self, plans: dict[int, _Plan], stages: dict[Value, int]):
        self.plans = plans
        self.stages = stages               # stage buffer -> its loop's stage count
        self.slots: dict[Value, tuple[Value, Value]] = {}   # slot view -> (ring, slot)

    def block(self, old: Block, new: Block, values: dict, skip: set[int] = frozenset()) -> None:
        b = Builder()
        with b.insert_into(new):
            for op in old.ops:
                if id(op) not in skip:
                    b.loc = op.loc
                    self.op(op, b, values)

    def op(self, op: Operation, b: Builder, values: dict) -> None:
        plan = self.plans.get(id(op))
        if plan is not None:
            return self.pipeline(plan, b, values)
        if op.name == "alloc" and op.result in self.stages:
            ring = b.create("alloc", (), {**op.attrs, "shape": (self.stages[op.result],
                                                                  *op.attrs["shape"])}).result
            ring.name_hint = op.result.name_hint
            values[op.result] = ring
            return
        operands = [values.get(v, v) for v in op.operands]
        if op.name == "region" and operands[0] in self.slots:
            ring, slot = self.slots[operands[0]]
            new = b.create("region", (ring, slot, *operands[1:]),
                           {"sizes": (1, *op.attrs["sizes"]), "keep": (False, *op.attrs["keep"])})
        else:
            regions = []
            for region in op.regions:
                fresh = Block.like(region)
                values.update(zip(region.args, fresh.args))
                self.block(region, fresh, values)
                regions.append(fresh)
            new = op.replace(operands=operands, regions=regions, loc=b.loc)
            b.block.ops.append(new)
        for old, fresh in zip(op.results, new.results):
            fresh.name_hint = old.name_hint
            values[old] = fresh

    def slot_views(self, plan: _Plan, b: Builder, slot: Value, values: dict) -> None:
        """Map each stage buffer to its ring's ``slot``."""
        for buf in plan.buffers:
            ring = values[buf]
            zeros = [b.const(0, slot.type)] * len(buf.type.shape)
            view = b.region(ring, [slot, *zeros], (1, *buf.type.shape),
                            (False,) * 1 + (True,) * len(buf.type.shape))
            self.slots[view] = (ring, slot)
            values[buf] = view

    def slot(self, plan: _Plan, b: Builder, iteration: Value) -> Value:
        slot = b.binary("mod", iteration, b.const(plan.stages, iteration.type))
        slot.name_hint = "slot"
        return slot

    def issue(self, plan: _Plan, b: Builder, iteration: Value, slot: Value, trip: Value,
              values: dict, full: Value | None):
        """If ``iteration`` < ``trip``: its stage copies into ``slot``, then a commit
        (cp.async groups); or, with ``full`` (tma), one thread announces the slot's bytes
        on its full barrier and issues the copies, which complete there."""
        guarded = _if(b, b.cmp("lt", iteration, trip))
        with b.insert_into(guarded):
            if full is None:
                self.copies(plan, b, iteration, slot, values, ())
            else:
                with b.insert_into(_one_thread(b)):
                    b.mbarrier_expect_tx(full, slot, b.const(plan.nbytes, i32), arrive=True)
                    self.copies(plan, b, iteration, slot, values, (full, slot))
                    b.yield_()
            b.yield_()
        if full is None:
            b.create("cp_async_commit")

    def copies(self, plan: _Plan, b: Builder, iteration: Value, slot: Value, values: dict,
               completion: tuple) -> None:
        """Iteration ``iteration``'s stage copies into ``slot``: their sources recomputed."""
        loop = plan.loop
        lb, _, step = (values.get(v, v) for v in loop.operands[:3])
        inner = dict(values)
        inner[loop.regions[0].args[0]] = b.binary("add", lb, b.binary("mul", iteration, step))
        self.slot_views(plan, b, slot, inner)
        rest = {id(op) for op in loop.regions[0].ops} - plan.sources
        self.block(loop.regions[0], b.block, inner, skip=rest)
        for copy in plan.copies:
            dst, src = (inner.get(v, v) for v in copy.operands[:2])
            with b.at(copy.loc):
                b.create("tile.copy_async", (dst, src, *completion), copy.attrs)

    def ring_barriers(self, plan: _Plan, b: Builder) -> Value:
        """The tma ring's full barriers, one per slot, initialized by one thread."""
        full = b.alloc_barrier(plan.stages)
        full.name_hint = "full"
        with b.insert_into(_one_thread(b)):
            for j in range(plan.stages):
                b.mbarrier_init(full, b.const(j, i32), b.const(1, i32))
            b.yield_()
        b.sync()
        return full

    def pipeline(self, plan: _Plan, b: Builder, values: dict) -> None:
        loop = plan.loop
        lb, ub, step, *inits = (values.get(v, v) for v in loop.operands)
        index = lb.type
        ub, step = (v if v.type == index else b.cast(v, index) for v in (ub, step))
        one = b.const(1, index)
        trip = b.binary("floordiv", b.binary("sub", b.binary("add", b.binary("sub", ub, lb), step),
                                             one), step)
        full = self.ring_barriers(plan, b) if plan.tma else None
        for j in range(plan.stages - 1):
            stage = b.const(j, index)
            self.issue(plan, b, stage, stage, trip, values, full)
            if full is None:
                # Not for the hardware (the slots differ) but for sync-hazards, which tracks
                # buffers, not slots: without it an auto_sync=False kernel is refused for
                # a race between two stages' copies. Once per kernel, S - 1 barriers.
                b.sync()
        new, body = b.for_(b.const(0, index), trip, one, inits, unroll=loop.attrs["unroll"])
        old_body = loop.regions[0]
        with b.insert_into(body):
            i, *carried = body.args
            i.name_hint = f"{old_body.args[0].name_hint}_iter"
            inner = dict(values)
            inner.update(zip(old_body.args[1:], carried))
            ahead = b.binary("add", i, b.const(plan.stages - 1, index))
            self.issue(plan, b, ahead, self.slot(plan, b, ahead), trip, inner, full)
            if full is None:
                b.create("cp_async_wait", (), {"pending": plan.stages - 1})
                b.sync()
                slot = self.slot(plan, b, i)
            else:   # the slot's phase flips once per round of S iterations
                slot = self.slot(plan, b, i)
                stages = b.const(plan.stages, index)
                parity = b.binary("mod", b.binary("floordiv", i, stages), b.const(2, index))
                b.mbarrier_wait(full, slot, parity)
            inner[old_body.args[0]] = b.binary("add", lb, b.binary("mul", i, step))
            inner[old_body.args[0]].name_hint = old_body.args[0].name_hint
            self.slot_views(plan, b, slot, inner)
            skip = plan.source_only | {id(copy) for copy in plan.copies}
            self.block(old_body, body, inner, skip=skip | {id(old_body.ops[-1])})
            b.sync()
            self.op(old_body.ops[-1], b, inner)     # the yield of the carried values
        for old, fresh in zip(loop.results, new.results):
            fresh.name_hint = old.name_hint
            values[old] = fresh


def _if(b: Builder, cond: Value, filter: FilterSpec | None = None) -> Block:
    """An ``if`` without results or else branch: its then block, still to be ended."""
    _, then_block, else_block = b.if_(cond, filter=filter)
    with b.insert_into(else_block):
        b.yield_()
    return then_block


def _one_thread(b: Builder) -> Block:
    """The then block of ``if tj.thread_id() == 0``."""
    first = b.cmp("eq", b.thread_index("thread_id"), b.const(0, i32))
    return _if(b, first, FilterSpec("thread", 0, 1))
