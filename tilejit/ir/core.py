"""SSA values, operations, blocks and kernels.

Nodes are immutable by convention: a pass builds new ops with ``op.replace(...)`` (which
re-validates against the catalogue and creates fresh result values) and new blocks, and
maps old values to new ones; it never edits an op in place. Block op lists are appended
to only while a block is being built (by the ``Builder`` or a rewrite).
"""
from __future__ import annotations

from typing import Iterator, Sequence

from tilejit.errors import UNKNOWN_LOCATION, CompilationError, SourceLocation

from .attrs import KERNEL_ATTRS, AttrError, check_attrs
from .ops import OpDefError, get_opdef

__all__ = ["Value", "Operation", "Block", "KernelIR", "walk"]


class Value:
    """An SSA value. ``owner`` is the defining Operation, or the Block for a block argument.

    Identity semantics: two values are equal only if they are the same object.
    ``name_hint`` only affects how the value prints (``%acc``) and may be set freely.
    """

    __slots__ = ("type", "name_hint", "owner", "index")

    def __init__(self, type, name_hint: str = "", owner=None, index: int = 0):
        self.type = type
        self.name_hint = name_hint
        self.owner = owner
        self.index = index

    def __repr__(self) -> str:
        return f"<Value %{self.name_hint or '?'}: {self.type}>"


class Operation:
    """One op: built through the catalogue, which validates it and types its results."""

    __slots__ = ("name", "opdef", "operands", "attrs", "results", "regions", "loc")

    def __init__(self, name: str, operands: Sequence[Value] = (), attrs: dict | None = None,
                 result_types: Sequence | None = None, regions: Sequence["Block"] = (),
                 loc: SourceLocation = UNKNOWN_LOCATION):
        opdef = get_opdef(name)
        if opdef is None:
            raise CompilationError(f"unknown op {name!r}", loc)
        operands = tuple(operands)
        for value in operands:
            if not isinstance(value, Value):
                raise CompilationError(f"operand of {name} is not an IR value: {value!r}", loc)
        try:
            full_attrs, types = opdef.validate([v.type for v in operands], attrs, result_types,
                                               len(regions))
        except OpDefError as err:
            raise CompilationError(str(err), loc) from None
        self.name = name
        self.opdef = opdef
        self.operands = operands
        self.attrs = full_attrs
        self.results = tuple(Value(t, "", self, i) for i, t in enumerate(types))
        self.regions = tuple(regions)
        self.loc = loc

    @property
    def result(self) -> Value:
        """The single result (an error for ops with zero or several results)."""
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def result_types(self) -> tuple:
        return tuple(r.type for r in self.results)

    def replace(self, *, operands: Sequence[Value] | None = None, attrs: dict | None = None,
                result_types: Sequence | None = None, regions: Sequence["Block"] | None = None,
                loc: SourceLocation | None = None) -> "Operation":
        """A new op like this one with the given fields changed (``attrs`` are merged in).

        Results are new values (named like the old ones); result types are recomputed for
        ops whose results follow from their operands, kept otherwise unless given.
        """
        operands = self.operands if operands is None else tuple(operands)
        regions = self.regions if regions is None else tuple(regions)
        if attrs or result_types is not None or not self._same_signature(operands, regions):
            if result_types is None and self.opdef.results == "explicit":
                result_types = self.result_types
            new = Operation(self.name, operands, {**self.attrs, **(attrs or {})}, result_types,
                            regions, self.loc if loc is None else loc)
        else:   # the catalogue's checks read only what is unchanged: they would agree
            new = Operation.__new__(Operation)
            new.name, new.opdef, new.operands, new.attrs = self.name, self.opdef, operands, \
                dict(self.attrs)
            new.results = tuple(Value(v.type, "", new, i) for i, v in enumerate(self.results))
            new.regions, new.loc = regions, self.loc if loc is None else loc
        for old, fresh in zip(self.results, new.results):
            fresh.name_hint = old.name_hint
        return new

    def _same_signature(self, operands: tuple, regions: tuple) -> bool:
        """Whether ``operands`` are IR values of the very types of this op's operands and
        ``regions`` as many as its own: what ``OpDef.validate`` reads besides the attrs."""
        return (len(operands) == len(self.operands) and len(regions) == len(self.regions)
                and all(isinstance(new, Value) and new.type is old.type
                        for new, old in zip(operands, self.operands)))

    def __str__(self) -> str:
        from .printer import print_op
        return print_op(self)

    def __repr__(self) -> str:
        return f"<Operation {self.name} at {self.loc}>"


class Block:
    """A straight-line list of ops with typed arguments (the single block of a region)."""

    __slots__ = ("args", "ops")

    def __init__(self, args: Sequence[Value] = (), ops: Sequence[Operation] | None = None):
        self.args = tuple(args)
        for index, arg in enumerate(self.args):
            if arg.owner is not None and arg.owner is not self:
                raise ValueError(f"{arg!r} already belongs to {arg.owner!r}")
            arg.owner, arg.index = self, index
        self.ops = list(ops or ())

    @classmethod
    def with_arg_types(cls, types: Sequence, names: Sequence[str] = ()) -> "Block":
        names = tuple(names) + ("",) * (len(types) - len(names))
        return cls(tuple(Value(t, n) for t, n in zip(types, names)))

    @classmethod
    def like(cls, block: "Block") -> "Block":
        """An empty block with fresh arguments of ``block``'s types and names."""
        return cls.with_arg_types([a.type for a in block.args], [a.name_hint for a in block.args])

    @property
    def terminator(self) -> Operation | None:
        last = self.ops[-1] if self.ops else None
        return last if last is not None and last.opdef.terminator else None

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"<Block ({len(self.args)} args, {len(self.ops)} ops)>"


def walk(block: Block) -> Iterator[Operation]:
    """Every op in ``block`` in pre-order, nested regions included."""
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from walk(region)


class KernelIR:
    """A kernel: its body block (whose arguments are the parameters) and kernel attrs.

    Attributes (see ``attrs.KERNEL_ATTRS``): ``num_warps``, ``cluster``, ``target``,
    ``arch``, ``constexprs`` (name -> value, folded by the frontend) and
    ``specialization`` (param name -> tuple of flags such as ``"aligned16"``).
    """

    __slots__ = ("name", "param_names", "body", "attrs", "loc")

    def __init__(self, name: str, body: Block, param_names: Sequence[str],
                 attrs: dict | None = None, loc: SourceLocation = UNKNOWN_LOCATION):
        param_names = tuple(param_names)
        if len(param_names) != len(body.args):
            raise ValueError(f"{len(param_names)} parameter names for {len(body.args)} params")
        try:
            self.attrs = check_attrs(KERNEL_ATTRS, dict(attrs or {}), f"kernel {name}")
        except AttrError as err:
            raise CompilationError(str(err), loc) from None
        self.name = name
        self.param_names = param_names
        self.body = body
        self.loc = loc
        for param, pname in zip(body.args, param_names):
            param.name_hint = param.name_hint or pname

    @classmethod
    def new(cls, name: str, param_names: Sequence[str], param_types: Sequence,
            attrs: dict | None = None, loc: SourceLocation = UNKNOWN_LOCATION) -> "KernelIR":
        """A kernel with an empty body whose arguments are fresh parameter values."""
        return cls(name, Block.with_arg_types(param_types, param_names), param_names, attrs, loc)

    @property
    def params(self) -> tuple[Value, ...]:
        return self.body.args

    def param(self, name: str) -> Value:
        return self.params[self.param_names.index(name)]

    def replace(self, *, body: Block | None = None, attrs: dict | None = None,
                name: str | None = None, loc: SourceLocation | None = None) -> "KernelIR":
        """A new kernel with the given fields changed (``attrs`` are merged in)."""
        return KernelIR(self.name if name is None else name, self.body if body is None else body,
                        self.param_names, {**self.attrs, **(attrs or {})},
                        self.loc if loc is None else loc)

    def walk(self) -> Iterator[Operation]:
        return walk(self.body)

    def __str__(self) -> str:
        from .printer import print_kernel
        return print_kernel(self)

    def __repr__(self) -> str:
        return f"<KernelIR @{self.name} ({len(self.params)} params)>"
