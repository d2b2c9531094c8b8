"""Pass ``cpu-read-copies-in-place`` (before dispatch, ``team_once`` kernels): a fragment
that is a read-only copy of a whole tensor box is read from the tensor itself wherever the
box lies inside the tensor.

Why: a CPU fragment is memory on the stack, so ``tj.copy(tile, x[r0:r0 + BM, 0:BN])`` is a
memcpy of the box before the passes that read ``tile`` -- a third of row softmax's time
with cold caches (``perf``, BENCHMARKS.md), spent moving bytes the next pass would have
read anyway. Reading ``x`` in place needs the box to lie inside ``x``: past its end the
copy reads zeros, which no in-place read gives. So the ops from the copy on run twice,
chosen at run time::

    if <every start >= 0 and start + size <= the tensor's extent, in every dim>:
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
* from the copy to the last read of the fragment no op writes global or shared memory
  (the copy's snapshot and the tensor agree until then, even where ``out`` is ``x``) nor is
  anything but scalar, memory, control or tile ops (no barrier, async copy or TMA);
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
from tilejit.ir.types import MemScope, RegionType, i64
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
        if _copies_box(op, ops[:index]) and _reads_only(op, ops[index + 1:tail_end]):
            return [*ops[:index], *_guard(op, ops[index:tail_end]), *ops[tail_end:]]
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


def _reads_only(copy: Operation, tail: list[Operation]) -> bool:
    """Is the copied fragment only read by tile primitives in ``tail``, with nothing
    written to global or shared memory up to its last read?"""
    fragment = copy.operands[0]
    last = -1
    for index, op in enumerate(tail):
        for inner in _and_nested(op):
            for position, value in enumerate(inner.operands):
                if value is not fragment:
                    continue
                if inner.opdef.group is not OpGroup.TILE or position == 0:
                    return False
                last = index
    return last >= 0 and not any(_writes_shared_state(inner) for op in tail[:last + 1]
                                 for inner in _and_nested(op))


def _writes_shared_state(op: Operation) -> bool:
    if op.opdef.group not in _ALLOWED_GROUPS:
        return True
    if op.name in WRITING_ACCESSES or op.opdef.group is OpGroup.TILE:
        return _scope(root_buffer(op.operands[0])) not in _PRIVATE
    return False


def _scope(buffer: Value) -> MemScope | None:
    t = buffer.type
    return t.buffer.scope if isinstance(t, RegionType) else getattr(t, "scope", None)


def _guard(copy: Operation, tail: list[Operation]) -> list[Operation]:
    """The run-time bounds check of ``copy``'s box and the ``if`` choosing between
    reading the box in place and ``tail`` (the copy and the ops after it) as written."""
    fragment, box = copy.operands
    region = box.owner
    tensor, starts = region.operands[0], region.operands[1:]
    b = Builder(copy.loc)
    prelude = Block()
    with b.insert_into(prelude):
        inside = None
        for dim, (start, size) in enumerate(zip(starts, region.attrs["sizes"])):
            first = start if start.type == i64 else b.cast(start, i64)
            end = b.binary("add", first, b.const(size, i64))
            dim_ok = b.binary("and", b.cmp("ge", first, b.const(0, i64)),
                              b.cmp("le", end, b.buffer_dim(tensor, dim)))
            inside = dim_ok if inside is None else b.binary("and", inside, dim_ok)
        _, then_block, else_block = b.if_(inside)
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


def _and_nested(op: Operation):
    """``op`` and every op nested in its regions, in pre-order."""
    yield op
    for region in op.regions:
        yield from walk(region)
