"""The IR verifier: generic structural checks plus the per-op checks from the catalogue.

Generic checks: every operand is defined before its use and visible there (earlier in the
same block, in an enclosing block, or an argument of an enclosing region); operands,
attributes and result types fit the op's ``OpDef``; region block arguments have the types
the ``RegionSpec`` asks for; each region ends with its terminator and terminators appear
nowhere else; terminators pass the types the parent expects; values still in flight (a
wgmma's accumulators before the wait that retires it, ``ops_wgmma.in_flight``, and what a
loop, a branch or a team region carries them into: a loop's iteration arguments and
results, a region op's results) reach only the ops that may take them
(``ops_wgmma.takes_in_flight``); a tcgen05_ld's values before tcgen05_wait_ld
(``ops_tcgen05.LD_IN_FLIGHT``) reach only the wait. Then ``OpDef.check(op)``.

Failures raise ``CompilationError`` at the op's location, quoting the printed op.

The catalogue's check of operands, attributes and result types (``OpDef.validate``) reads
nothing but the op's name, region count, operand and result types and attribute values:
verifications that share an ``accepted`` memo (a pipeline's, one per compile) run it once
per combination of those very objects (a rebuilt op keeps its types and attribute values:
``Operation.replace``). A new or changed object is checked again; a value changed in place
is not, which the IR's immutable nodes rule out. Every other check runs on every op.
"""
from __future__ import annotations

from tilejit.errors import CompilationError

from .attrs import KERNEL_ATTRS, AttrError, check_attrs
from .core import Block, KernelIR, Operation, Value, walk
from .ops import OpDefError
from .ops_tcgen05 import LD_IN_FLIGHT
from .ops_wgmma import in_flight, takes_in_flight
from .printer import Printer

__all__ = ["verify"]


def _types(types) -> str:
    return "(" + ", ".join(map(str, types)) + ")"


def _yielded(region: Block) -> tuple[Value, ...]:
    last = region.ops[-1] if region.ops else None
    if last is None or not last.opdef.terminator:
        return ()
    return tuple(last.operands[last.opdef.yields_from:])


def _in_flight_values(kernel: KernelIR) -> dict[Value, str]:
    """Values the tensor cores may still write -> the op that made them in flight: the
    results of ``ops_wgmma.in_flight`` ops and, to a fixpoint, the values control flow
    passes them on to (a group a loop iteration leaves pending reaches the next one)."""
    flight = {v: op.name for op in walk(kernel.body) if in_flight(op) for v in op.results}
    if not flight:
        return flight
    edges = []   # (value, the value it becomes)
    for op in walk(kernel.body):
        yields = [_yielded(region) for region in op.regions]
        if op.name == "for":
            carried = op.regions[0].args[1:]
            edges += [*zip(op.operands[3:], carried), *zip(yields[0], carried),
                      *zip(op.operands[3:], op.results)]
        elif op.name == "while":
            before, after = op.regions
            edges += [*zip(op.operands, before.args), *zip(yields[1], before.args),
                      *zip(yields[0], after.args)]
        elif op.name == "wgmma_fence":   # hands its accumulators on as they are
            edges += zip(op.operands, op.results)
        for values in yields[:1] if op.name == "while" else yields:
            edges += zip(values, op.results)
    changed = True
    while changed:
        changed = False
        for value, becomes in edges:
            if value in flight and becomes not in flight:
                flight[becomes], changed = flight[value], True
    return flight


class _Verifier:
    def __init__(self, kernel: KernelIR, accepted: dict | None = None):
        self.kernel = kernel
        # signatures OpDef.validate accepted (see the module doc) -> the objects they name
        self.accepted = {} if accepted is None else accepted
        self.defined: set[Value] = set(kernel.params)  # every value the kernel defines
        for op in walk(kernel.body):
            self.defined.update(op.results)
            for region in op.regions:
                self.defined.update(region.args)
        self.seen: set[Value] = set()  # values whose definition the walk has passed
        self.in_flight = _in_flight_values(kernel)
        self._printer: Printer | None = None

    @property
    def printer(self) -> Printer:
        if self._printer is None:  # name every value the way the whole kernel prints
            self._printer = Printer()
            self._printer.kernel(self.kernel)
        return self._printer

    def fail(self, op: Operation, message: str):
        raise CompilationError(f"{message}\n  in: {self.printer.op_header(op)}", op.loc)

    def run(self):
        try:
            check_attrs(KERNEL_ATTRS, self.kernel.attrs, f"kernel {self.kernel.name}")
        except AttrError as err:
            raise CompilationError(str(err), self.kernel.loc) from None
        self.block(self.kernel.body, set(), None)

    def block(self, block: Block, visible: set[Value], parent: Operation | None, spec=None):
        added = [v for v in block.args if v not in visible]
        visible.update(added)
        self.seen.update(block.args)
        for index, op in enumerate(block.ops):
            if op.opdef.terminator and (parent is None or index != len(block.ops) - 1):
                self.fail(op, f"{op.name} must be the last op of a region")
            self.op(op, visible)
            visible.update(op.results)
            self.seen.update(op.results)
            added.extend(op.results)
        if parent is not None:
            self.terminator(block, parent, spec)
        visible.difference_update(added)

    def terminator(self, block: Block, parent: Operation, spec):
        last = block.ops[-1] if block.ops else None
        if last is None or last.name != spec.terminator:
            self.fail(last if last is not None and last.opdef.terminator else parent,
                      f"region '{spec.name}' of {parent.name} must end with {spec.terminator}")
        passed = tuple(v.type for v in last.operands[last.opdef.yields_from:])
        expected = tuple(spec.yield_types(parent))
        if passed != expected:
            self.fail(last, f"{last.name} passes {len(passed)} value(s) {_types(passed)} but "
                            f"{parent.name} expects {len(expected)} {_types(expected)}")

    def operand(self, op: Operation, index: int, visible: set[Value]):
        value = op.operands[index]
        if value in self.in_flight and not takes_in_flight(op, index):
            self.fail(op, f"{op.name} reads {self.printer.name(value)}, an accumulator of a "
                          f"{self.in_flight[value]} still in flight: read it after a "
                          "wgmma_wait_group that keeps no group pending")
        producer = getattr(value.owner, "name", None)
        if producer in LD_IN_FLIGHT and op.name not in LD_IN_FLIGHT[producer]:
            self.fail(op, f"{op.name} reads {self.printer.name(value)}, a value of a "
                          f"{producer} still in flight: read it after tcgen05_wait_ld")
        if value in visible:
            return
        if value in self.seen:
            why = "is defined in a region that does not enclose this use"
        elif value in self.defined:
            why = "is used before its definition"
        else:
            why = "is not defined in this kernel"
        self.fail(op, f"operand {self.printer.name(value)} of {op.name} {why}")

    def op(self, op: Operation, visible: set[Value]):
        for index in range(len(op.operands)):
            self.operand(op, index, visible)
        types, results = [v.type for v in op.operands], op.result_types
        signature = (op.name, len(op.regions), *map(id, types), *map(id, results),
                     *(id(v) for v in op.attrs.values()))
        if signature not in self.accepted:
            try:
                op.opdef.validate(types, op.attrs, results, len(op.regions))
            except OpDefError as err:
                self.fail(op, str(err))
            # holding the objects keeps their ids from being reused while the memo lives
            self.accepted[signature] = (types, results, tuple(op.attrs.values()))
        if op.opdef.check is not None:
            reason = op.opdef.check(op)
            if reason:
                self.fail(op, reason)
        for spec, region in zip(op.opdef.regions, op.regions):
            arg_types = tuple(v.type for v in region.args)
            expected = tuple(spec.arg_types(op))
            if arg_types != expected:
                self.fail(op, f"region '{spec.name}' of {op.name} takes {_types(expected)}, "
                              f"its block has arguments {_types(arg_types)}")
            self.block(region, visible, op, spec)


def verify(kernel: KernelIR, accepted: dict | None = None) -> KernelIR:
    """Check ``kernel``; raise a located ``CompilationError`` on the first problem.
    ``accepted``: a memo shared by the verifications of one pipeline (module doc).

    Returns the kernel so that it can be used inline (``verify(run_pass(k))``).
    """
    _Verifier(kernel, accepted).run()
    return kernel
