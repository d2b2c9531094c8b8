"""wgmma groups left in flight: ``tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)``
commits its multiplies as one group and returns before they complete; ``tj.wgmma_wait(n)``
(the tile op ``wgmma_wait {pending = n}``) returns once all but the ``n`` newest groups
did. Two passes:

``wgmma-groups`` (tile IR): follows, in program order, the groups that may be pending --
a list, oldest first, each the accumulators its gemm writes. A ``gemm_async`` with
``wait=False`` adds one; one that waits retires its own accumulator (its wait carries
only that one's values, so the others still need theirs); ``wgmma_wait(n)`` keeps the
``n`` newest. An ``if`` joins its branches' lists (aligned at the newest group, each
position the union) and a loop runs its body until the list at its head stops changing,
so a group a loop iteration leaves in flight (the pipelined mainloop's ``wgmma_wait(1)``)
reaches the next iteration and the code after the loop. A gemm whose A is a register
fragment leaves that fragment pending with its accumulator (the PTX ISA makes touching A's
registers before the wait undefined); only accumulators are carried through the waits. Any
other op that touches an accumulator that may be pending -- a copy of it, an epilogue's
pointwise op, an element load -- is a CompilationError at its line naming the gemm and the
wait that is missing. A later ``gemm_async`` of family ``wgmma`` into the same accumulator
may: wgmma orders multiplies into one accumulator. Each ``wgmma_wait`` then gets, as
operands, every accumulator that may be pending where it runs: the values it carries.

``carry-wgmma-accumulators`` (after ``lower-addresses``): per thread each ``wgmma_wait``
becomes ``wgmma_wait_group {pending = n}`` on the values of its accumulators -- loaded
from their registers (each thread's private storage, read whole) and stored back -- so
a GPU compiler orders every later read of them after the wait (the verifier refuses a
read of a ``pending > 0`` wait's results). In the CPU's own lowering (``team_once``) a
gemm_async completes where it is issued: the op is dropped.
"""
from __future__ import annotations

from ..errors import CompilationError
from ..ir.builder import Builder
from ..ir.core import Block, KernelIR, Operation, Value, walk
from ..ir.rewrite import Rewriter, clone_ops
from ..ir.storage import held_per_thread, storage_elements
from ..ir.types import BufferType, MemScope, RegionType, i32
from .dispatch.registry import PER_THREAD, context_for
from .effects import ALIASING_OPS, root_buffer

__all__ = ["MAX_TRACKED_GROUPS", "carry_accumulators", "run"]

# Groups told apart; older ones are merged into the oldest kept (they retire with it or
# later, never sooner): enough for any wait count a kernel writes, and the fixpoint ends.
MAX_TRACKED_GROUPS = 8
_LOOPS = ("for", "while")

# A group: frozenset of (accumulator root, the gemm_async that left it in flight).
Groups = tuple


def _join(a: Groups, b: Groups) -> Groups:
    """Groups either path may leave pending, aligned at the newest."""
    if len(a) < len(b):
        a, b = b, a
    b = (frozenset(),) * (len(a) - len(b)) + b
    return tuple(x | y for x, y in zip(a, b))


def _capped(groups: Groups) -> Groups:
    if len(groups) <= MAX_TRACKED_GROUPS:
        return groups
    cut = len(groups) - MAX_TRACKED_GROUPS + 1
    return (frozenset().union(*groups[:cut]), *groups[cut:])


def _is_memory(value: Value) -> bool:
    return isinstance(value.type, (BufferType, RegionType))


class _Groups:
    """The analysis: ``carried[wait]`` the accumulators each wgmma_wait may retire."""

    def __init__(self):
        self.carried: dict[Operation, dict[Value, None]] = {}
        self.alias: dict[Value, Value] = {}   # a region op's result -> the root it yields
        self.visible: dict[Value, Value] = {}  # a root -> its latest name (a region's result)
        self.in_scope: set[Value] = set()       # values the op being looked at may use

    def root(self, value: Value) -> Value:
        root = root_buffer(value)
        return self.alias.get(root, root)

    def block(self, block: Block, groups: Groups) -> Groups:
        defined = [*block.args, *(v for op in block.ops for v in op.results)]
        added = [v for v in defined if v not in self.in_scope]
        self.in_scope.update(block.args)
        for op in block.ops:
            groups = self.op(op, groups)
            self.in_scope.update(op.results)
        self.in_scope.difference_update(added)
        return groups

    def op(self, op: Operation, groups: Groups) -> Groups:
        if op.name == "tile.gemm_async":
            return self.gemm(op, groups)
        if op.name == "wgmma_wait":
            kept = op.attrs["pending"]
            # an accumulator out of scope here is read nowhere after it: nothing to carry
            names = (self.visible.get(root, root) for group in groups for root, gemm in group
                     if root is self.root(gemm.operands[0]))   # A's registers: no values
            self.carried.setdefault(op, {}).update(
                dict.fromkeys(name for name in names if name in self.in_scope))
            return groups[len(groups) - kept:] if kept else ()
        if op.name not in ALIASING_OPS and not op.opdef.terminator:   # a yield passes it on
            self.check_untouched(op, groups)
        if not op.regions:
            return groups
        if op.name in _LOOPS:
            head = groups
            while True:
                after = _join(groups, self.regions(op, head))
                if after == head:
                    break
                head = after
            out = head
        elif op.name == "if":
            out = _join(*(self.block(region, groups) for region in op.regions))
        else:
            out = self.regions(op, groups)
        self.yielded(op)
        return out

    def regions(self, op: Operation, groups: Groups) -> Groups:
        for region in op.regions:
            groups = self.block(region, groups)
        return groups

    def yielded(self, op: Operation) -> None:
        """A region op's results that are buffers its regions yield name their roots."""
        for region in op.regions:
            last = region.terminator
            if last is None:
                continue
            for result, value in zip(op.results, last.operands[last.opdef.yields_from:]):
                if _is_memory(value):
                    self.alias[result] = self.root(value)
                    self.visible[self.root(value)] = result

    def gemm(self, op: Operation, groups: Groups) -> Groups:
        acc = self.root(op.operands[0])
        chained = op.attrs["dispatch"] == "wgmma"   # another family's gemm must wait first
        self.check_untouched(op, groups, skip=acc if chained else None)
        if op.attrs["wait"]:   # its own wait retires acc's groups (and carries only acc)
            return tuple(g for g in (frozenset(p for p in group if p[0] is not acc)
                                     for group in groups) if g)
        pending = {(acc, op)}
        if _in_registers(op.operands[1]):   # the ISA: A's registers untouched until the wait
            pending.add((self.root(op.operands[1]), op))
        return _capped((*groups, frozenset(pending)))

    def check_untouched(self, op: Operation, groups: Groups, skip: Value | None = None):
        pending = {root: gemm for group in groups for root, gemm in group}
        for value in op.operands:
            if not _is_memory(value):
                continue
            root = self.root(value)
            if root in pending and root is not skip:
                gemm = pending[root]
                name = f"'{root.name_hint}'" if root.name_hint else "an accumulator"
                what = op.name.removeprefix("tile.")
                raise CompilationError(
                    f"{what} touches {name} while the wgmma group of the gemm_async at line "
                    f"{gemm.loc.line} (wait=False) may still be in flight: a "
                    f"tj.wgmma_wait(n) that retires it is missing before this line "
                    f"(tj.wgmma_wait(0) retires every group; n keeps the n newest pending)",
                    op.loc)


def _in_registers(value: Value) -> bool:
    buffer = value.type.buffer if isinstance(value.type, RegionType) else value.type
    return isinstance(buffer, BufferType) and buffer.scope is MemScope.FRAGMENT


def _in_flight_ops(kernel: KernelIR) -> bool:
    return any(op.name == "wgmma_wait" or (op.name == "tile.gemm_async"
                                           and not op.attrs["wait"]) for op in kernel.walk())


def run(kernel: KernelIR) -> KernelIR:
    """Check the kernel's accumulators in flight; give each wgmma_wait the ones it
    retires (see the module doc)."""
    if not _in_flight_ops(kernel):
        return kernel
    analysis = _Groups()
    analysis.block(kernel.body, ())
    body = Block.like(kernel.body)
    values = dict(zip(kernel.body.args, body.args))

    def fold(op: Operation, operands):
        if op.name != "wgmma_wait":
            return None
        return op.replace(operands=[values[acc] for acc in analysis.carried.get(op, ())])
    body.ops = clone_ops(kernel.body.ops, values, fold)
    return kernel.replace(body=body)


def carry_accumulators(kernel: KernelIR) -> KernelIR:
    """Each ``wgmma_wait`` as ``wgmma_wait_group`` on its accumulators' values, per thread;
    dropped in the CPU's own lowering (see the module doc)."""
    if not any(op.name == "wgmma_wait" for op in walk(kernel.body)):
        return kernel
    per_thread = context_for(kernel).distribution == PER_THREAD

    def carry(op: Operation, ctx):
        if not per_thread:
            return ()
        b: Builder = ctx.builder
        places = []
        for acc in op.operands:
            t = acc.type
            if not held_per_thread(t.scope, t.layout):
                raise CompilationError(f"tj.wgmma_wait: the accumulator {acc.name_hint or ''} "
                                       f"is {t.scope} memory laid out by {t.layout}, not "
                                       "registers of wgmma's accumulator layout", op.loc)
            count = storage_elements(t.shape, t.layout, thread_private=True)
            places += [(acc, b.const(i, i32)) for i in range(count)]
        loaded = [b.create("load_at", place).result for place in places]
        waited = b.create("wgmma_wait_group", loaded, {"pending": op.attrs["pending"]})
        for (acc, offset), value in zip(places, waited.results):
            b.create("store_at", (acc, value, offset))
        return ()

    # one sweep: what it makes holds no wgmma_wait (a second would only rebuild the kernel)
    return Rewriter([("wgmma_wait", carry, "carry-wgmma-accumulators")],
                    "carry-wgmma-accumulators").sweep(kernel)
