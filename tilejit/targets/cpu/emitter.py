"""The emitter: walks native IR and builds LLVM IR through per-op handler tables.

Each ``emit_*`` module exports ``HANDLERS: {op name: handler}``; a handler takes the
:class:`Emitter` and the op and returns the op's results (LLVM values, or buffer
references for memory ops). The emitter owns what every handler shares: the IR-value map,
the scope state (team kind, statically known active threads), the error paths, and the
module-wide context (:class:`ModuleContext`: options, unit model, site table, memory
arenas, declared functions).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from llvmlite import ir

from tilejit.errors import CompilationError, TilejitError, reraise_located
from tilejit.ir.core import Block, KernelIR, Operation, Value
from tilejit.ir.scope import LANES_PER_WARP, ActiveSet
from tilejit.ir.types import TeamKind

from . import abi
from .frames import CoroFrame, PlainFrame
from .metadata import AliasScopes
from .types import I32, I64, opaque
from .units import UnitModel

__all__ = ["Arena", "CompileOptions", "EmitState", "Emitter", "ModuleContext"]


@dataclass(frozen=True)
class CompileOptions:
    debug: bool = False          # bounds checks everywhere, NaN-filled fresh memory
    bounds_check: bool = True    # bounds checks on native element accesses (buf[i])
    noalias: bool = False        # the caller promises global buffers do not overlap
    opt_level: int = 3
    fp_contract: bool = True     # allow a*b+c -> fma, as GPU compilers do by default
    granularity: TeamKind | None = None  # force finer simulated units (tests, debugging)


# A CTA's arena is one allocation per worker thread: a kernel asking for more than this
# is a mistake (a tile size off by a factor), not a kernel to start.
CTA_MEMORY_LIMIT = 2 << 30


class Arena:
    """Bump allocation of per-CTA memory: offsets are fixed at compile time."""

    def __init__(self):
        self.size = 0

    def reserve(self, nbytes: int, align: int = 16, what: str = "") -> int:
        offset = -(-self.size // align) * align
        if offset + nbytes > CTA_MEMORY_LIMIT:
            held = f" on top of the {_size(offset)} this CTA holds already" if offset else ""
            raise CompilationError(
                f"{what or 'this buffer'} needs {_size(nbytes)}{held}: the CPU target gives a "
                "CTA at most "
                f"{_size(CTA_MEMORY_LIMIT)} (shared memory, and the fragments and locals of "
                "all its threads that do not fit the stack)")
        self.size = offset + nbytes
        return offset


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} bytes"


@dataclass
class ModuleContext:
    """Everything shared by the functions of one kernel's module."""

    module: ir.Module
    kernel: KernelIR
    options: CompileOptions
    units: UnitModel
    sites: list = field(default_factory=list)
    data: Arena = field(default_factory=Arena)   # shared memory, CTA-wide fragments
    sync: Arena = field(default_factory=Arena)   # barrier and scheduler state (zeroed per CTA)
    cluster: Arena = field(default_factory=Arena)   # a cluster's shared sync state (ditto)
    named_state: dict = field(default_factory=dict)
    streaming_stores: bool = False  # non-temporal stores: run_ctas fences before returning
    race: object = None   # the race detector's state (``race.RaceState``), when it is on
    tmem: int | None = None   # tensor memory's offset in the data arena (``emit_tcgen05``)
    alias: AliasScopes = field(init=False)

    def __post_init__(self):
        self.alias = AliasScopes(self.module)

    def sync_state(self, key: str, nbytes: int) -> int:
        """Offset of the named piece of sync state, reserved on first use."""
        if key not in self.named_state:
            self.named_state[key] = self.sync.reserve(nbytes, 8)
        return self.named_state[key]

    def cluster_state(self, key: str, nbytes: int) -> int:
        """Offset of the named piece of the cluster's own state, reserved on first use."""
        key = f"cluster.{key}"
        if key not in self.named_state:
            self.named_state[key] = self.cluster.reserve(nbytes, 8)
        return self.named_state[key]

    def add_site(self, kind: str, op: Operation, **info) -> int:
        """Register a place that can fail at run time; its index goes into error records."""
        self.sites.append({"kind": kind, "op": op.name, "file": op.loc.file,
                           "line": op.loc.line, "col": op.loc.col, **info})
        return len(self.sites) - 1

    def function(self, name: str, ret: ir.Type, args: Sequence[ir.Type],
                 var_arg: bool = False) -> ir.Function:
        """An external (libc/libm) or intrinsic function, declared on first use."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, list(args), var_arg=var_arg), name)
        return fn

    def string(self, text: str) -> ir.GlobalVariable:
        data = bytearray(text.encode() + b"\0")
        var = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), len(data)),
                                self.module.get_unique_name("str"))
        var.initializer = ir.Constant(var.value_type, data)
        var.linkage, var.global_constant = "internal", True
        return opaque(var)


@dataclass(frozen=True)
class EmitState:
    """The scope at the op being emitted.

    ``active`` is the statically known active thread set (None when a branch makes it
    unrepresentable); ``lanes`` how many lanes of a warp are active (what a warp-unit
    stands for); ``single_team`` the team of an enclosing ``single`` region run inline.
    """

    team: TeamKind
    active: ActiveSet | None
    lanes: int = LANES_PER_WARP
    single_team: TeamKind | None = None


Handler = Callable[["Emitter", Operation], Sequence]


class Emitter:
    def __init__(self, mc: ModuleContext, frame: PlainFrame | CoroFrame,
                 handlers: dict[str, Handler]):
        self.mc = mc
        self.frame = frame
        self.b: ir.IRBuilder = frame.builder
        self.handlers = handlers
        self.values: dict[Value, object] = {}
        self.consts: dict[Value, object] = {}  # IR values known at compile time
        cluster = math.prod(mc.kernel.attrs["cluster"])
        self.state = EmitState(TeamKind.CTA, ActiveSet.entry(mc.kernel.attrs["num_warps"], cluster))

    @property
    def options(self) -> CompileOptions:
        return self.mc.options

    # ----------------------------------------------------------------- values
    def __getitem__(self, value: Value):
        return self.values[value]

    def operands(self, op: Operation) -> list:
        return [self.values[v] for v in op.operands]

    def bind(self, values: Sequence[Value], llvm_values: Sequence) -> None:
        for value, llvm_value in zip(values, llvm_values):
            self.values[value] = llvm_value

    # ----------------------------------------------------------------- walking
    def emit_block(self, block: Block, args: Sequence = ()) -> list:
        """Emit ``block`` with its arguments bound to ``args``; return what its terminator
        passes on (yield/condition operands, the condition first)."""
        self.bind(block.args, args)
        for op in block.ops:
            if op.opdef.terminator:
                return self.operands(op)
            self.emit_op(op)
        return []

    def emit_op(self, op: Operation) -> None:
        handler = self.handlers.get(op.name)
        try:
            if handler is None:
                raise CompilationError(self._unsupported(op))
            results = handler(self, op)
        except TilejitError as err:
            reraise_located(err, op.loc)
        except Exception as err:  # a compiler bug: report it at the user's line, not as-is
            raise CompilationError(f"internal compiler error in the CPU target emitting "
                                   f"{op.name}: {type(err).__name__}: {err}", op.loc) from None
        self.bind(op.results, results)

    @staticmethod
    def _unsupported(op: Operation) -> str:
        if op.name.startswith("tile."):
            return (f"{op.name} reached the CPU backend: tile primitives must be lowered to "
                    "native IR by the lower-tiles pass first")
        return f"the CPU backend cannot emit {op.name}"

    @contextmanager
    def scoped(self, **changes):
        """Emit with some :class:`EmitState` fields changed."""
        saved, self.state = self.state, replace(self.state, **changes)
        try:
            yield
        finally:
            self.state = saved

    # ----------------------------------------------------------------- run-time errors
    def fail_unless(self, ok, code: int, site: int, values: Sequence = (),
                    dims: Sequence = ()) -> None:
        """When ``ok`` is false at run time, fill the error record and leave the unit."""
        with self.b.if_then(self.b.not_(ok), likely=False):
            self.fail(code, site, values, dims)

    def fail(self, code: int, site: int, values: Sequence = (), dims: Sequence = ()) -> None:
        """Fill the error record and branch to the unit's error exit (ends the block)."""
        record = self.frame.err
        fields = [(abi.ERR_CODE, ir.Constant(I64, code)), (abi.ERR_SITE, ir.Constant(I64, site)),
                  (abi.ERR_UNIT, self.b.zext(self.frame.unit, I64))]
        fields += [(abi.ERR_VALUES + i, v) for i, v in enumerate(values[:abi.MAX_REPORTED_DIMS])]
        fields += [(abi.ERR_DIMS + i, v) for i, v in enumerate(dims[:abi.MAX_REPORTED_DIMS])]
        for slot, value in fields:
            if isinstance(value, int):
                value = ir.Constant(I64, value)
            self.b.store(value, self.b.gep(record, [ir.Constant(I32, slot)], source_etype=I64))
        self.b.branch(self.frame.error_exit)

    # ----------------------------------------------------------------- helpers
    def intrinsic(self, name: str, ret: ir.Type, args: Sequence) -> ir.Instruction:
        return self.b.call(self.mc.function(name, ret, [a.type for a in args]), list(args))

    def i64(self, value) -> ir.Value:
        return value if isinstance(value, ir.Value) else ir.Constant(I64, value)

    def byte_ptr(self, base, offset) -> ir.Value:
        return self.b.gep(base, [self.i64(offset)], source_etype=ir.IntType(8))
