"""The textual IR form (read back by ``parser.py``; ``print(parse(text)) == text``).

::

    kernel @add(%x: buffer<global, f32, [?], strides=[1]>, %n: i32) {num_warps = 8} loc("k.py":3:0) {
      %pid = thread_index {kind = cta_id} : i32 loc(5:10)
      %acc = for(%0, %n, %1, %2) : f32 loc(9:4) {
      ^(%i: i32, %acc_1: f32):
        yield(%acc_1) loc(11:8)
      }
    }

Values print as ``%name`` from their name hint, made unique with ``_1, _2...``; values
without a hint are numbered. Attributes print in catalogue order, omitting defaults.
Locations print as ``loc(line:col)`` in the kernel's file, else ``loc("file":line:col)``.
"""
from __future__ import annotations

import json
import re

from .attrs import KERNEL_ATTRS
from .core import Block, KernelIR, Operation, Value

__all__ = ["Printer", "print_kernel", "print_op"]

INDENT = "  "


def _sanitize(hint: str) -> str:
    name = re.sub(r"\W", "_", hint)
    return f"v{name}" if name[:1].isdigit() else name


def _attr_text(decls: dict, attrs: dict) -> str:
    shown = [f"{name} = {decl.kind.encode(attrs[name])}" for name, decl in decls.items()
             if name in attrs and (decl.required or attrs[name] != decl.default)]
    return " {" + ", ".join(shown) + "}" if shown else ""


class Printer:
    """Prints ops and kernels, naming values consistently across calls."""

    def __init__(self, kernel_file: str | None = None):
        self.kernel_file = kernel_file
        self.names: dict[Value, str] = {}
        self._used: set[str] = set()
        self._counter = 0

    def name(self, value: Value) -> str:
        """``%name`` of ``value``, naming it now if it was not defined yet."""
        if value not in self.names:
            hint = _sanitize(value.name_hint)
            if hint:
                candidate, suffix = hint, 0
                while candidate in self._used:
                    suffix += 1
                    candidate = f"{hint}_{suffix}"
            else:
                while str(self._counter) in self._used:
                    self._counter += 1
                candidate = str(self._counter)
            self._used.add(candidate)
            self.names[value] = candidate
        return "%" + self.names[value]

    def loc(self, loc, full: bool = False) -> str:
        if loc.file == self.kernel_file and not full:
            return f"loc({loc.line}:{loc.col})"
        return f"loc({json.dumps(loc.file)}:{loc.line}:{loc.col})"

    def typed_args(self, values) -> str:
        return ", ".join(f"{self.name(v)}: {v.type}" for v in values)

    def op_header(self, op: Operation) -> str:
        """The op's first line: results, name, operands, attrs, types and location."""
        text = ""
        if op.results:
            text = ", ".join(self.name(r) for r in op.results) + " = "
        text += op.name
        if op.operands:
            text += "(" + ", ".join(self.name(v) for v in op.operands) + ")"
        text += _attr_text(op.opdef.attrs, op.attrs)
        if op.results:
            text += " : " + ", ".join(str(t) for t in op.result_types)
        return f"{text} {self.loc(op.loc)}"

    def op_lines(self, op: Operation, indent: str) -> list[str]:
        if not op.regions:
            return [indent + self.op_header(op)]
        lines = [indent + self.op_header(op) + " {"]
        for index, block in enumerate(op.regions):
            if index:
                lines.append(indent + "} {")
            lines.append(f"{indent}^({self.typed_args(block.args)}):")
            lines.extend(self.block_lines(block, indent + INDENT))
        lines.append(indent + "}")
        return lines

    def block_lines(self, block: Block, indent: str) -> list[str]:
        return [line for op in block.ops for line in self.op_lines(op, indent)]

    def kernel(self, kernel: KernelIR) -> str:
        self.kernel_file = kernel.loc.file
        header = (f"kernel @{kernel.name}({self.typed_args(kernel.params)})"
                  f"{_attr_text(KERNEL_ATTRS, kernel.attrs)} {self.loc(kernel.loc, full=True)} {{")
        return "\n".join([header, *self.block_lines(kernel.body, INDENT), "}"])


def print_kernel(kernel: KernelIR) -> str:
    return Printer().kernel(kernel)


def print_op(op: Operation, printer: Printer | None = None) -> str:
    """One op with its regions (names are local to this print unless ``printer`` is given)."""
    return "\n".join((printer or Printer()).op_lines(op, ""))
