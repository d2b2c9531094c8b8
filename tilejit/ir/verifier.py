"""The IR verifier: generic structural checks plus the per-op checks from the catalogue.

Generic checks: every operand is defined before its use and visible there (earlier in the
same block, in an enclosing block, or an argument of an enclosing region); operands,
attributes and result types fit the op's ``OpDef``; region block arguments have the types
the ``RegionSpec`` asks for; each region ends with its terminator and terminators appear
nowhere else; terminators pass the types the parent expects; values still in flight (a
wgmma's accumulators before its wait, ``ops_wgmma.IN_FLIGHT``; a tcgen05_ld's values before
tcgen05_wait_ld, ``ops_tcgen05.LD_IN_FLIGHT``) reach only the ops that may take them.
Then ``OpDef.check(op)``.

Failures raise ``CompilationError`` at the op's location, quoting the printed op.
"""
from __future__ import annotations

from tilejit.errors import CompilationError

from .attrs import KERNEL_ATTRS, AttrError, check_attrs
from .core import Block, KernelIR, Operation, Value, walk
from .ops import OpDefError
from .ops_tcgen05 import LD_IN_FLIGHT
from .ops_wgmma import IN_FLIGHT, IN_FLIGHT_READERS
from .printer import Printer

__all__ = ["verify"]


def _types(types) -> str:
    return "(" + ", ".join(map(str, types)) + ")"


class _Verifier:
    def __init__(self, kernel: KernelIR):
        self.kernel = kernel
        self.defined: set[Value] = set(kernel.params)  # every value the kernel defines
        for op in walk(kernel.body):
            self.defined.update(op.results)
            for region in op.regions:
                self.defined.update(region.args)
        self.seen: set[Value] = set()  # values whose definition the walk has passed
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

    def operand(self, op: Operation, value: Value, visible: set[Value]):
        producer = getattr(value.owner, "name", None)
        if producer in IN_FLIGHT and op.name not in IN_FLIGHT_READERS \
                and not op.opdef.terminator:
            self.fail(op, f"{op.name} reads {self.printer.name(value)}, an accumulator of a "
                          f"{producer} still in flight: read it after wgmma_wait_group")
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
        for value in op.operands:
            self.operand(op, value, visible)
        try:
            op.opdef.validate([v.type for v in op.operands], op.attrs, op.result_types,
                              len(op.regions))
        except OpDefError as err:
            self.fail(op, str(err))
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


def verify(kernel: KernelIR) -> KernelIR:
    """Check ``kernel``; raise a located ``CompilationError`` on the first problem.

    Returns the kernel so that it can be used inline (``verify(run_pass(k))``).
    """
    _Verifier(kernel).run()
    return kernel
