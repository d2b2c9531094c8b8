"""Loop generation: the native loops around a chosen instruction (docs/lowering.md).

Rules never write index arithmetic. They describe the iteration space -- a :class:`Box`
of logical indices whose step on each dim is the extent the instruction covers -- and hand
the :class:`Emitter` a body that receives logical indices; the emitter

* emits the loops over the residual extents through the call's distribution
  (``distribution.py``: ``team_once`` visits every instance in nested loops, inside the
  ``single`` that ``lower-tiles`` wraps around the rule; ``per_thread`` gives each thread
  its share),
* expands the instruction itself as constant-trip ``unroll`` loops (:meth:`Emitter.unrolled`),
* folds index arithmetic on known constants (``0 + i``, ``i * 1``, one-trip loops vanish),
* hoists constants and loop-invariant terms (thread coordinates, valid extents, views)
  into a prologue at the start of the primitive's code,
* fuses the dims of whole buffers into one loop by viewing them flat (:meth:`fusable`),
* masks tiles that may run past the end of a global buffer (:meth:`pieces`; one that starts
  before the buffer is wholly out of bounds): the valid
  extent of each dim is ``clamp(dim - start, 0, size)``; a full-tile box runs with no
  predicate at all, and remainder boxes load a copy's ``other`` (else ``config["fill"]``,
  default 0) for out-of-bounds sources; stores to out-of-bounds places are skipped.

Loads and stores take logical indices of buffers or regions; the target maps them to
addresses through layouts and strides.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ..ir.builder import Builder
from ..ir.core import Block, Value
from ..ir.types import BufferType, MemScope, i1, i32, i64
from .dispatch.call import Operand, PrimitiveCall

__all__ = ["IDX", "Box", "Emitter", "Index", "broadcast_index"]

IDX = i32  # the type of loop variables and logical indices
Index = int | Value  # a logical index: folded to an int when it is known


@dataclass(frozen=True)
class Box:
    """Logical indices ``[lo[d], hi[d])`` on each dim, visited in steps of ``step[d]``
    (the instruction's extent there; ``hi - lo`` is a multiple of it)."""

    lo: tuple
    hi: tuple
    step: tuple
    unroll: int | None = None  # how many instances a loop over them unrolls (None: any)

    @classmethod
    def full(cls, shape) -> Box:
        return cls((0,) * len(shape), tuple(shape), (1,) * len(shape))

    def is_empty(self) -> bool:
        return any(isinstance(lo, int) and isinstance(hi, int) and lo >= hi
                   for lo, hi in zip(self.lo, self.hi))


def broadcast_index(operand: Operand, idx: Sequence[Index]) -> list[Index]:
    """The operand's indices for domain indices ``idx``: dims align on the right and a
    size-1 dim broadcasts (numpy rules)."""
    rank = len(operand.shape)
    tail = list(idx)[len(idx) - rank:] if rank else []
    return [0 if n == 1 else i for n, i in zip(operand.shape, tail)]


class Emitter:
    """Builds one primitive's native code at the builder's insertion point."""

    def __init__(self, call: PrimitiveCall, builder: Builder, distribution=None):
        self.call = call
        self.b = builder
        self.dist = distribution
        self._block = builder.block
        self._mark = len(self._block.ops)
        self._prologue = Block()
        self._cache: dict = {}
        self._views: dict[str, Value] = {}

    # ----------------------------------------------------------------- prologue
    @contextmanager
    def hoisted(self):
        """Emit into the prologue (before any loop of this primitive)."""
        with self.b.insert_into(self._prologue):
            yield

    def once(self, key, make: Callable[[], Value]) -> Value:
        """``make()`` emitted once in the prologue, cached under ``key``."""
        if key not in self._cache:
            with self.hoisted():
                self._cache[key] = make()
        return self._cache[key]

    def finish(self) -> None:
        """Place the prologue before the primitive's loops."""
        self._block.ops[self._mark:self._mark] = self._prologue.ops
        self._prologue = Block()

    def const(self, value, type=IDX) -> Value:
        return self.once(("const", value, type), lambda: self.b.const(value, type))

    # ----------------------------------------------------------------- index math
    def index(self, x: Index) -> Value:
        return self.const(x) if isinstance(x, int) else x

    def _binary(self, op: str, x: Index, y: Index) -> Value:
        return self.b.binary(op, self.index(x), self.index(y))

    def add(self, x: Index, y: Index) -> Index:
        if isinstance(x, int) and isinstance(y, int):
            return x + y
        if isinstance(x, int) and x == 0:
            return y
        if isinstance(y, int) and y == 0:
            return x
        return self._binary("add", x, y)

    def sub(self, x: Index, y: Index) -> Index:
        if isinstance(x, int) and isinstance(y, int):
            return x - y
        return x if isinstance(y, int) and y == 0 else self._binary("sub", x, y)

    def mul(self, x: Index, k: Index) -> Index:
        if isinstance(x, int) and isinstance(k, int):
            return x * k
        if isinstance(x, int) and x in (0, 1):
            return 0 if x == 0 else k
        if isinstance(k, int) and k in (0, 1):
            return 0 if k == 0 else x
        return self._binary("mul", x, k)

    def floordiv(self, x: Index, k: Index) -> Index:
        if isinstance(x, int) and (isinstance(k, int) or x == 0):
            return x // k if x else 0
        return x if isinstance(k, int) and k == 1 else self._binary("floordiv", x, k)

    def mod(self, x: Index, k: Index) -> Index:
        if isinstance(x, int) and (isinstance(k, int) or x == 0):
            return x % k if x else 0
        return 0 if isinstance(k, int) and k == 1 else self._binary("mod", x, k)

    def all_of(self, conds: Sequence[Value]) -> Value | None:
        result = None
        for cond in conds:
            result = cond if result is None else self.b.binary("and", result, cond)
        return result

    # ----------------------------------------------------------------- loops
    def loop(self, lo: Index, hi: Index, step: int, body: Callable, inits: Sequence[Value] = (),
             unroll: int | None = None, independent: bool = False) -> tuple:
        """``for iv in range(lo, hi, step)`` carrying ``inits``; ``body(iv, *carried)``
        returns the next carried values. Empty and one-trip loops are folded away.
        ``independent``: the caller promises that no iteration touches what another writes."""
        if isinstance(lo, int) and isinstance(hi, int):
            if lo >= hi:
                return tuple(inits)
            if hi - lo <= step:
                return tuple(body(lo, *inits) or ())
        op, block = self.b.for_(self.index(lo), self.index(hi), self.const(step), inits,
                                unroll=unroll, independent=independent)
        with self.b.insert_into(block):
            self.b.yield_(list(body(*block.args) or ()))
        return op.results

    def nest(self, items: Sequence[tuple[Box, Callable]]) -> None:
        """Nested loops over every instance of each ``(box, body)``, for units that visit
        them all. Consecutive boxes with the same range on their outer dims share those
        loops (loop fusion): e.g. a row's full chunks, its tail and its masked remainder."""
        items = [(box, body) for box, body in items if not box.is_empty()]

        def same(x, y) -> bool:
            return x == y if isinstance(x, int) and isinstance(y, int) else x is y

        def level(dim: int, group, idx: list):
            if dim == len(group[0][0].lo):
                for _, body in group:
                    body(idx)
                return
            runs: list[list] = []
            for box, body in group:
                key = (box.lo[dim], box.hi[dim], box.step[dim])
                if runs and all(same(a, b) for a, b in zip(runs[-1][0], key)):
                    runs[-1][1].append((box, body))
                else:
                    runs.append([key, [(box, body)]])
            for (lo, hi, step), run in runs:
                self.loop(lo, hi, step, lambda iv, run=run: level(dim + 1, run, idx + [iv]))
        if items:
            level(0, items, [])

    def each(self, items: Sequence[tuple[Box, Callable]]) -> None:
        """Every instance of each ``(box, body)`` visited by the units the distribution
        assigns it to; ``body`` gets the instance's base indices."""
        items = [(box, body) for box, body in items if not box.is_empty()]
        if items:
            self.dist.emit(self, items)

    def unrolled(self, base: Sequence[Index], shape: Sequence[int],
                 body: Callable[[list], None]) -> None:
        """The instruction: the ``shape`` box at ``base`` as fully unrolled loops."""
        def level(dim: int, idx: list):
            if dim == len(base):
                body(idx)
                return
            n = shape[dim]
            self.loop(0, n, 1, lambda w: level(dim + 1, idx + [self.add(base[dim], w)]),
                      unroll=n if n > 1 else None)
        level(0, [])

    def cells(self, base: Sequence[Index], shape: Sequence[int]) -> list[list[Index]]:
        """The indices of every element of the ``shape`` box at ``base``, row-major, for
        an instruction that keeps each element in its own register."""
        per_dim = [[self.add(b, k) for k in range(n)] for b, n in zip(base, shape)]
        return [list(idx) for idx in itertools.product(*per_dim)]

    # ----------------------------------------------------------------- fusion
    @staticmethod
    def fusable(call: PrimitiveCall, domain: Sequence[int]) -> bool:
        """Whether the dims of ``domain`` can run as one loop: every tile operand is a whole
        on-chip buffer of the domain's shape, so a flat view keeps every element in place
        (a layout maps the row-major flat index, whatever the shape)."""
        return len(domain) > 1 and all(
            isinstance(o.value.type, BufferType) and o.role is not MemScope.GLOBAL
            and tuple(o.shape) == tuple(domain) for o in call.tiles)

    def fuse(self, operands: Sequence[Operand]) -> int:
        """View ``operands`` flat (hoisted); returns the fused extent."""
        size = math.prod(operands[0].shape)
        for o in operands:
            self._views[o.name] = self.once(
                ("view", o.name), lambda o=o: self.b.view(o.value, (size,), o.layout))
        return size

    def storage(self, operand: Operand) -> Value:
        return self._views.get(operand.name, operand.value)

    def operand_index(self, operand: Operand, idx: Sequence[Index]) -> list[Index]:
        if operand.name in self._views:
            return list(idx)[-1:]
        return broadcast_index(operand, idx)

    # ----------------------------------------------------------------- bounds
    def limits(self, operand: Operand) -> tuple[Index, ...]:
        """The valid extent of each logical dim of ``operand`` (its size unless it may run
        past the end of its global buffer); computed once, in the prologue."""
        if not operand.may_oob:
            return tuple(operand.shape)
        return self._cache.get(("limits", operand.name)) or self._compute_limits(operand)

    def _compute_limits(self, operand: Operand) -> tuple[Index, ...]:
        region = operand.value.owner
        buf, starts = region.operands[0], region.operands[1:]
        sizes, keep = region.attrs["sizes"], region.attrs["keep"]
        limits, present = [], None
        with self.hoisted():
            for d, (start, size, kept) in enumerate(zip(starts, sizes, keep)):
                if d not in operand.oob_dims:
                    if kept:
                        limits.append(size)
                    continue
                if start.type != i64:
                    start = self.once(("i64", start), lambda s=start: self.b.cast(s, i64))
                zero, top = self.const(0, i64), self.const(size, i64)
                valid = self.b.binary("sub", self.b.buffer_dim(buf, d), start)
                valid = self.b.binary("min", self.b.binary("max", valid, zero), top)
                # Only the end is masked element by element: a tile that starts before the
                # buffer is wholly out of bounds (loads fill, stores skip), never an access
                # before the buffer's first element.
                valid = self.b.select(self.b.cmp("lt", start, zero), zero, valid)
                if kept:
                    limits.append(self.b.cast(valid, IDX))
                else:  # an integer-indexed dim: the whole tile exists or it does not
                    ok = self.b.cmp("gt", valid, zero)
                    present = ok if present is None else self.b.binary("and", present, ok)
            if present is not None:
                limits = [self.b.select(present, self.index(n), self.const(0)) for n in limits]
        self._cache[("limits", operand.name)] = tuple(limits)
        return tuple(limits)

    def in_bounds(self, operand: Operand, op_idx: Sequence[Index]) -> Value | None:
        """``i < limit`` on every dim whose limit is known only at run time (None: always)."""
        return self.all_of([self.b.cmp("lt", self.index(i), limit)
                            for i, limit in zip(op_idx, self.limits(operand))
                            if isinstance(limit, Value)])

    def domain_limit(self, operands: Sequence[Operand], domain: Sequence[int]):
        """(per domain dim, the extent where every one of ``operands`` is in bounds; per
        dim, the names of the operands whose run-time extent bounds it)."""
        limits: list[Index] = list(domain)
        bounded_by: list[set[str]] = [set() for _ in domain]
        for o in operands:
            if not o.may_oob:
                continue
            offset = len(domain) - len(o.shape)
            for d, (n, limit) in enumerate(zip(o.shape, self.limits(o))):
                if not isinstance(limit, Value):
                    continue
                dim = offset + d
                if n == 1 and domain[dim] != 1:  # broadcast: all or nothing
                    limit = self.once(("bcast", o.name, d), lambda lim=limit, e=domain[dim]:
                                      self.b.select(self.b.cmp("gt", lim, self.const(0)),
                                                    self.const(e), self.const(0)))
                current = limits[dim]
                limits[dim] = limit if isinstance(current, int) else self.once(
                    ("min", current, limit), lambda c=current, lim=limit: self.b.binary("min", c, lim))
                bounded_by[dim].add(o.name)
        return limits, bounded_by

    def pieces(self, dst: Operand, srcs: Sequence[Operand], domain: Sequence[int],
               inst: Sequence[int]) -> list[tuple[Box, bool, frozenset]]:
        """The boxes of an elementwise domain: ``(box, checked, outside)``.

        The full box (every operand in bounds) runs in steps of ``inst`` with no
        predicate; when its last extent is not a multiple of the instruction's, a tail box
        finishes the last dim: as one shorter chunk when the extent is static, else one
        element at a time. When a source may run out of bounds, remainder
        boxes (inside the destination's valid box, outside the full box) access it with
        checks (``checked``), except the sources known to be out of bounds there
        (``outside``: the only run-time bound of that dim), which read the fill value.
        A distribution that ``checks_chunks`` gets one box of checked elements instead.
        """
        if not self.dist.splits_boxes:  # the layout decides who visits what: one box
            any_oob = dst.may_oob or any(s.may_oob for s in srcs)
            return [(Box.full(domain), any_oob, frozenset())]
        if self.dist.checks_chunks and (dst.may_oob or any(s.may_oob for s in srcs)) \
                and all(isinstance(n, int) for n in domain) and domain[-1] % inst[-1] == 0:
            # One static box, each element checked: a GPU thread's chunk of a tile at a
            # tensor's ragged edge costs a compare or two, where full and remainder boxes
            # cost run-time trip counts and a division per element (about half of NVRTC's
            # time for the example GEMM, BENCHMARKS.md). Its loop stays rolled, as the
            # full box's run-time one was: unrolled, the f32 GEMM spilled on sm_80.
            return [(Box((0,) * len(domain), tuple(domain), tuple(inst), unroll=1), True,
                     frozenset())]
        store, _ = self.domain_limit([dst], domain)
        full, bounded_by = self.domain_limit([dst, *srcs], domain)
        width, rank = inst[-1], len(domain)
        static = isinstance(full[-1], int)
        aligned = full[-1] - full[-1] % width if static else self.once(
            ("aligned", full[-1], width),
            lambda: self.index(self.sub(full[-1], self.mod(full[-1], width))))
        pieces = [(Box((0,) * rank, tuple(full[:-1]) + (aligned,), tuple(inst)), False,
                   frozenset())]
        if width > 1 and not (static and aligned == full[-1]):
            tail = full[-1] - aligned if static else 1  # one shorter chunk, if static
            lo = (0,) * (rank - 1) + (aligned,)
            pieces.append((Box(lo, tuple(full), (1,) * (rank - 1) + (tail,)), False,
                           frozenset()))
        if any(s.may_oob for s in srcs):
            for d in reversed(range(rank)):  # innermost first: shares the outer loops
                lo = tuple(full[d] if j == d else 0 for j in range(rank))
                hi = tuple(full[j] if j < d else store[j] for j in range(rank))
                srcs_bounding = bounded_by[d] - {dst.name}
                outside = srcs_bounding if len(srcs_bounding) == 1 else frozenset()
                pieces.append((Box(lo, hi, (1,) * rank), True, frozenset(outside)))
        return [piece for piece in pieces if not piece[0].is_empty()]

    # ----------------------------------------------------------------- element access
    def fill_value(self, operand: Operand) -> Value:
        """What an element of ``operand`` past the end of its tensor reads as: False for a
        copy's mask (masked off), else :meth:`other`."""
        return self.const(False, i1) if operand.name == "mask" else self.other(operand.dtype)

    def other(self, dtype) -> Value:
        """A copy's ``other`` (what masked-off elements read as), else ``config["fill"]``,
        else 0, as a ``dtype`` constant."""
        other = self.call.attrs.get("other")
        fill = self.call.config.get("fill", 0) if other is None else other
        value = bool(fill) if dtype == i1 else float(fill) if dtype.is_float else int(fill)
        return self.const(value, dtype)

    def load(self, operand: Operand, idx: Sequence[Index], checked: bool = False,
             fill: Value | None = None) -> Value:
        """The element of ``operand`` at domain indices ``idx``; a scalar operand is its own
        value. ``checked``: out-of-bounds elements read as ``fill`` (default: the fill value
        of ``config``)."""
        if operand.is_scalar:
            return operand.value
        op_idx = self.operand_index(operand, idx)
        ok = self.in_bounds(operand, op_idx) if checked else None
        if ok is None:
            return self.b.load(self.storage(operand), [self.index(i) for i in op_idx])
        op, then, orelse = self.b.if_(ok, [operand.dtype])
        with self.b.insert_into(then):
            self.b.yield_([self.b.load(self.storage(operand), [self.index(i) for i in op_idx])])
        with self.b.insert_into(orelse):
            self.b.yield_([self.fill_value(operand) if fill is None else fill])
        return op.result

    def store(self, operand: Operand, value: Value, idx: Sequence[Index],
              checked: bool = False) -> None:
        """Store ``value`` (converted to the operand's dtype); ``checked``: skip it where
        the operand is out of bounds."""
        if value.type != operand.dtype:
            value = self.b.cast(value, operand.dtype)
        op_idx = self.operand_index(operand, idx)
        ok = self.in_bounds(operand, op_idx) if checked else None
        if ok is None:
            self.b.store(self.storage(operand), value, [self.index(i) for i in op_idx])
            return
        _, then, orelse = self.b.if_(ok)
        with self.b.insert_into(then):
            self.b.store(self.storage(operand), value, [self.index(i) for i in op_idx])
            self.b.yield_()
        with self.b.insert_into(orelse):
            self.b.yield_()

    # ----------------------------------------------------------------- threads
    def thread_coord(self, kind: str) -> Value:
        """``thread_index {kind}`` (hoisted)."""
        return self.once(("thread", kind), lambda: self.b.thread_index(kind))
