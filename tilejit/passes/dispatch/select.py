"""Rule selection and the ``dispatch`` pass.

Selection is local and deterministic (TIRx §5.4): the call's rules are tried in registry
order (specialized rules by priority, then fallbacks); with ``dispatch=`` only that family
is tried. The first legal rule wins and takes ``config["shape"]`` when that is one of its
legal shapes, else its largest. Every rule passed over is logged with its reason; when
nothing is legal a :class:`DispatchError` shows the call's source line and a table of
every rule tried.

The pass annotates each tile op with ``rule`` and ``inst_shape`` and appends one
:class:`DispatchRecord` per call to ``log``; :func:`dispatch_log` recomputes the same
records from any kernel that still has its tile ops (selection is deterministic), which is
how ``CompiledKernel.dispatch_log`` can be filled from the IR after this pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DispatchError
from ...ir.core import KernelIR, Operation
from ...ir.opdef import OpGroup
from ...ir.rewrite import Rewriter
from .call import PrimitiveCall, RebuiltWriters, argument_flags, fragment_writers
from .registry import DispatchContext, Plan, Rule, context_for, rules_for

__all__ = ["DispatchRecord", "Selection", "dispatch_log", "format_log", "run", "select"]


@dataclass(frozen=True)
class DispatchRecord:
    """One dispatch decision (SPEC §5 ``CompiledKernel.dispatch_log``)."""

    primitive: str
    rule: str
    shape: tuple[int, ...]
    scope: str
    fallback: bool
    rejected: tuple[tuple[str, str], ...]  # (rule, reason) for every rule passed over
    line: int | None
    # how the team's threads share the instances: "uniform" (team_once, or one thread),
    # "cyclic over T threads", "owned by the threads of X's layout" (per_thread)
    distribution: str = "uniform"
    # what else the rule chose, in words, from its plan's "note" (the mma family's operand
    # loads: "A by ldmatrix.x4; B by elements (why)"; the nki gemm's operand roles and
    # outer loops): what the target code must then hold
    note: str = ""

    def __str__(self) -> str:
        text = f"line {self.line}: {self.primitive} -> {self.rule} {list(self.shape)}"
        if self.fallback:
            text += " (fallback)"
        if self.distribution != "uniform":
            text += f", {self.distribution}"
        if self.note:
            text += f" ({self.note})"
        return text + "".join(f"\n    {rule} declined: {why}" for rule, why in self.rejected)


@dataclass(frozen=True)
class Selection:
    rule: Rule
    plan: Plan
    record: DispatchRecord


def _shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _fit_config(call: PrimitiveCall, plan: Plan) -> Plan | str:
    """``plan`` narrowed to ``config["shape"]``, or why that shape is not legal."""
    wanted = call.config.get("shape")
    if wanted is None:
        return plan.choose(plan.shape)
    wanted = tuple(wanted)
    if wanted in plan.shapes:
        return plan.choose(wanted)
    legal = ", ".join(_shape_text(s) for s in plan.shapes)
    return f"config shape {_shape_text(wanted)} is not legal here; legal shapes: {legal}"


def select(call: PrimitiveCall) -> Selection:
    """The rule and plan for ``call``; raises DispatchError when no rule is legal."""
    rules = rules_for(call.primitive, call.target)
    if call.dispatch is not None:
        forced = [r for r in rules if r.family == call.dispatch]
        if not forced:
            known = ", ".join(dict.fromkeys(r.family for r in rules)) or "none"
            raise DispatchError(f"dispatch={call.dispatch!r}: no such family for "
                                f"{call.primitive} on target {call.target!r} (registered: "
                                f"{known})", call.loc)
        rules = forced
    rejected: list[tuple[str, str]] = []
    mode = call.context.distribution
    for rule in rules:
        if mode not in rule.distributions:   # said only when forced: no noise in the log
            if call.dispatch is not None:
                rejected.append((rule.family, f"it runs only {' or '.join(rule.distributions)}"
                                              f"; this lowering is {mode}"))
            continue
        verdict = rule.check(call)
        if isinstance(verdict, Plan):
            verdict = _fit_config(call, verdict)
        if isinstance(verdict, Plan):
            record = DispatchRecord(call.primitive, rule.family, verdict.shape,
                                    str(call.scope), rule.fallback, tuple(rejected),
                                    call.loc.line if call.loc else None,
                                    str(verdict.details.get("distribution") or "uniform"),
                                    str(verdict.details.get("note", "")))
            return Selection(rule, verdict, record)
        rejected.append((rule.family, str(verdict)))
    raise DispatchError(_failure_message(call, rejected), call.loc)


def _failure_message(call: PrimitiveCall, rejected) -> str:
    head = f"no rule can implement {call.describe()}"
    if not rejected:
        return f"{head}: no rule is registered for {call.primitive} on this target"
    return head + "\n" + _table(("rule", "reason"), rejected)


def _table(header, rows) -> str:
    rows = [tuple(map(str, header))] + [tuple(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]

    def line(cells):
        return "  " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    rule = "  " + "-+-".join("-" * w for w in widths)
    return "\n".join([line(rows[0]), rule] + [line(r) for r in rows[1:]])


def format_log(records) -> str:
    """The dispatch log as a table (what ``TILEJIT_DUMP=dispatch`` prints)."""
    rows = [(r.line if r.line is not None else "?", r.primitive, r.rule, _shape_text(r.shape),
             "yes" if r.fallback else "no",
             "; ".join(f"{rule}: {why}" for rule, why in r.rejected) or "-")
            for r in records]
    return _table(("line", "primitive", "rule", "shape", "fallback", "rejected"), rows)


# --------------------------------------------------------------------------- the pass
def _is_undispatched(op: Operation) -> bool:
    return op.opdef.group is OpGroup.TILE and op.attrs.get("rule") is None


def _tile_ops(kernel: KernelIR):
    return [op for op in kernel.walk() if op.opdef.group is OpGroup.TILE]


def dispatch_log(kernel: KernelIR, context: DispatchContext | None = None) -> list[DispatchRecord]:
    """The records the dispatch pass makes for ``kernel``'s tile ops, in program order."""
    context = context or context_for(kernel)
    flags, writers = argument_flags(kernel), fragment_writers(kernel)
    return [select(PrimitiveCall.of(op, context, flags, writers)).record
            for op in _tile_ops(kernel)]


def run(kernel: KernelIR, context: DispatchContext | None = None,
        log: list | None = None) -> KernelIR:
    """Annotate every tile op with its ``rule`` and ``inst_shape``; append the records to
    ``log``. ``TILEJIT_DUMP=dispatch`` prints them once, from the runtime, which also has
    them on a cache hit (``CompiledKernel.dump``)."""
    context = context or context_for(kernel)
    records: list[DispatchRecord] = []
    writers = fragment_writers(kernel)

    def annotate(op: Operation, ctx):
        chosen = select(PrimitiveCall.of(op, context, argument_flags(kernel, ctx.lookup),
                                         RebuiltWriters(writers, ctx.lookup)))
        records.append(chosen.record)
        return op.replace(attrs={"rule": chosen.rule.family, "inst_shape": chosen.plan.shape})

    kernel = Rewriter([(_is_undispatched, annotate, "dispatch")], "dispatch").run(kernel)
    if log is not None:
        log.extend(records)
    return kernel
