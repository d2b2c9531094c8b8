"""What a dispatch rule sees: a :class:`PrimitiveCall` built from one tile op.

Per operand an :class:`Operand` gives its storage role, dtype, static logical shape, the
layout of the sub-tile (the parent buffer's layout sliced to the region with
``TileLayout.slice``), and which dims may run past the end of a global buffer whose size
is known only at run time. The call adds the primitive's own attributes, the execution
scope, ``dispatch=``/``config=`` and the target's :class:`DispatchContext`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import CompilationError, LayoutError, SourceLocation
from ...ir.core import Operation, Value
from ...ir.opdef import OpGroup
from ...ir.ops_tile import FUSED, POINTWISE_ARITY
from ...ir.scope import ExecScope
from ...ir.types import BufferType, MemScope, RegionType, ScalarType, TeamKind
from ...layout import AxisKind, ComposeLayout, TileLayout
from .registry import DispatchContext

__all__ = ["Operand", "PrimitiveCall", "RebuiltWriters", "fragment_writers",
           "operand_names"]

_COMMON = ("team", "dispatch", "config", "scope", "rule", "inst_shape")
_POINTWISE_NAMES = {"select": ("cond", "a", "b"), "fill": ("value",), "iota": ("start",),
                    "rand": ("seed", "offsets"), "randn": ("seed", "offsets"),
                    "randint": ("seed", "offsets")}


def operand_names(primitive: str, attrs: Mapping, count: int) -> tuple[str, ...]:
    """The names rules and messages use for the ``count`` tile operands of ``primitive``
    (a fused chain's sources are ``s0, s1, ...`` after the ones named here)."""
    if primitive == "copy":
        return ("dst", "src", "mask")  # the mask is optional
    if primitive == "reduce":
        return ("dst", "src", *(f"s{i}" for i in range(1, count - 1)))
    if primitive == "pointwise" and attrs["op"] == FUSED:
        return ("dst", *(f"s{i}" for i in range(count - 1)))
    if primitive in ("copy_async", "scan", "permute", "atomic"):
        return ("dst", "src")
    if primitive == "gather":
        return ("dst", "src", "index")
    if primitive == "scatter":
        return ("dst", "index", "src")
    if primitive in ("gemm", "gemm_async"):
        return ("C", "A", "B")
    op = attrs["op"]
    srcs = _POINTWISE_NAMES.get(op) or {1: ("src",), 2: ("a", "b"),
                                       3: ("a", "b", "c")}[POINTWISE_ARITY[op]]
    return ("dst", *srcs)


def _static_int(value: Value) -> int | None:
    owner = value.owner
    if isinstance(owner, Operation) and owner.name == "const":
        return owner.attrs["value"]
    return None


@dataclass(frozen=True, eq=False)
class Operand:
    """One operand of a tile primitive.

    ``role`` is None for a scalar. ``shape`` is the logical shape (dims dropped by an
    integer index removed; ``None`` entries only for a whole global buffer). ``layout`` is
    the sub-tile layout, None for global memory (strided by run-time strides) or a buffer
    whose layout a later pass decides; ``layout_error`` says why slicing failed.
    ``oob_dims`` are the parent buffer's dims that may run past its end.
    """

    name: str
    value: Value
    role: MemScope | None
    dtype: ScalarType
    shape: tuple
    layout: TileLayout | ComposeLayout | None = None
    layout_error: str | None = None
    oob_dims: tuple[int, ...] = ()

    @classmethod
    def of(cls, name: str, value: Value) -> Operand:
        t = value.type
        if isinstance(t, ScalarType):
            return cls(name, value, None, t, ())
        buffer = t.buffer if isinstance(t, RegionType) else t
        layout, error = _sub_tile_layout(value)
        oob = ()
        if isinstance(t, RegionType) and buffer.scope is MemScope.GLOBAL \
                and not value.owner.attrs["in_bounds"]:
            starts = [_static_int(s) for s in value.owner.operands[1:]]
            # a run-time size, or a static one (specialized) that a static tile passes
            oob = tuple(d for d, (n, start, size) in
                        enumerate(zip(buffer.shape, starts, t.sizes))
                        if n is None or (start is not None and start + size > n))
        return cls(name, value, buffer.scope, buffer.dtype, tuple(t.shape), layout, error, oob)

    @property
    def is_scalar(self) -> bool:
        return self.role is None

    @property
    def is_region(self) -> bool:
        return isinstance(self.value.type, RegionType)

    @property
    def buffer_type(self) -> BufferType | None:
        t = self.value.type
        return t.buffer if isinstance(t, RegionType) else t if isinstance(t, BufferType) else None

    @property
    def is_static(self) -> bool:
        return None not in self.shape

    @property
    def may_oob(self) -> bool:
        return bool(self.oob_dims)

    @property
    def thread_axes(self) -> tuple[str, ...]:
        """Thread axes the layout places elements on (lanes, warps...): a distributed tile."""
        layout = self.layout
        if not isinstance(layout, TileLayout):
            return ()
        return tuple(a.name for a in layout.axes if a.kind is AxisKind.THREAD)

    def describe(self) -> str:
        if self.is_scalar:
            return f"{self.name}: scalar {self.dtype}"
        dims = ", ".join("?" if n is None else str(n) for n in self.shape)
        text = f"{self.name}: {self.role} {self.dtype}[{dims}]"
        if self.may_oob:
            text += " (may run out of bounds)"
        return text


def _sub_tile_layout(value: Value):
    """(layout of the tile ``value`` names, why it could not be derived or None)."""
    t = value.type
    if isinstance(t, BufferType):
        return t.layout, None
    buffer = t.buffer
    if buffer.layout is None:
        return None, None
    if not buffer.is_static:
        return None, f"cannot slice the layout of a buffer with run-time shape {list(buffer.shape)}"
    # A start known only at run time is taken as 0: the structure of the slice (its
    # iters) is what legality looks at; the offset is the target's business.
    starts = [(_static_int(s) or 0) for s in value.owner.operands[1:]]
    region = tuple(slice(s, s + n) if keep else s
                   for s, n, keep in zip(starts, t.sizes, t.keep))
    layout = buffer.layout
    try:
        if isinstance(layout, ComposeLayout):
            tile = layout.tile_layout.slice(buffer.shape, region)
            return ComposeLayout(layout.per_element, layout.swizzle_len, layout.atom_len,
                                 tile), None
        return layout.slice(buffer.shape, region), None
    except LayoutError as err:
        return None, err.message


def argument_flags(kernel, lookup=None) -> dict[Value, tuple[str, ...]]:
    """Each argument of ``kernel`` -> its specialization flags (``"aligned16"`` ...);
    ``lookup`` maps an argument to the value a rewriter's ops use (its rebuilt one)."""
    lookup = lookup or (lambda value: value)
    return {lookup(kernel.param(name)): tuple(flags)
            for name, flags in kernel.attrs["specialization"].items()}


def fragment_writers(kernel) -> dict[Value, Operation]:
    """Each fragment buffer of ``kernel`` that exactly one tile op writes -> that op.

    A target without per-element code folds such an index tile (``tj.arange`` and
    arithmetic on it) into the instruction that reads it (the nki target's
    ``affine_select`` / ``iota``), so its rule reads the writer instead of the data."""
    writers: dict[Value, Operation | None] = {}
    for op in kernel.walk():
        if op.opdef.group is OpGroup.TILE and op.operands \
                and isinstance(op.operands[0].type, BufferType) \
                and op.operands[0].type.scope is MemScope.FRAGMENT:
            dst = op.operands[0]
            writers[dst] = op if dst not in writers else None   # written twice: no index tile
    return {v: op for v, op in writers.items() if op is not None}


class RebuiltWriters(Mapping):
    """:func:`fragment_writers` of a kernel a rewriter is rebuilding, seen from the rebuilt
    IR (a rule's operands): keyed by the rebuilt buffer, each writer with its operands
    rebuilt (so a rule may use its run-time scalars). Looked up on demand: only the rules
    that fold index tiles read it."""

    def __init__(self, writers: Mapping[Value, Operation], lookup):
        self._writers, self._lookup = writers, lookup

    def __getitem__(self, value: Value) -> Operation:
        for buffer, op in self._writers.items():
            if self._lookup(buffer) is value:
                return op.replace(operands=[self._lookup(v) for v in op.operands])
        raise KeyError(value)

    def __iter__(self):
        return (self._lookup(buffer) for buffer in self._writers)

    def __len__(self) -> int:
        return len(self._writers)


@dataclass(frozen=True, eq=False)
class PrimitiveCall:
    """One tile-primitive call as the rules see it."""

    primitive: str
    context: DispatchContext
    scope: ExecScope
    operands: tuple[Operand, ...]
    attrs: Mapping = field(default_factory=dict)  # the primitive's own attributes
    dispatch: str | None = None
    config: Mapping = field(default_factory=dict)
    loc: SourceLocation | None = None
    extras: tuple[Value, ...] = ()  # non-tile operands (copy_async's barrier)
    # kernel argument -> what the runtime proved of it ("aligned16", "div16" ...)
    arg_flags: Mapping[Value, tuple[str, ...]] = field(default_factory=dict)
    # fragment buffer -> the one tile op that writes it (:func:`fragment_writers`)
    writers: Mapping[Value, Operation] = field(default_factory=dict)

    @classmethod
    def of(cls, op: Operation, context: DispatchContext,
           arg_flags: Mapping[Value, tuple[str, ...]] | None = None,
           writers: Mapping[Value, Operation] | None = None) -> PrimitiveCall:
        """The call of tile op ``op``; ``arg_flags`` (:func:`argument_flags`) what the
        runtime proved of the kernel's arguments, ``writers`` (:func:`fragment_writers`)
        what writes its index tiles: no call knows either without them."""
        primitive = op.name.removeprefix("tile.")
        scope = op.attrs.get("scope")
        if scope is None:
            raise CompilationError(f"{op.name} has no execution scope: run scope-analysis "
                                   "before dispatch", op.loc)
        own = {k: v for k, v in op.attrs.items() if k not in _COMMON}
        names = operand_names(primitive, own, len(op.operands))
        operands = tuple(Operand.of(n, v) for n, v in zip(names, op.operands))
        return cls(primitive, context, scope, operands, own, op.attrs["dispatch"],
                   dict(op.attrs["config"]), op.loc, tuple(op.operands[len(names):]),
                   dict(arg_flags or {}), writers or {})

    @property
    def target(self) -> str:
        return self.context.target

    @property
    def team(self) -> TeamKind:
        return self.scope.kind

    def __getitem__(self, name: str) -> Operand:
        for operand in self.operands:
            if operand.name == name:
                return operand
        raise KeyError(f"{self.primitive} has no operand {name!r}")

    @property
    def tiles(self) -> tuple[Operand, ...]:
        """The operands that are buffers or regions (not scalars)."""
        return tuple(o for o in self.operands if not o.is_scalar)

    def describe(self) -> str:
        what = self.attrs.get("op")
        head = f"tile.{self.primitive}" + (f" {what}" if what else "")
        args = ", ".join(o.describe() for o in self.operands)
        return f"{head}({args}) on target {self.target!r}, team {self.team}"
