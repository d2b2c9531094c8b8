"""Pattern rewriting: a pass is a list of ``(match, fn)`` patterns run by one ``Rewriter``.

``match`` is an op name or a predicate ``op -> bool``; ``fn(op, ctx)`` returns None when
it does not apply, or the replacement:

* a ``Value`` or a sequence of Values: they replace the op's results (ops that ``fn``
  created with ``ctx.builder`` are already in place);
* an ``Operation`` or a sequence of them: appended unless ``fn`` built them with
  ``ctx.builder``; the last one's results replace the op's results;
* ``()``: the op is erased (its results must be unused).

The driver rebuilds every block functionally: it maps old values to new ones, rebuilds an
op's regions first (so patterns see rewritten bodies and new operands), then offers the
rebuilt op to the patterns in order; the first non-None answer wins. Sweeps repeat until
nothing changes. ``Rewriter.counts`` says how often each pattern fired and
``Rewriter.report()`` where each was defined.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import CompilationError, TilejitError, reraise_located
from .builder import Builder
from .core import Block, KernelIR, Operation, Value

__all__ = ["Pattern", "RewriteContext", "Rewriter", "RewriteError", "clone_ops",
           "retyped_from_yield", "rewrite"]


class RewriteError(RuntimeError):
    """A pattern broke the rewrite contract (a compiler bug, not a user error)."""


@dataclass(frozen=True)
class Pattern:
    match: object  # op name or predicate
    fn: Callable
    name: str
    where: str  # "file:line" of ``fn``

    @classmethod
    def of(cls, spec) -> "Pattern":
        """A Pattern from a Pattern, ``(match, fn)`` or ``(match, fn, name)``."""
        if isinstance(spec, Pattern):
            return spec
        match, fn, *name = spec
        code = getattr(fn, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else "<unknown>"
        return cls(match, fn, name[0] if name else getattr(fn, "__name__", repr(fn)), where)

    def matches(self, op: Operation) -> bool:
        return op.name == self.match if isinstance(self.match, str) else bool(self.match(op))


class RewriteContext:
    """What a pattern function may use besides the op.

    ``builder`` appends to the block being rebuilt, at the op's location; ``kernel`` is
    the kernel being rewritten; ``parents`` are the enclosing ops (innermost last);
    ``lookup(v)`` maps a value of the input IR to its rebuilt counterpart.
    """

    def __init__(self, builder: Builder, kernel: KernelIR, parents: tuple, value_map: dict):
        self.builder = builder
        self.kernel = kernel
        self.parents = parents
        self._value_map = value_map

    @property
    def parent(self) -> Operation | None:
        return self.parents[-1] if self.parents else None

    def lookup(self, value: Value) -> Value:
        return self._value_map.get(value, value)


def _as_results(answer, emitted: list[Operation], block: Block) -> tuple[Value, ...]:
    """Normalize a pattern's answer to result values, appending returned ops not yet placed."""
    if isinstance(answer, (Value, Operation)):
        answer = (answer,)
    answer = tuple(answer)
    if all(isinstance(a, Value) for a in answer):
        return answer
    if not all(isinstance(a, Operation) for a in answer):
        raise RewriteError(f"a pattern returned a mix of values and ops: {answer!r}")
    placed = {id(op) for op in emitted}
    block.ops.extend(op for op in answer if id(op) not in placed)
    return answer[-1].results


class Rewriter:
    def __init__(self, patterns: Sequence, name: str = "rewrite"):
        self.name = name
        self.patterns = [Pattern.of(p) for p in patterns]
        self.counts: Counter[Pattern] = Counter()
        self._kernel: KernelIR | None = None  # the kernel of the sweep in progress

    def run(self, kernel: KernelIR, max_sweeps: int = 64) -> KernelIR:
        """Sweep until no pattern applies (at most ``max_sweeps`` times)."""
        for _ in range(max_sweeps):
            before = sum(self.counts.values())
            kernel = self.sweep(kernel)
            if sum(self.counts.values()) == before:
                return kernel
        raise RewriteError(f"{self.name}: still rewriting after {max_sweeps} sweeps\n{self.report()}")

    def sweep(self, kernel: KernelIR) -> KernelIR:
        """One pass over the kernel: every op is offered to the patterns once."""
        self._kernel = kernel
        return kernel.replace(body=self._block(kernel.body, {}, ()))

    def _block(self, block: Block, value_map: dict, parents: tuple) -> Block:
        new = Block.like(block)
        value_map.update(zip(block.args, new.args))
        builder = Builder()
        with builder.insert_into(new):
            for op in block.ops:
                rebuilt = op.replace(
                    operands=[self._mapped(v, value_map, op) for v in op.operands],
                    regions=[self._block(r, value_map, parents + (op,)) for r in op.regions])
                builder.loc = op.loc
                ctx = RewriteContext(builder, self._kernel, parents, value_map)
                results = self._apply(rebuilt, ctx, new)
                if not results:
                    continue  # erased: a later use of its results fails in _mapped
                if len(results) != len(op.results):
                    raise RewriteError(f"{op.name} at {op.loc}: replaced {len(op.results)} "
                                       f"result(s) with {len(results)}")
                value_map.update(zip(op.results, results))
        return new

    def _apply(self, op: Operation, ctx: RewriteContext, block: Block) -> tuple[Value, ...]:
        for pattern in self.patterns:
            if not pattern.matches(op):
                continue
            mark = len(block.ops)
            try:
                answer = pattern.fn(op, ctx)
            except TilejitError as err:
                reraise_located(err, op.loc)
            except Exception as err:  # a compiler bug: report it at the user's line, not as-is
                raise CompilationError(f"internal compiler error in pattern {pattern.name} "
                                       f"({pattern.where}): {type(err).__name__}: {err}",
                                       op.loc) from None
            if answer is None:
                del block.ops[mark:]  # drop anything a declining pattern started to build
                continue
            self.counts[pattern] += 1
            try:
                return _as_results(answer, block.ops[mark:], block)
            except RewriteError as err:
                raise RewriteError(f"pattern {pattern.name} ({pattern.where}): {err}") from None
        block.ops.append(op)
        return op.results

    @staticmethod
    def _mapped(value: Value, value_map: dict, op: Operation) -> Value:
        if value not in value_map:
            raise RewriteError(f"{op.name} at {op.loc} uses a value that was erased or never "
                               f"defined: {value!r}")
        return value_map[value]

    def report(self) -> str:
        """One line per pattern: name, where it is defined, how often it fired."""
        return "\n".join(f"{self.name}: {p.name} ({p.where}): {self.counts[p]}"
                         for p in self.patterns)


def rewrite(kernel: KernelIR, patterns: Sequence, name: str = "rewrite") -> KernelIR:
    """Run ``patterns`` to a fixpoint over ``kernel``; returns the new kernel."""
    return Rewriter(patterns, name).run(kernel)


def retyped_from_yield(op: Operation, ctx: RewriteContext):
    """A pattern for ops whose results are what their body yields (``team``, ``if``): the
    op again with its result types taken from the yield, once a rewrite changed the type
    of a yielded buffer (its scope or layout); None when they already agree."""
    types = tuple(v.type for v in op.regions[0].ops[-1].operands)
    return None if types == op.result_types else op.replace(result_types=types)


def clone_ops(ops: Sequence[Operation], values: dict,
              fold: Callable | None = None) -> list[Operation]:
    """Fresh copies of ``ops`` (nested regions included) with ``values`` substituted;
    ``values`` gains each old result's and block argument's new counterpart. ``fold(op,
    operands)`` may answer an op to put in the place of ``op`` with the substituted
    ``operands`` (a constant it computed), or None to copy ``op``."""
    cloned = []
    for op in ops:
        operands = [values.get(v, v) for v in op.operands]
        new = fold(op, operands) if fold is not None else None
        if new is None:
            regions = []
            for region in op.regions:
                fresh = Block.like(region)
                values.update(zip(region.args, fresh.args))
                fresh.ops = clone_ops(region.ops, values, fold)
                regions.append(fresh)
            new = op.replace(operands=operands, regions=regions)
        values.update(zip(op.results, new.results))
        cloned.append(new)
    return cloned
