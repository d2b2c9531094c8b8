"""plan-shared-memory: offsets, alignment and reuse of a kernel's shared buffers.

Every ``alloc {scope = shared}`` gets a byte ``offset`` in the CTA's shared memory and the
kernel gets ``shared_bytes``, the bytes one CTA needs (tilejit has no dynamically sized
shared memory: shared shapes are static, so this is the whole size). Target-neutral: it
runs on the tile IR after lowering, before a target emits code (docs/lowering.md "Shared
memory plan").

* **Size**: the storage the buffer's layout reaches, times the element size
  (``ir/storage.py``, as every target stores an on-chip buffer).
* **Alignment**: 128 bytes; a swizzled layout's whole period when larger (1024 bytes for a
  128-byte swizzle).
* **Live range**, in program points (ops numbered in pre-order): from the first to the last
  use of the buffer or of anything that refers to it (views, regions, and values it flows
  into through ``yield``/``condition``, loop-carried arguments and the results of ``for``,
  ``if``, ``while``, ``team``), each use taken at the op that encloses it in the alloc's own
  block, so a use inside a loop or ``if`` holds the buffer over the whole construct. The
  range then stays open until the next CTA-wide barrier that all threads pass (a ``sync``,
  a ``cluster_sync`` or a ``single {team = cta}`` under no thread filter; for a buffer that
  other CTAs reach through ``cluster_map``, a ``cluster_sync``) -- found after the last use in the
  alloc's block, else after the construct enclosing it, and so on outwards; with none, until
  the kernel ends; a range that stays open past the end of a loop covers the whole loop
  (the next iteration's beginning too). Bytes are reused only behind such a barrier:
  without it a thread still reading the old buffer would race with one writing the new
  one. A use the alloc's block does not enclose (a reference escaping its region) makes the
  buffer live for the whole kernel.
* **Placement**: largest buffers first (program order breaks ties), each at the lowest
  aligned offset where it overlaps no placed buffer whose live range overlaps its own.

The target's capacity (``Capabilities.shared_memory_per_cta``; the backend registers it
with :func:`register_capacity` when it registers for compiling) bounds ``shared_bytes``: a
kernel needing more is a CompilationError at the buffer that crosses the limit, listing
every buffer with its line, size and offset.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ..errors import CompilationError, SourceLocation
from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.ops_cluster import CTA_BARRIERS
from ..ir.rewrite import Rewriter
from ..ir.storage import shared_alignment, storage_bytes, team_copies
from ..ir.types import BufferType, MemScope, RegionType, TeamKind

__all__ = ["SharedBuffer", "SharedPlan", "capacity_for", "format_bytes", "plan",
           "register_capacity", "run", "unregister_capacity"]

# target name -> bytes of shared memory one CTA may use (Capabilities.shared_memory_per_cta)
_CAPACITY: dict[str, int] = {}


def register_capacity(target: str, nbytes: int) -> None:
    """Declare ``target``'s shared memory per CTA (its backend does this in ``register``)."""
    _CAPACITY[target] = nbytes


def unregister_capacity(target: str) -> None:
    """Forget ``target``'s capacity (a test's own target, once the test is done)."""
    _CAPACITY.pop(target, None)


def capacity_for(kernel: KernelIR) -> int | None:
    """The shared memory per CTA of ``kernel``'s target; None (no limit) when unknown."""
    return _CAPACITY.get(kernel.attrs.get("target") or "")


@dataclass(frozen=True)
class SharedBuffer:
    """One shared alloc: its size, alignment and live range ``[start, end]`` in program
    points (twice an op's pre-order number; odd points are uses, even ones barriers)."""

    name: str
    loc: SourceLocation
    nbytes: int
    align: int
    start: int
    end: int
    offset: int = 0

    def overlaps_in_time(self, other: SharedBuffer) -> bool:
        return self.start <= other.end and other.start <= self.end

    def overlaps_in_bytes(self, other: SharedBuffer) -> bool:
        return (self.offset < other.offset + other.nbytes
                and other.offset < self.offset + self.nbytes)


@dataclass(frozen=True)
class SharedPlan:
    """The buffers in program order and the bytes the CTA needs."""

    buffers: tuple[SharedBuffer, ...]
    total: int

    def table(self) -> str:
        rows = [("buffer", "line", "bytes", "offset")]
        rows += [(b.name, str(b.loc.line), format_bytes(b.nbytes), str(b.offset))
                 for b in self.buffers]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        return "\n".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                         for row in rows)


def format_bytes(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} bytes"


# ----------------------------------------------------------------------------- liveness
class _Program:
    """Program points of a kernel: every op's pre-order number and the last number inside
    it, the block each op sits in, each block's parent op, and each value's users."""

    def __init__(self, kernel: KernelIR):
        self.number: dict[Operation, int] = {}
        self.last: dict[Operation, int] = {}
        self.block_of: dict[Operation, Block] = {}
        self.parent: dict[Block, Operation | None] = {}
        self.users: dict[Value, list[Operation]] = defaultdict(list)
        self._visit(kernel.body, None)
        self.end = 2 * len(self.number) + 1   # after the last op

    def _visit(self, block: Block, parent: Operation | None) -> None:
        self.parent[block] = parent
        for op in block.ops:
            self.block_of[op] = block
            self.number[op] = len(self.number)
            for value in op.operands:
                self.users[value].append(op)
            for region in op.regions:
                self._visit(region, op)
            self.last[op] = len(self.number) - 1

    def enclosing(self, op: Operation, block: Block) -> Operation | None:
        """The op of ``block`` that is or encloses ``op`` (None if ``block`` does not)."""
        while self.block_of[op] is not block:
            op = self.parent[self.block_of[op]]
            if op is None:
                return None
        return op

    def filtered(self, op: Operation) -> bool:
        """Whether an ``if`` with a thread filter encloses ``op``."""
        while (op := self.parent[self.block_of[op]]) is not None:
            if op.name == "if" and op.attrs["filter"] is not None:
                return True
        return False

    def is_cta_barrier(self, op: Operation, cluster: bool = False) -> bool:
        """A barrier every thread of the CTA passes (``cluster``: of the cluster's CTAs)."""
        if cluster:
            return op.name == "cluster_sync" and not self.filtered(op)
        barrier = op.name in CTA_BARRIERS or (op.name == "single"
                                              and op.attrs["team"] is TeamKind.CTA)
        return barrier and not self.filtered(op)

    def barrier_after(self, op: Operation, cluster: bool = False) -> tuple[int, int | None]:
        """The point of the first CTA-wide barrier (``cluster``: cluster-wide) every thread
        passes after ``op``, and the first point of the outermost loop that search left
        (None if it left none): a buffer released only after a loop is live over all of it,
        its next iterations' beginnings included."""
        loop_start = None
        while op is not None:
            block = self.block_of[op]
            later = block.ops[block.ops.index(op) + 1:]
            barrier = next((o for o in later if self.is_cta_barrier(o, cluster)), None)
            if barrier is not None:
                return 2 * self.number[barrier], loop_start
            op = self.parent[block]
            if op is not None and op.name in ("for", "while"):
                loop_start = 2 * self.number[op] + 1
        return self.end, loop_start


def _refers_to_memory(value: Value) -> bool:
    return isinstance(value.type, (BufferType, RegionType))


def _derived(program: _Program, op: Operation) -> list[Value]:
    """Values through which ``op`` may pass on a buffer reference it takes as an operand."""
    out = [*op.results, *(arg for region in op.regions for arg in region.args)]
    if op.opdef.terminator:   # yield / condition: the enclosing op's results and arguments
        owner = program.parent[program.block_of[op]]
        if owner is not None:
            out += [*owner.results, *(arg for region in owner.regions for arg in region.args)]
    return [v for v in out if _refers_to_memory(v)]


def _references(program: _Program, root: Value) -> set[Value]:
    seen, work = {root}, [root]
    while work:
        for user in program.users[work.pop()]:
            for value in _derived(program, user):
                if value not in seen:
                    seen.add(value)
                    work.append(value)
    return seen


def _live_range(program: _Program, alloc: Operation) -> tuple[int, int]:
    block = program.block_of[alloc]
    sites = list(program.users[alloc.result]) or [alloc]   # no memory is touched before
    references = _references(program, alloc.result)
    for value in references - {alloc.result}:
        owner = value.owner
        if isinstance(owner, Block):  # a region argument: held over its op
            owner = program.parent[owner]
        sites += [owner, *program.users[value]]
    enclosing = [program.enclosing(op, block) for op in sites]
    if any(op is None for op in enclosing):
        return 0, program.end
    first = min(enclosing, key=program.number.__getitem__)
    last = max(enclosing, key=program.last.__getitem__)
    # Other CTAs reach a buffer through tj.remote until a cluster barrier orders them.
    remote = any(getattr(v.owner, "name", None) == "cluster_map" for v in references)
    end, loop_start = program.barrier_after(last, cluster=remote)
    start = 2 * program.number[first] + 1
    return (start if loop_start is None else min(start, loop_start)), end


# ----------------------------------------------------------------------------- placement
def _name(op: Operation) -> str:
    return op.result.name_hint or f"shared buffer at line {op.loc.line}"


def _place(buffers: list[SharedBuffer]) -> list[SharedBuffer]:
    placed: list[SharedBuffer] = []
    order = sorted(range(len(buffers)), key=lambda i: (-buffers[i].nbytes, i))
    result: list[SharedBuffer | None] = [None] * len(buffers)
    for i in order:
        buf = buffers[i]
        busy = sorted((b.offset, b.offset + b.nbytes) for b in placed if b.overlaps_in_time(buf))
        offset = 0
        for low, high in busy:
            if offset + buf.nbytes <= low:
                break
            offset = max(offset, -(-high // buf.align) * buf.align)
        result[i] = replace(buf, offset=offset)
        placed.append(result[i])
    return result


def plan(kernel: KernelIR) -> SharedPlan:
    """Sizes, live ranges and offsets of ``kernel``'s shared allocs, in program order."""
    program = _Program(kernel)
    buffers = []
    for op in program.number:
        if op.name != "alloc" or op.attrs["scope"] is not MemScope.SHARED:
            continue
        dtype, layout = op.attrs["dtype"], op.attrs["layout"]
        start, end = _live_range(program, op)
        copies = team_copies(op.attrs["per_team"], kernel.attrs["num_warps"])
        buffers.append(SharedBuffer(_name(op), op.loc,
                                    storage_bytes(dtype, op.attrs["shape"], layout) * copies,
                                    shared_alignment(dtype, layout), start, end))
    placed = _place(buffers)
    return SharedPlan(tuple(placed), max((b.offset + b.nbytes for b in placed), default=0))


def _check_capacity(kernel: KernelIR, shared: SharedPlan, capacity: int | None) -> None:
    if capacity is None or shared.total <= capacity:
        return
    crossing = max(shared.buffers, key=lambda b: b.offset + b.nbytes)
    target = kernel.attrs.get("target")
    who = f"the {target.upper()} target gives a CTA" if target else "a CTA may use"
    raise CompilationError(
        f"the kernel's shared memory needs {format_bytes(shared.total)} ({shared.total} bytes): "
        f"{who} at most {format_bytes(capacity)} ({capacity} bytes) of shared memory. The "
        f"shared buffers (those live at the same time cannot share bytes):\n{shared.table()}",
        crossing.loc)


def run(kernel: KernelIR, capacity: int | None = None) -> KernelIR:
    """The pass: every shared alloc gets its ``offset``, the kernel its ``shared_bytes``.
    ``capacity`` (default: the target's, see :func:`register_capacity`) bounds the total."""
    shared = plan(kernel)
    _check_capacity(kernel, shared, capacity_for(kernel) if capacity is None else capacity)
    offsets = iter(b.offset for b in shared.buffers)

    def place(op: Operation, ctx) -> Operation | None:
        if op.attrs["scope"] is not MemScope.SHARED:
            return None
        return op.replace(attrs={"offset": next(offsets)})

    # One sweep offers the allocs in pre-order, the order plan() numbered them in.
    body = Rewriter([("alloc", place)], "plan-shared-memory").sweep(kernel).body
    return kernel.replace(body=body, attrs={"shared_bytes": shared.total})
