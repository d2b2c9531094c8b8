"""Pass ``fuse-pointwise``: chains of pointwise tile ops become one op computed in registers.

A fragment expression such as ``tj.fma(centred * rstd, w, b)`` builds one temporary
fragment per operator, so every operator is its own pass over the tile: the temporary is
written, then read back by the next op. This pass folds such a temporary's producer into
its consumers, which then compute the producer's element on the fly:

* into a ``tile.pointwise``: the consumer becomes ``tile.pointwise {op = expr, steps}``
  whose ``steps`` chain the producer's op(s) and its own (``ops_tile.check_steps``);
* into a ``tile.copy`` without a mask: the copy becomes that pointwise op writing the
  copy's destination (the last step converts to the destination's dtype), so an
  expression stored to a tensor streams straight from its sources;
* into a ``tile.reduce``: the reduce carries the chain (``steps``) and reduces its values
  (``tj.sum(c * c)`` reads ``c`` once).

A temporary ``T`` is folded when all of this holds (otherwise it stays, and says nothing:
fusion is an optimization):

* ``T`` is an ``alloc`` of a fragment or local without a layout of the kernel's own (none,
  or one ``infer-fragment-layouts`` chose), written once, whole, by a pointwise op ``P``
  that does not read it, and read only whole, as a source of
  consumers of the kinds above in ``P``'s block (no views, regions or element accesses);
* ``P`` and every consumer run under the same execution scope and team, with no forced
  dispatch; ``P`` has no config and no consumer a ``fill`` (what ``P``'s sources read
  past a tensor's end must stay 0);
* ``T`` has the consumer's domain shape (a broadcast read of ``T`` stays a read);
* no op between ``P`` and a consumer may change what ``P`` reads: no control flow, sync,
  native store or asynchronous op, and no tile op whose destination shares a buffer with a
  source of ``P`` (every tensor counts as sharing with every tensor: arguments may alias);
* a temporary whose layout the compiler chose folds only where one of its chain's sources
  has that layout and its shape (the consumer's threads keep holding its elements);
* a reduce consumer gets ``P``'s chain only when it is ``ARITHMETIC`` over on-chip tiles
  (the reduce rules read fused elements without bounds checks, and vectorize only those
  ops), one of them with ``T``'s shape and dtype (and, where ``T`` is placed on threads,
  placed as ``T`` is) to drive it;
* with more than one consumer, each recomputes ``P``'s chain: only when that chain is
  at most ``RECOMPUTE_STEPS`` ``ARITHMETIC`` steps over on-chip tiles (recomputing beats a
  pass through memory only when it is cheap and the sources are close).

Results are those of the unfused ops: every step computes in the dtype of the temporary
it replaces (the conversion its store made), in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.ops_tile import COMMON_ATTRS, FUSED
from ..ir.storage import on_threads
from ..ir.types import BufferType, MemScope, RegionType, ScalarType
from .effects import root_buffer

__all__ = ["ARITHMETIC", "Chain", "RECOMPUTE_STEPS", "run"]

RECOMPUTE_STEPS = 2    # longest chain recomputed by each of several consumers
# Ops cheap enough to recompute per consumer, and the ones a reduce takes as its chain:
# every target's reduce families evaluate these on their vectors (an exp in a reduce's
# chain would fall to an element loop; its tile is better written once).
ARITHMETIC = ("add", "sub", "mul", "div", "fma", "neg", "select")
MAX_STEPS = 24         # longest chain built (bounds compile time and register pressure)
_ON_CHIP = (MemScope.FRAGMENT, MemScope.LOCAL, MemScope.SHARED)
# Config keys of a consumer that a fused chain cannot honour.
_UNCARRIED_CONFIG = frozenset({"fill", "approx"})
_TEMPORARY = (MemScope.FRAGMENT, MemScope.LOCAL)
# Ops that may run between a producer and its consumer: they write no memory.
_PURE = frozenset({"alloc", "const", "binary", "unary", "cmp", "select", "cast", "region",
                   "view", "buffer_dim", "thread_index", "load"})


@dataclass(frozen=True)
class Chain:
    """A fused element computation: values ``0 .. len(sources)-1`` are ``sources``, step
    ``k`` (``(op, dtype, *args)``) defines value ``len(sources) + k``; the last is the
    result."""

    sources: tuple[Value, ...]
    steps: tuple[tuple, ...]

    @classmethod
    def of(cls, op: Operation) -> Chain:
        """The chain of a pointwise op as it is (one step unless already fused)."""
        srcs = tuple(op.operands[1:])
        if op.attrs["op"] == FUSED:
            return cls(srcs, op.attrs["steps"])
        dtype = op.operands[0].type.dtype
        return cls(srcs, ((op.attrs["op"], dtype, *range(len(srcs))),))

    def tile_sources(self) -> list[Value]:
        return [s for s in self.sources if not isinstance(s.type, ScalarType)]

    @classmethod
    def inline(cls, operands, own_steps, inlined: dict[Value, Chain]) -> Chain:
        """The chain computing ``own_steps`` over ``operands`` (values, some of them
        temporaries with their chains in ``inlined``)."""
        sources: list[Value] = []
        steps: list[tuple] = []
        # Sources first (numbers 0..n-1), so gather every leaf before numbering steps.
        for value in operands:
            for leaf in (inlined[value].sources if value in inlined else (value,)):
                if leaf not in sources:
                    sources.append(leaf)
        n = len(sources)
        numbers, done = [], {}   # done: an inlined temporary read twice is computed once
        for value in operands:
            if value not in inlined:
                numbers.append(sources.index(value))
                continue
            if value not in done:
                inner = inlined[value]
                local = [sources.index(s) for s in inner.sources]
                for name, dtype, *args in inner.steps:
                    steps.append((name, dtype, *(local[a] for a in args)))
                    local.append(n + len(steps) - 1)
                done[value] = local[-1]
            numbers.append(done[value])
        for name, dtype, *args in own_steps:
            steps.append((name, dtype, *(numbers[a] for a in args)))
            numbers.append(n + len(steps) - 1)
        return cls(tuple(sources), tuple(steps))


def run(kernel: KernelIR) -> KernelIR:
    """The kernel with foldable pointwise temporaries folded into their consumers."""
    uses = _uses(kernel)
    plan = _Plan(uses)
    for op in kernel.walk():
        for region in op.regions:
            plan.block(region)
    plan.block(kernel.body)
    if not plan.replaced:
        return kernel
    return kernel.replace(body=_rebuild(kernel.body, plan, {}))


def _uses(kernel: KernelIR) -> dict[Value, list[tuple[Operation, int]]]:
    uses: dict[Value, list[tuple[Operation, int]]] = {}
    for op in kernel.walk():
        for index, value in enumerate(op.operands):
            uses.setdefault(value, []).append((op, index))
    return uses




def _scope_of(value: Value) -> MemScope | None:
    t = value.type
    buffer = t.buffer if isinstance(t, RegionType) else t
    return buffer.scope if isinstance(buffer, BufferType) else None


def _may_share(a: Value, b: Value) -> bool:
    """Whether tiles ``a`` and ``b`` may share memory (any two tensors may)."""
    ra, rb = root_buffer(a), root_buffer(b)
    if ra is rb:
        return True
    return _scope_of(ra) is MemScope.GLOBAL and _scope_of(rb) is MemScope.GLOBAL


class _Plan:
    """Which producers fold away (``erased``) and each consumer's new form (``replaced``:
    op -> (name, operands, attrs))."""

    def __init__(self, uses):
        self.uses = uses
        self.chains: dict[Value, Chain] = {}    # folded temporary -> its producer's chain
        self.erased: set[int] = set()
        self.replaced: dict[int, tuple[str, tuple, dict]] = {}

    def block(self, block: Block) -> None:
        ops = block.ops
        for position, op in enumerate(ops):
            if op.name == "tile.pointwise" and op.attrs["op"] != "iota":
                self.consume(op)
                self.produce(op, ops, position)
            elif op.name in ("tile.copy", "tile.reduce"):
                self.consume(op)

    # ------------------------------------------------------------------ consumers
    def current(self, op: Operation) -> tuple[str, tuple, dict]:
        return self.replaced.get(id(op), (op.name, tuple(op.operands), {}))

    def chain_of(self, op: Operation) -> Chain:
        """The chain a pointwise op computes, once its own folded sources are in it."""
        _, operands, attrs = self.current(op)
        return Chain(operands[1:], attrs["steps"]) if attrs else Chain.of(op)

    def consume(self, op: Operation) -> None:
        """Fold the chains of the temporaries ``op`` reads into it (``op`` not yet
        replaced: each op is a consumer once, before it may be a producer)."""
        operands = tuple(op.operands)
        srcs = operands[1:]
        if not any(v in self.chains for v in srcs):
            return
        if op.name == "tile.pointwise":
            chain = Chain.inline(srcs, Chain.of(op).steps, self.chains)
            self.replaced[id(op)] = ("tile.pointwise", (operands[0], *chain.sources),
                                     {"op": FUSED, "steps": chain.steps})
        elif op.name == "tile.copy":
            dst, temp = operands[0], srcs[0]
            chain = self.chains[temp]
            steps = chain.steps
            dtype = dst.type.dtype
            if steps[-1][1] != dtype:
                steps += (("cast", dtype, len(chain.sources) + len(steps) - 1),)
            self.replaced[id(op)] = ("tile.pointwise", (dst, *chain.sources),
                                     {"op": FUSED, "steps": steps})
        else:  # tile.reduce: the driving source first
            temp, chain = srcs[0], self.chains[srcs[0]]
            driver = next(s for s in chain.tile_sources() if _drives(s, temp))
            order = [driver] + [s for s in chain.sources if s is not driver]
            renumber = [order.index(s) for s in chain.sources]
            steps = tuple((name, dtype, *(renumber[a] if a < len(renumber) else a
                                          for a in args))
                          for name, dtype, *args in chain.steps)
            self.replaced[id(op)] = ("tile.reduce", (operands[0], *order), {"steps": steps})

    # ------------------------------------------------------------------ producers
    def produce(self, op: Operation, ops: list[Operation], position: int) -> None:
        temp = op.operands[0]
        if not self.is_temporary(op, temp):
            return
        chain = self.chain_of(op)
        consumers = [user for user, _ in self.uses[temp] if user is not op]
        if len(chain.steps) > MAX_STEPS:
            return
        on_chip = all(_scope_of(s) in _ON_CHIP for s in chain.tile_sources())
        cheap = all(name in ARITHMETIC for name, *_ in chain.steps)
        if len(consumers) > 1 and not (on_chip and cheap and len(chain.steps) <= RECOMPUTE_STEPS):
            return
        later = {id(o): i for i, o in enumerate(ops) if i > position}
        for consumer in consumers:
            if id(consumer) not in later or \
                    not self.accepts(op, consumer, temp, chain, on_chip and cheap):
                return
            between = ops[position + 1:later[id(consumer)]]
            if not all(_leaves_alone(o, chain) for o in between):
                return
        self.chains[temp] = chain
        self.erased.update({id(op), id(temp.owner)})

    def is_temporary(self, op: Operation, temp: Value) -> bool:
        """Whether ``temp`` is a fragment or local without a layout of the kernel's own
        that ``op`` alone writes (and does not read), ``op`` having no forced family and no
        config."""
        alloc = temp.owner
        if not (isinstance(alloc, Operation) and alloc.name == "alloc"):
            return False
        if alloc.attrs["scope"] not in _TEMPORARY or not _compilers_layout(alloc):
            return False
        if op.attrs["dispatch"] is not None or op.attrs["config"]:
            return False
        return not any(index == 0 and user is not op or index > 0 and user is op
                       for user, index in self.uses[temp])

    def accepts(self, producer: Operation, consumer: Operation, temp: Value, chain: Chain,
                reducible: bool) -> bool:
        """Whether ``consumer`` can compute ``temp``'s elements from ``chain``
        (``reducible``: a reduce may take it: on-chip sources, ``ARITHMETIC`` only)."""
        if consumer.attrs.get("dispatch") is not None \
                or _UNCARRIED_CONFIG & consumer.attrs.get("config", {}).keys():
            return False   # a forced family; a fill the chain's sources would read, or
            #                approximate math, which the chain's steps do not carry (a
            #                team's yield, exporting the temporary, has no config)
        if consumer.attrs.get("scope") != producer.attrs["scope"] \
                or consumer.attrs.get("team") != producer.attrs["team"]:
            return False
        positions = [i for i, v in enumerate(consumer.operands) if v is temp]
        dst = consumer.operands[0]
        if 0 in positions or any(root_buffer(dst) is root_buffer(s) and dst is not s
                                 for s in chain.tile_sources()):
            return False   # it would overwrite what a later element of the chain reads
        if temp.type.layout is not None \
                and not any(_holds_like(s, temp) for s in chain.tile_sources()):
            return False   # its threads would hold no element of the consumer's domain
        same_shape = tuple(dst.type.shape) == tuple(temp.type.shape)
        if consumer.name == "tile.pointwise":
            return consumer.attrs["op"] != "iota" and same_shape
        if consumer.name == "tile.copy":
            return len(consumer.operands) == 2 and consumer.attrs["other"] is None and same_shape
        if consumer.name == "tile.reduce":
            return positions == [1] and consumer.attrs["steps"] is None and reducible \
                and any(_drives(s, temp) for s in chain.tile_sources())
        return False


def _drives(source: Value, temp: Value) -> bool:
    """Whether ``source`` can stand for ``temp`` as a reduce's src: same shape and dtype,
    and placed on threads as ``temp`` is (a per-thread reduce splits over its src's
    placement, and the threads that held ``temp``'s elements hold the chain's other
    sources; a mask laid out over threads is not read through a shared src's split)."""
    t = source.type
    buffer = t.buffer if isinstance(t, RegionType) else t
    # a temp not placed on threads (the CPU's own lowering) constrains no source
    placed_alike = buffer.layout == temp.type.layout if on_threads(temp.type.layout) else True
    return tuple(t.shape) == tuple(temp.type.shape) and buffer.dtype == temp.type.dtype \
        and placed_alike


def _holds_like(source: Value, temp: Value) -> bool:
    """Whether ``source`` places its elements on threads as ``temp`` does (a temporary laid
    out by the compiler folds only where a source keeps its placement, so that the
    consumer's threads still hold what the temporary's held)."""
    t = source.type
    return isinstance(t, BufferType) and tuple(t.shape) == tuple(temp.type.shape) \
        and t.layout == temp.type.layout


def _compilers_layout(alloc: Operation) -> bool:
    """Whether the alloc's layout, if any, is the compiler's choice (the kernel's own says
    where the data must live, so its tile is kept)."""
    return alloc.attrs["layout"] is None or alloc.attrs["layout_note"] is not None


def _leaves_alone(op: Operation, chain: Chain) -> bool:
    """Whether ``op``, run between a producer and its consumer, leaves the producer's
    sources as they were."""
    if op.name in _PURE:
        return True
    if not op.name.startswith("tile.") or op.regions or op.name.endswith("_async"):
        return False
    written = op.operands[0]
    return not any(_may_share(written, s) for s in chain.tile_sources())


def _rebuild(block: Block, plan: _Plan, values: dict) -> Block:
    new = Block.like(block)
    values.update(zip(block.args, new.args))
    for op in block.ops:
        if id(op) in plan.erased:
            continue
        name, operands, attrs = plan.current(op)
        regions = [_rebuild(r, plan, values) for r in op.regions]
        mapped = [values.get(v, v) for v in operands]
        if name == op.name:
            rebuilt = op.replace(operands=mapped, attrs=attrs, regions=regions)
        else:
            common = {k: v for k, v in op.attrs.items() if k in COMMON_ATTRS}
            rebuilt = Operation(name, mapped, {**common, **attrs}, (), regions, op.loc)
        values.update(zip(op.results, rebuilt.results))
        new.ops.append(rebuilt)
    return new
