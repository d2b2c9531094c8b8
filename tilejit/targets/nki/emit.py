"""Print a kernel lowered for the nki target as one NKI Python module (docs/nki.md).

The lowered IR holds the NKI instructions as typed ops (``ops.py``) on regions of views,
plus scalar index arithmetic, loops and the ``team`` / ``single`` scopes of a
``team_once`` lowering (printed inline: one instruction stream). The printer is a table
from op to text: an instruction becomes one ``nisa`` call with keyword arguments
(destination first), a region a slice of the NKI tensor it names, an on-chip alloc an
``nl.ndarray`` in the shape of its tensor (``tiles.Tile``), a ``for`` a loop over
``nl.affine_range`` (the rule that made it promised independent iterations),
``range`` (``unroll``: traced once per trip) or ``nl.sequential_range``.

The kernel takes its input tensors and returns the ones it writes, which it allocates in
``nl.shared_hbm``. Thread ids, barriers, warp operations and element accesses have no NKI
form: each is a CompilationError at the kernel line that made it.
"""
from __future__ import annotations

import linecache
import math
import os
import re
from dataclasses import dataclass, field

from tilejit.errors import CompilationError
from tilejit.ir.core import Block, KernelIR, Operation, Value
from tilejit.ir.types import BufferType, MemScope, ScalarType
from tilejit.passes.effects import root_buffer

from .tiles import tile_of

__all__ = ["NKI_DTYPES", "print_nki"]

NKI_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i32": "int32",
              "u32": "uint32", "i8": "int8", "u8": "uint8"}
BUFFERS = {MemScope.SHARED: "nl.sbuf", MemScope.SBUF: "nl.sbuf", MemScope.PSUM: "nl.psum"}
# scalar operators as Python's, with their binding strength (index arithmetic prints inline)
_BINARY = {"add": ("+", 2), "sub": ("-", 2), "mul": ("*", 3), "floordiv": ("//", 3),
           "mod": ("%", 3), "and": ("and", 0), "or": ("or", 0)}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ATOM = 4
# Ops with no NKI form, and what to write instead.
_REFUSED = {
    "thread_index": "NKI programs have no threads: only tj.cta_id / tj.num_ctas (the SPMD "
                    "grid, nl.program_id) exist on this target",
    "sync": "NKI has no barriers: one instruction stream orders its instructions",
    "mbarrier_init": "NKI has no mbarriers", "mbarrier_arrive": "NKI has no mbarriers",
    "mbarrier_expect_tx": "NKI has no mbarriers", "mbarrier_wait": "NKI has no mbarriers",
    "alloc_barrier": "NKI has no mbarriers",
    "warp_shuffle": "NKI has no warps (no shuffles)", "elect_sync": "NKI has no warps",
    "mma_sync": "NKI has no warps: write tj.gemm on SBUF tiles (nc_matmul)",
    "load": "NKI engines read whole tiles, not elements: write a tile primitive",
    "store": "NKI engines write whole tiles, not elements: write a tile primitive",
}
_GRID = {"cta_id": "nl.program_id", "num_ctas": "nl.num_programs"}


def _dtype(t: ScalarType) -> str:
    name = NKI_DTYPES.get(str(t))
    if name is None:
        raise CompilationError(f"the nki target has no {t} tensors (it has "
                               f"{', '.join(NKI_DTYPES)})")
    return f"nl.{name}"


def _literal(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"   # inf and nan have no literal
    return repr(value)


@dataclass
class NkiPrinter:
    kernel: KernelIR
    lines: list[str] = field(default_factory=list)
    names: dict[Value, str] = field(default_factory=dict)
    strength: dict[Value, int] = field(default_factory=dict)   # of an inline expression
    # module names and the builtins the printed code calls
    taken: set[str] = field(default_factory=lambda: {"nki", "nl", "nisa", "math", "range",
                                                     "min", "max"})
    depth: int = 1
    line_no: int | None = None

    # ---------------------------------------------------------------- names and text
    def fresh(self, hint: str | None) -> str:
        base = re.sub(r"\W", "_", hint or "") or "v"
        base = base if not base[0].isdigit() else f"v{base}"
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def __getitem__(self, value: Value) -> str:
        return self.names[value]

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def define(self, value: Value, expr: str) -> None:
        name = self.fresh(value.name_hint)
        self.emit(f"{name} = {expr}")
        self.names[value] = name

    def inline(self, value: Value, expr: str, strength: int) -> None:
        self.names[value], self.strength[value] = expr, strength

    def operand(self, value: Value, strength: int) -> str:
        """``value`` as an operand of an operator binding ``strength`` tightly."""
        text = self[value]
        return f"({text})" if self.strength.get(value, _ATOM) < strength else text

    def comment(self, op: Operation) -> None:
        """``# line N: <source>`` where the kernel line that made the code changes."""
        line = op.loc.line if op.loc else None
        if line and line != self.line_no and op.loc.file == self.kernel.loc.file:
            self.line_no = line
            source = linecache.getline(op.loc.file, line).strip()
            self.emit(f"# line {line}: {source}" if source else f"# line {line}")

    # ---------------------------------------------------------------- walking
    def block(self, block: Block) -> list[Value]:
        """Print ``block``; the values its terminator passes on."""
        for op in block.ops:
            if op.opdef.terminator:
                return list(op.operands[op.opdef.yields_from:])
            self.op(op)
        return []

    def op(self, op: Operation) -> None:
        if op.name == "sync" and op.attrs["reason"]:
            return   # sync-hazards' barrier between threads: one instruction stream has none
        if op.name in _REFUSED and not (op.name == "thread_index"
                                        and op.attrs["kind"] in _GRID):
            raise CompilationError(f"{op.name} cannot run on the nki target: "
                                   f"{_REFUSED[op.name]}", op.loc)
        handler = HANDLERS.get(op.name)
        if handler is None:
            raise CompilationError(f"the nki target cannot print '{op.name}' ops", op.loc)
        if op.name.startswith("nki.") or op.name == "for" or (
                op.name == "alloc" and op.result.type.scope is not MemScope.FRAGMENT):
            self.comment(op)
        try:
            handler(self, op)
        except CompilationError as err:
            raise err.with_location(op.loc) from None

    # ---------------------------------------------------------------- the module
    def module(self) -> str:
        written = _written(self.kernel)
        inputs, outputs = [], []
        for value, pname in zip(self.kernel.params, self.kernel.param_names):
            self.names[value] = self.fresh(pname)
            (outputs if value in written else inputs).append(value)
        for value in outputs:
            t = value.type
            self.emit(f"{self[value]} = nl.ndarray({tuple(t.shape)}, dtype={_dtype(t.dtype)}, "
                      "buffer=nl.shared_hbm)")
        self.block(self.kernel.body)
        if outputs:
            self.emit("return " + ", ".join(self[v] for v in outputs))
        body = self.lines
        shapes = "; ".join(f"{self[v]}: {list(v.type.shape)} {v.type.dtype}"
                           for v in self.kernel.params if isinstance(v.type, BufferType))
        loc = self.kernel.loc
        where = f"{os.path.basename(loc.file)}:{loc.line}" if loc and loc.file else "?"
        head = [f'"""NKI kernel {self.kernel.name}, generated by tilejit from {where}.',
                "", f"Shapes are compiled in ({shapes}); the outputs are returned.", '"""',
                "import nki", "import nki.isa as nisa", "import nki.language as nl", "", "",
                "@nki.jit",
                f"def {self.kernel.name}({', '.join(self[v] for v in inputs)}):"]
        return "\n".join(head + body) + "\n"


def _written(kernel: KernelIR) -> set[Value]:
    """The kernel arguments an instruction writes (an NKI instruction's operand 0): the
    outputs. One also read is refused: NKI kernels return fresh output tensors."""
    params = set(kernel.params)
    written, read = {}, set()
    for op in kernel.walk():
        if op.name.startswith("nki."):
            for i, value in enumerate(op.operands):
                root = root_buffer(value)
                if root in params:
                    (written.setdefault(root, op) if i == 0 else read.add(root))
    for root, op in written.items():
        if root in read:
            name = kernel.param_names[kernel.params.index(root)]
            raise CompilationError(f"argument {name!r} is read and written: an NKI kernel "
                                   "returns its outputs as new tensors, so write the result "
                                   "to an argument the kernel does not read", op.loc)
    return set(written)


# ---------------------------------------------------------------------- handlers
def _const(p: NkiPrinter, op: Operation) -> None:
    p.names[op.result] = _literal(op.attrs["value"])


def _binary(p: NkiPrinter, op: Operation) -> None:
    lhs, rhs = op.operands
    name = op.attrs["op"]
    if name in ("max", "min"):
        p.inline(op.result, f"{name}({p[lhs]}, {p[rhs]})", _ATOM)
    elif name in _BINARY:
        text, strength = _BINARY[name]
        # left-associative: the right operand of - // % needs parentheses at equal strength
        right = strength + (name in ("sub", "floordiv", "mod"))
        p.inline(op.result, f"{p.operand(lhs, strength)} {text} {p.operand(rhs, right)}",
                 strength)
    else:
        raise CompilationError(f"the nki target has no scalar '{name}'")


def _cmp(p: NkiPrinter, op: Operation) -> None:
    lhs, rhs = (p.operand(v, 2) for v in op.operands)
    p.inline(op.result, f"{lhs} {_CMP[op.attrs['pred']]} {rhs}", 1)


def _cast(p: NkiPrinter, op: Operation) -> None:
    source, to = op.operands[0], op.attrs["to"]
    if source.type.is_int and to.is_int:   # Python ints: index widths do not matter
        p.names[op.result] = p[source]
    else:
        raise CompilationError(f"the nki target has no scalar conversion to {to}")


def _thread_index(p: NkiPrinter, op: Operation) -> None:
    p.define(op.result, f"{_GRID[op.attrs['kind']]}({op.attrs['dim']})")


def _buffer_dim(p: NkiPrinter, op: Operation) -> None:
    p.names[op.result] = f"{p[op.operands[0]]}.shape[{op.attrs['dim']}]"


def _alloc(p: NkiPrinter, op: Operation) -> None:
    t = op.result.type
    if t.scope is MemScope.FRAGMENT:
        # an index tile (tj.arange ...): dispatch refuses any other fragment here, and the
        # rules fold this one into the iota / affine_select that reads it
        p.names[op.result] = f"<index tile {op.result.name_hint}>"
        return
    buffer = BUFFERS.get(t.scope)
    tile = tile_of(t) if buffer else None
    if buffer is None or isinstance(tile, str):
        raise CompilationError(f"a {t.scope} buffer has no NKI form: "
                               f"{tile or 'use tj.alloc_shared (SBUF) or tj.alloc_psum'}")
    p.define(op.result, f"nl.ndarray({tile.shape}, dtype={_dtype(t.dtype)}, buffer={buffer})")


def _view(p: NkiPrinter, op: Operation) -> None:
    root = root_buffer(op.result)
    if root.type.scope is MemScope.FRAGMENT:
        p.names[op.result] = p[root]   # of an index tile: folded, never printed
        return
    tile = tile_of(root.type)
    if isinstance(tile, str) or tuple(op.result.type.shape) != tile.shape:
        raise CompilationError(f"a view {list(op.result.type.shape)} of an NKI tensor "
                               "other than its own shape")
    p.names[op.result] = p[root]


def _region(p: NkiPrinter, op: Operation) -> None:
    buf, *starts = op.operands
    if all(p[s] == "0" for s in starts) and op.attrs["sizes"] == tuple(buf.type.shape) \
            and all(op.attrs["keep"]):
        p.names[op.result] = p[buf]   # the whole tensor
        return
    parts = []
    for start, size, keep in zip(starts, op.attrs["sizes"], op.attrs["keep"]):
        first = p.operand(start, 2)
        if not keep:
            parts.append(p[start])
        elif first.isdigit():
            parts.append(f"{first}:{int(first) + size}")
        else:
            parts.append(f"{first}:{first} + {size}")
    p.names[op.result] = f"{p[buf]}[{', '.join(parts)}]"


def _for(p: NkiPrinter, op: Operation) -> None:
    lb, ub, step, *inits = op.operands
    if inits:
        raise CompilationError("a loop carrying values has no NKI form (NKI loops carry "
                               "tiles, not scalars)")
    kind = ("range" if op.attrs["unroll"] else
            "nl.affine_range" if op.attrs["independent"] else "nl.sequential_range")
    bounds = [p[ub]] if (p[lb], p[step]) == ("0", "1") else [p[lb], p[ub], p[step]]
    iv = op.regions[0].args[0]
    outside = set(p.taken)   # names made inside are free again after the loop
    p.names[iv] = p.fresh(iv.name_hint or "i")
    p.emit(f"for {p[iv]} in {kind}({', '.join(bounds)}):")
    p.depth += 1
    mark = len(p.lines)
    p.block(op.regions[0])
    if len(p.lines) == mark:
        p.emit("pass")
    p.depth -= 1
    p.taken = outside


def _scope(p: NkiPrinter, op: Operation) -> None:
    """team / single: one instruction stream runs the body in place."""
    for result, value in zip(op.results, p.block(op.regions[0])):
        p.names[result] = p[value]


def _call(name: str, *fields):
    """An instruction: ``nisa.<name>(...)`` with its keyword arguments in ``fields``' order:
    a word takes the next operand, a ``(keyword, text_of(op))`` pair an attribute (left
    out where the text is None: the instruction's default)."""
    def handler(p: NkiPrinter, op: Operation) -> None:
        operands, args = iter(op.operands), []
        for f in fields:
            if isinstance(f, str):
                args.append(f"{f}={p[next(operands)]}")
            elif (text := f[1](op)) is not None:
                args.append(f"{f[0]}={text}")
        p.emit(f"nisa.{name}({', '.join(args)})")
    return handler


def _nl(attr: str):
    return lambda op: f"nl.{op.attrs[attr]}"


def _pattern(op: Operation) -> str:
    return repr([list(pair) for pair in op.attrs["pattern"]])


def _matmul(p: NkiPrinter, op: Operation) -> None:
    dst, stationary, moving, *accumulate = (p[v] for v in op.operands)
    extra = "".join(f", accumulate={flag}" for flag in accumulate)
    p.emit(f"nisa.nc_matmul(dst={dst}, stationary={stationary}, moving={moving}{extra})")


HANDLERS = {
    "const": _const, "binary": _binary, "cmp": _cmp, "cast": _cast,
    "thread_index": _thread_index, "buffer_dim": _buffer_dim,
    "alloc": _alloc, "view": _view, "region": _region,
    "for": _for, "team": _scope, "single": _scope,
    "nki.dma_copy": _call("dma_copy", "dst", "src"),
    "nki.tensor_copy": _call("tensor_copy", "dst", "src"),
    "nki.matmul": _matmul,
    "nki.transpose": _call("nc_transpose", "dst", "data"),
    "nki.tensor_tensor": _call("tensor_tensor", "dst", "data1", "data2", ("op", _nl("op"))),
    "nki.tensor_scalar": _call("tensor_scalar", "dst", "data", ("op0", _nl("op")), "operand0",
                               ("reverse0", lambda op: "True" if op.attrs["reverse"] else None)),
    "nki.memset": _call("memset", "dst", "value"),
    "nki.activation": _call("activation", "dst", ("op", _nl("op")), "data"),
    "nki.tensor_reduce": _call("tensor_reduce", "dst", ("op", _nl("op")), "data",
                               ("axis", lambda op: "1"), ("keepdims", lambda op: "True")),
    "nki.iota": _call("iota", "dst", ("pattern", _pattern), "offset",
                      ("channel_multiplier", lambda op: str(op.attrs["channel_multiplier"]))),
    "nki.affine_select": _call("affine_select", "dst", ("pattern", _pattern),
                               ("channel_multiplier",
                                lambda op: str(op.attrs["channel_multiplier"])),
                               "on_true_tile", ("on_false_value", lambda op: _literal(op.attrs["on_false"])),
                               ("cmp_op", _nl("cmp")), "offset"),
}


def print_nki(kernel: KernelIR) -> str:
    """The NKI module of ``kernel`` (lowered IR of the nki target)."""
    return NkiPrinter(kernel).module()
