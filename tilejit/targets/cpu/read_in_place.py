"""Pass ``cpu-read-copies-in-place`` (before dispatch, ``team_once`` kernels): a fragment
that is a read-only copy of a whole tensor box is read from the tensor itself wherever the
box lies inside the tensor.

Why: a CPU fragment is memory on the stack, so ``tj.copy(tile, x[r0:r0 + BM, 0:BN])`` is a
memcpy of the box before the passes that read ``tile`` -- a third of row softmax's time
with cold caches (``perf``, BENCHMARKS.md), spent moving bytes the next pass would have
read anyway. Reading ``x`` in place needs the box to lie inside ``x``: past its end the
copy reads zeros, which no in-place read gives. So the ops from the copy on run twice,
chosen at run time::

    if <every start >= 0 and start + size <= the tensor's extent, in every dim,
        and no box written before the last read shares a byte with the box>:
        the ops after the copy, reading the box through a region marked ``in_bounds``
        (dispatch then needs no masks for it)
    else:
        the copy and the ops after it, as written

Taken only where it cannot change what the kernel computes (else the kernel is left as
it is):

* the copy has no mask, config, team or forced family and copies a global box of the
  fragment's shape and dtype into a fragment ``alloc`` of the same block with no layout
  and one copy per CTA (no ``per_team``), which nothing used before;
* every later use of the fragment is a tile primitive reading it (an operand after the
  first), not an element access, view or region of it;
* from the copy to the last read of the fragment nothing but scalar, memory, control or
  tile ops run (no barrier, async copy or TMA), and the only writes to global or shared
  memory are tile primitives writing a box of a global tensor whose starts are known
  before the copy. The guard then also checks at run time that the bytes of each such box
  and of the copied box do not meet (``buffer_address``), so the copy's snapshot and the
  tensor agree until the last read: layer norm into another tensor reads in place, into
  ``x`` itself it copies;
* the kernel spins on no flag (another CTA could then write the box while it is read),
  and the block's terminator, if any, yields nothing.

Only the kernel's top-level block is searched; a copy in a loop body keeps its copy. Each
further copy after the first is versioned inside the in-place branch.
"""
from __future__ import annotations

from tilejit.ir.builder import Builder
from tilejit.ir.core import Block, KernelIR, Operation, Value, walk
from tilejit.ir.opdef import OpGroup
from tilejit.ir.ops_native import WRITING_ACCESSES
from tilejit.ir.rewrite import clone_ops
from tilejit.ir.types import BufferType, MemScope, RegionType, i64
from tilejit.passes.dispatch import TEAM_ONCE
from tilejit.passes.dispatch.registry import context_for
from tilejit.passes.effects import root_buffer, spin_flags

__all__ = ["read_copies_in_place"]

_PRIVATE = (MemScope.FRAGMENT, MemScope.LOCAL)   # memory no other unit reads or writes
_ALLOWED_GROUPS = (OpGroup.NATIVE, OpGroup.MEMORY, OpGroup.CONTROL, OpGroup.TILE)


def read_copies_in_place(kernel: KernelIR) -> KernelIR:
    """The pass (see the module's doc)."""
    if context_for(kernel).distribution != TEAM_ONCE or spin_flags(kernel):
        return kernel
    ops = _versioned(kernel.body.ops)
    if ops is None:
        return kernel
    body = Block.like(kernel.body)
    values = dict(zip(kernel.body.args, body.args))
    body.ops = clone_ops(ops, values)
    return kernel.replace(body=body)


def _versioned(ops: list[Operation]) -> list[Operation] | None:
    """``ops`` with the first copy that qualifies versioned, or None where none does."""
    terminator = ops[-1] if ops and ops[-1].opdef.terminator else None
    if terminator is not None and terminator.operands:
        return None
    tail_end = len(ops) - (terminator is not None)
    for index, op in enumerate(ops[:tail_end]):
        if not _copies_box(op, ops[:index]):
            continue
        writes = _box_writes(op, ops[index + 1:tail_end])
        if writes is not None:
            return [*ops[:index], *_guard(op, ops[index:tail_end], writes), *ops[tail_end:]]
    return None


def _copies_box(op: Operation, before: list[Operation]) -> bool:
    """Is ``op`` an unmasked, plain copy of a whole global box into a fresh fragment?"""
    if op.name != "tile.copy" or len(op.operands) != 2 or op.attrs["config"] \
            or op.attrs["dispatch"] is not None or op.attrs["team"] is not None:
        return False
    dst, src = op.operands
    alloc = dst.owner
    if getattr(alloc, "name", None) != "alloc" or alloc not in before \
            or alloc.attrs["scope"] is not MemScope.FRAGMENT \
            or alloc.attrs["layout"] is not None or alloc.attrs["per_team"] is not None:
        return False
    if not isinstance(src.type, RegionType) or src.owner.name != "region" \
            or src.type.scope is not MemScope.GLOBAL:
        return False
    if src.type.shape != dst.type.shape or src.type.dtype != dst.type.dtype:
        return False
    return not any(dst in o.operands for later in before[before.index(alloc) + 1:]
                   for o in _and_nested(later))


def _box_writes(copy: Operation, tail: list[Operation]) -> list[Operation] | None:
    """The regions of global memory written in ``tail`` up to the copied fragment's last
    read, each a box the guard can bound before the copy (then it checks at run time that
    none shares memory with the copied box); None where the fragment is not only read by
    tile primitives, or something else is written there."""
    fragment = copy.operands[0]
    last = -1
    for index, op in enumerate(tail):
        for inner in _and_nested(op):
            for position, value in enumerate(inner.operands):
                if value is not fragment:
                    continue
                if inner.opdef.group is not OpGroup.TILE or position == 0:
                    return None
                last = index
    if last < 0:
        return None
    made_after = {result for op in tail for inner in _and_nested(op) for result in inner.results}
    boxes = []
    for op in tail[:last + 1]:
        for inner in _and_nested(op):
            if not _writes_shared_state(inner):
                continue
            box = _global_box(inner, made_after)
            if box is None:
                return None
            boxes.append(box)
    return boxes


def _global_box(op: Operation, made_after: set[Value]) -> Operation | None:
    """The ``region`` op of the global tensor a tile primitive writes, where its starts are
    known before the copy (not made after it, or constants); else None."""
    region = op.operands[0].owner if op.opdef.group is OpGroup.TILE else None
    if getattr(region, "name", None) != "region":
        return None
    tensor, starts = region.operands[0], region.operands[1:]
    if not isinstance(tensor.type, BufferType) or tensor.type.scope is not MemScope.GLOBAL:
        return None   # a region of a region: its bounds are left to the copy
    known = all(start not in made_after or getattr(start.owner, "name", None) == "const"
                for start in starts)
    return region if known else None


def _writes_shared_state(op: Operation) -> bool:
    if op.opdef.group not in _ALLOWED_GROUPS:
        return True
    if op.name in WRITING_ACCESSES or op.opdef.group is OpGroup.TILE:
        return _scope(root_buffer(op.operands[0])) not in _PRIVATE
    return False


def _scope(buffer: Value) -> MemScope | None:
    t = buffer.type
    return t.buffer.scope if isinstance(t, RegionType) else getattr(t, "scope", None)


def _guard(copy: Operation, tail: list[Operation], writes: list[Operation]) -> list[Operation]:
    """The run-time check that ``copy``'s box lies inside its tensor and shares no memory
    with a box in ``writes``, and the ``if`` choosing between reading the box in place
    and ``tail`` (the copy and the ops after it) as written."""
    fragment, box = copy.operands
    region = box.owner
    tensor, starts = region.operands[0], region.operands[1:]
    b = Builder(copy.loc)
    prelude = Block()
    with b.insert_into(prelude):
        ok = None
        for dim, (start, size) in enumerate(zip(starts, region.attrs["sizes"])):
            first = _as_i64(b, start)
            end = b.binary("add", first, b.const(size, i64))
            ok = _and(b, ok, b.binary("and", b.cmp("ge", first, b.const(0, i64)),
                                      b.cmp("le", end, b.buffer_dim(tensor, dim))))
        read_low, read_high = _byte_span(b, region)
        for written in writes:
            low, high = _byte_span(b, written)
            ok = _and(b, ok, b.binary("or", b.cmp("le", high, read_low),
                                      b.cmp("le", read_high, low)))
        _, then_block, else_block = b.if_(ok)
    with b.insert_into(then_block):
        in_place = b.create("region", region.operands,
                            {**region.attrs, "in_bounds": True}).result
        in_place.name_hint = box.name_hint
        rest = clone_ops(tail[1:], {fragment: in_place})
        then_block.ops += _versioned(rest) or rest
        b.create("yield")
    with b.insert_into(else_block):
        else_block.ops += tail
        b.create("yield")
    return prelude.ops


def _as_i64(b: Builder, value: Value) -> Value:
    if getattr(value.owner, "name", None) == "const":   # a constant of the tail: made anew
        return b.const(value.owner.attrs["value"], i64)
    return value if value.type == i64 else b.cast(value, i64)


def _and(b: Builder, acc: Value | None, term: Value) -> Value:
    return term if acc is None else b.binary("and", acc, term)


def _byte_span(b: Builder, region: Operation) -> tuple[Value, Value]:
    """Bytes ``[low, high)`` that hold every element of ``region``'s box (of a global
    tensor; past the tensor's end too, so it covers what a masked access touches)."""
    tensor, starts = region.operands[0], region.operands[1:]
    low = high = b.buffer_address(tensor)
    size = b.const((tensor.type.dtype.bits + 7) // 8, i64)
    for dim, (start, extent) in enumerate(zip(starts, region.attrs["sizes"])):
        stride = b.binary("mul", b.buffer_stride(tensor, dim), size)
        first = b.binary("mul", _as_i64(b, start), stride)
        last = b.binary("add", first, b.binary("mul", b.const(extent - 1, i64), stride))
        low = b.binary("add", low, b.binary("min", first, last))
        high = b.binary("add", high, b.binary("max", first, last))
    return low, b.binary("add", high, size)


def _and_nested(op: Operation):
    """``op`` and every op nested in its regions, in pre-order."""
    yield op
    for region in op.regions:
        yield from walk(region)
