"""The machinery behind the op catalogue: ``OpDef``, operand/region specs, the registry.

An op is declared once (see ``ops_native.py``, ``ops_control.py``, ``ops_tile.py``) with
its operands (``"buf:memory"``, variadic ``"*indices:int"``), typed attributes, a
result-type rule (or ``EXPLICIT`` when the builder supplies the types), its regions and
an optional ``check(op) -> str | None`` run by the verifier. ``OpDef.validate`` is the
one generic place where an op's operands, attributes and result types are checked when
it is created.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Callable

from .attrs import Attr, AttrError, check_attrs
from .types import BarrierType, BufferType, RegionType, ScalarType, i1

__all__ = [
    "OpGroup", "OperandSpec", "RegionSpec", "OpDef", "EXPLICIT", "OPS", "register",
    "get_opdef", "OpDefError", "CONSTRAINTS",
]


class OpGroup(enum.Enum):
    NATIVE = "native"      # scalar arithmetic, thread ids
    MEMORY = "memory"      # buffers, regions, element access
    CONTROL = "control"    # for / if / while and their terminators
    SCOPE = "scope"        # team switches
    SYNC = "sync"          # barriers, shuffles, intrinsics
    TILE = "tile"          # tile primitives (dispatched later)


class OpDefError(ValueError):
    """An op that does not fit its OpDef (wrapped into a located CompilationError)."""


def _is_scalar(t) -> bool:
    return isinstance(t, ScalarType)


CONSTRAINTS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "any": ("any type", lambda t: True),
    "scalar": ("a scalar", _is_scalar),
    "int": ("an integer", lambda t: _is_scalar(t) and t.is_int),
    "i1": ("i1", lambda t: t == i1),
    "buffer": ("a buffer", lambda t: isinstance(t, BufferType)),
    "memory": ("a buffer or region", lambda t: isinstance(t, (BufferType, RegionType))),
    "barrier": ("a barrier", lambda t: isinstance(t, BarrierType)),
    "tile_or_scalar": ("a buffer, region or scalar",
                       lambda t: isinstance(t, (BufferType, RegionType, ScalarType))),
}


@dataclass(frozen=True)
class OperandSpec:
    name: str
    constraint: str = "any"
    variadic: bool = False

    @classmethod
    def parse(cls, text: str) -> "OperandSpec":
        name, _, constraint = text.partition(":")
        variadic = name.startswith("*")
        spec = cls(name.lstrip("*"), constraint or "any", variadic)
        if spec.constraint not in CONSTRAINTS:
            raise ValueError(f"unknown operand constraint {spec.constraint!r}")
        return spec


@dataclass(frozen=True)
class RegionSpec:
    """A single-block region: its terminator and the types its block args / yields must have."""

    name: str
    terminator: str
    arg_types: Callable = lambda op: ()
    yield_types: Callable = lambda op: op.result_types


EXPLICIT = "explicit"  # result types are given when the op is built


@dataclass(frozen=True)
class OpDef:
    name: str
    group: OpGroup
    operands: tuple = ()
    attrs: dict = field(default_factory=dict)
    results: object = EXPLICIT  # EXPLICIT or (operand_types, attrs) -> tuple of types
    regions: tuple = ()
    check: Callable | None = None
    terminator: bool = False
    yields_from: int = 0  # for terminators: index of the first yielded operand
    doc: str = ""
    # a target's own op that writes the memory of its operand 0 (the native accesses are
    # listed in ops_native.WRITING_ACCESSES): what the read-only-argument check counts
    writes: bool = False

    # cached: every op built or verified asks (a frozen dataclass keeps no other state)
    @functools.cached_property
    def fixed_operands(self) -> tuple:
        return tuple(s for s in self.operands if not s.variadic)

    @functools.cached_property
    def variadic(self) -> OperandSpec | None:
        last = self.operands[-1] if self.operands else None
        return last if last is not None and last.variadic else None

    @functools.cached_property
    def operand_tests(self) -> tuple:
        """Each operand spec's constraint test, in order (a variadic one last)."""
        return tuple(CONSTRAINTS[s.constraint][1] for s in self.operands)

    def operand_spec(self, index: int) -> OperandSpec:
        fixed = self.fixed_operands
        return fixed[index] if index < len(fixed) else self.variadic

    def validate(self, operand_types, attrs, result_types, num_regions):
        """Check operands, attrs, regions; return (attrs with defaults, result types)."""
        fixed = self.fixed_operands
        count = len(operand_types)
        if count < len(fixed) or (count > len(fixed) and self.variadic is None):
            wanted = ", ".join(("*" if s.variadic else "") + s.name for s in self.operands)
            raise OpDefError(f"{self.name} takes ({wanted}), got {count} operand(s)")
        tests, last = self.operand_tests, len(fixed)   # past the fixed ones: the variadic
        for index, t in enumerate(operand_types):
            if not tests[min(index, last)](t):
                spec = self.operand_spec(index)
                raise OpDefError(f"operand {spec.name!r} of {self.name} must be "
                                 f"{CONSTRAINTS[spec.constraint][0]}, got {t}")
        try:
            full_attrs = check_attrs(self.attrs, dict(attrs or {}), self.name)
        except AttrError as err:
            raise OpDefError(str(err)) from None
        if num_regions != len(self.regions):
            raise OpDefError(f"{self.name} has {len(self.regions)} region(s), got {num_regions}")
        if self.results == EXPLICIT:
            return full_attrs, tuple(result_types or ())
        try:
            computed = tuple(self.results(tuple(operand_types), full_attrs))
        except (ValueError, TypeError) as err:  # a type constructor refused the combination
            raise OpDefError(f"{self.name}: {err}") from None
        if result_types is not None and tuple(result_types) != computed:
            shown = ", ".join(map(str, result_types)) or "nothing"
            raise OpDefError(f"{self.name} produces {', '.join(map(str, computed)) or 'nothing'},"
                             f" not {shown}")
        return full_attrs, computed


OPS: dict[str, OpDef] = {}


def register(name: str, group: OpGroup, operands: str = "", attrs: dict[str, Attr] | None = None,
             results=EXPLICIT, regions=(), check=None, terminator=False, yields_from=0,
             doc="", writes=False) -> OpDef:
    """Declare one op; ``operands`` is a space-separated list like ``"buf:memory *indices:int"``."""
    if name in OPS:
        raise ValueError(f"op {name!r} declared twice")
    specs = tuple(OperandSpec.parse(s) for s in operands.split())
    if any(s.variadic for s in specs[:-1]):
        raise ValueError(f"{name}: only the last operand may be variadic")
    opdef = OpDef(name, group, specs, dict(attrs or {}), results, tuple(regions), check,
                  terminator, yields_from, doc, writes)
    OPS[name] = opdef
    return opdef


def get_opdef(name: str) -> OpDef | None:
    return OPS.get(name)
