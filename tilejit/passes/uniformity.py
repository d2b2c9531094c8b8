"""Uniformity analysis: within which team each scalar value is the same for every thread.

``uniform_within(kernel)`` maps every value to the coarsest ``TeamKind`` inside which all
threads see one value: a kernel argument or a constant is the same everywhere (CLUSTER),
``cta_id()`` within a CTA, ``warpgroup_id()`` within a warpgroup, ``warp_id()`` within a
warp, and ``thread_id()``, ``lane_id()``, ``elect_sync()``, shuffles, ``mma_sync`` and ``ldmatrix``
(each lane gets its own part of the matrices), atomics, intrinsics and reads of thread-private memory
(local, fragment) only within a thread. Other ops are as
uniform as their least uniform operand (a load from shared or global memory at uniform
indices reads one value). A value leaving control flow (an ``if``'s results, a loop's
carried values) is also no more uniform than the condition or bounds that steered it;
loop-carried values are found by iterating to a fixed point (the lattice has five levels).

Scope analysis uses it to refuse a tile primitive that only part of its team would reach:
one under an ``if`` or loop whose condition differs between the team's threads.
"""
from __future__ import annotations

from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.ops_native import ATOMIC_ACCESSES
from ..ir.types import BufferType, MemScope, RegionType, TeamKind

__all__ = ["uniform_within"]

THREAD_INDEX_UNIFORMITY = {
    "cta_id": TeamKind.CTA, "num_ctas": TeamKind.CLUSTER, "cta_id_in_cluster": TeamKind.CTA,
    "cta_rank_in_cluster": TeamKind.CTA, "num_threads": TeamKind.CLUSTER,
    "warpgroup_id": TeamKind.WARPGROUP,
    "warp_id": TeamKind.WARP, "warp_id_in_wg": TeamKind.WARP,
    "lane_id": TeamKind.THREAD, "thread_id": TeamKind.THREAD,
}
_PER_THREAD_OPS = frozenset({"elect_sync", "warp_shuffle", "mma_sync", "ldmatrix", "ldmatrix_at",
                             "intrinsic"}) \
    | ATOMIC_ACCESSES
_PRIVATE_SCOPES = (MemScope.LOCAL, MemScope.FRAGMENT)


def uniform_within(kernel: KernelIR) -> dict[Value, TeamKind]:
    """The uniformity of every value of ``kernel`` (see the module docstring)."""
    analysis = _Uniformity()
    for arg in kernel.body.args:
        analysis.lower(arg, TeamKind.CLUSTER)
    while True:
        analysis.changed = False
        analysis.block(kernel.body)
        if not analysis.changed:
            return analysis.kinds


class _Uniformity:
    """One sweep over the kernel per call of ``block``; values only ever become less
    uniform, and ``changed`` says whether one did that was already known."""

    def __init__(self):
        self.kinds: dict[Value, TeamKind] = {}
        self.changed = False

    def of(self, value: Value) -> TeamKind:
        return self.kinds.get(value, TeamKind.CLUSTER)   # a loop value not reached yet

    def least(self, values) -> TeamKind:
        """The least uniform of ``values`` (CLUSTER for none)."""
        return min((self.of(v) for v in values), default=TeamKind.CLUSTER)

    def lower(self, value: Value, kind: TeamKind) -> None:
        old = self.kinds.get(value)
        new = kind if old is None else min(old, kind)
        if new != old:
            self.changed |= old is not None
            self.kinds[value] = new

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: Operation) -> None:
        if op.name == "for":
            self.for_loop(op)
        elif op.name == "while":
            self.while_loop(op)
        elif op.regions:   # if, team: results are what a region yields, chosen by operands
            steer = self.least(op.operands)
            for region in op.regions:
                self.block(region)
            for index, result in enumerate(op.results):
                yielded = [_yielded(region)[index] for region in op.regions]
                self.lower(result, min(self.least(yielded), steer))
        else:
            kind = self.least(op.operands)
            if op.name == "thread_index":
                kind = THREAD_INDEX_UNIFORMITY[op.attrs["kind"]]
            elif op.name in _PER_THREAD_OPS or (op.name == "load" and _is_private(op.operands[0])):
                kind = TeamKind.THREAD
            for result in op.results:
                self.lower(result, kind)

    def for_loop(self, op: Operation) -> None:
        lb, ub, step, *inits = op.operands
        steer = self.least((lb, ub, step))
        body = op.regions[0]
        iv, carried = body.args[0], body.args[1:]
        self.lower(iv, steer)
        self.join(carried, inits)
        self.block(body)
        self.join(carried, _yielded(body))
        for result, arg in zip(op.results, carried):
            self.lower(result, min(self.of(arg), steer))

    def while_loop(self, op: Operation) -> None:
        before, body = op.regions
        self.join(before.args, op.operands)
        self.block(before)
        condition = before.terminator   # condition(cond, *values passed on)
        steer, passed = self.of(condition.operands[0]), condition.operands[1:]
        self.join(body.args, passed)
        self.block(body)
        self.join(before.args, _yielded(body))
        for result, value in zip(op.results, passed):
            self.lower(result, min(self.of(value), steer))

    def join(self, targets, sources) -> None:
        for target, source in zip(targets, sources):
            self.lower(target, self.of(source))


def _yielded(block: Block) -> tuple:
    terminator = block.terminator
    return tuple(terminator.operands) if terminator is not None else ()


def _is_private(buffer: Value) -> bool:
    t = buffer.type
    if isinstance(t, RegionType):
        t = t.buffer
    return isinstance(t, BufferType) and t.scope in _PRIVATE_SCOPES
