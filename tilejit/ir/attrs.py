"""Attribute kinds: the one place where attribute values are checked, printed and read.

Each :class:`AttrKind` has three methods:

* ``check(value)`` returns the normalized value (lists become tuples, enum names become
  members, ints become floats for float attrs) or raises :class:`AttrError`;
* ``encode(value)`` returns the textual form;
* ``decode(literal)`` turns a parsed *literal* back into a value. Literals are what
  ``tilejit.ir.parser`` reads generically: int, float, bool, None (``none``), str (quoted),
  :class:`Ident` (a bare word), list (``[...]``) and dict (``{k = v, ...}``).

Layouts print as a quoted ``str(layout)``; exec scopes as a quoted ``str(scope)``.
"""
from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass

from .types import SCALAR_TYPES, ScalarType

__all__ = [
    "AttrError", "Ident", "AttrKind", "Attr", "REQUIRED", "FilterSpec", "FILTER_AXES",
    "INT", "FLOAT", "NUMBER", "SCALAR", "BOOL", "STR", "SCALAR_TYPE", "LAYOUT", "CONFIG",
    "FILTER", "EXEC_SCOPE", "Optional", "Tuple", "Enum", "Choice", "Steps",
    "encode_literal", "decode_layout", "check_attrs", "KERNEL_ATTRS",
]

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class AttrError(ValueError):
    """An attribute value of the wrong kind (wrapped into a located CompilationError)."""


class Ident(str):
    """A bare word in attribute text (an enum member or type name), as opposed to a string."""


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)  # always has '.', 'e', so it reads back as a float


def encode_literal(value) -> str:
    """Print a plain Python value (int/float/bool/None/str/ScalarType/tuple/dict)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (Ident, ScalarType, enum.Enum)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(encode_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{k if _IDENT_RE.match(k) else json.dumps(k)} = {encode_literal(v)}"
                 for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise AttrError(f"cannot print {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class AttrKind:
    """Base class: subclasses override ``check`` and, when needed, ``decode``/``encode``."""

    name = "attribute"

    def check(self, value):
        raise NotImplementedError

    def encode(self, value) -> str:
        return encode_literal(value)

    def decode(self, literal):
        return self.check(literal)

    def _fail(self, value):
        raise AttrError(f"expected {self.name}, got {value!r}")

    def __repr__(self) -> str:
        return self.name


class _Int(AttrKind):
    name = "int"

    def check(self, value):
        return value if _is_int(value) else self._fail(value)


class _Float(AttrKind):
    name = "float"

    def check(self, value):
        return float(value) if _is_int(value) or isinstance(value, float) else self._fail(value)


class _Number(AttrKind):
    name = "number"

    def check(self, value):
        return value if _is_int(value) or isinstance(value, float) else self._fail(value)


class _Scalar(AttrKind):
    name = "number or bool"

    def check(self, value):
        return value if isinstance(value, (int, float)) else self._fail(value)


class _Bool(AttrKind):
    name = "bool"

    def check(self, value):
        return value if isinstance(value, bool) else self._fail(value)


class _Str(AttrKind):
    name = "str"

    def check(self, value):
        return str(value) if isinstance(value, str) and not isinstance(value, Ident) else self._fail(value)


class _ScalarTypeKind(AttrKind):
    name = "scalar type"

    def check(self, value):
        if isinstance(value, str) and value in SCALAR_TYPES:
            return SCALAR_TYPES[value]
        return value if isinstance(value, ScalarType) else self._fail(value)


class Optional(AttrKind):
    """``kind`` or None (printed ``none``)."""

    def __init__(self, kind: AttrKind):
        self.kind = kind
        self.name = f"optional {kind.name}"

    def check(self, value):
        return None if value is None else self.kind.check(value)

    def encode(self, value) -> str:
        return "none" if value is None else self.kind.encode(value)

    def decode(self, literal):
        return None if literal is None else self.kind.decode(literal)


class Tuple(AttrKind):
    """A tuple of ``elem`` values, printed ``[a, b]``."""

    def __init__(self, elem: AttrKind):
        self.elem = elem
        self.name = f"tuple of {elem.name}"

    def check(self, value):
        if not isinstance(value, (tuple, list)):
            self._fail(value)
        return tuple(self.elem.check(v) for v in value)

    def decode(self, literal):
        if not isinstance(literal, list):
            self._fail(literal)
        return tuple(self.elem.decode(v) for v in literal)


class Enum(AttrKind):
    """A member of a Python enum (MemScope, TeamKind); accepts the lower-case name too."""

    def __init__(self, cls):
        self.cls = cls
        self.name = cls.__name__

    def check(self, value):
        if isinstance(value, self.cls):
            return value
        if isinstance(value, str):
            try:
                return self.cls.parse(value)
            except ValueError as err:
                raise AttrError(str(err)) from None
        self._fail(value)


class Choice(AttrKind):
    """One of a fixed set of words (binary ``op``, cmp ``pred``...), printed bare."""

    def __init__(self, *choices: str):
        self.choices = choices
        self.name = "one of " + " ".join(choices)

    def check(self, value):
        return str(value) if isinstance(value, str) and value in self.choices else self._fail(value)

    def encode(self, value) -> str:
        return value


class Steps(AttrKind):
    """A straight-line program over numbered values, printed ``[[sub, f32, 0, 1], ...]``.

    Each step is ``(op, dtype, *args)``: ``op`` one of ``choices``, computed in ``dtype``
    from the values its ``args`` number. Values ``0 .. n-1`` are the op's ``n`` sources;
    step ``k`` defines value ``n + k``. What the program means (which sources, what its
    last value is) is the owning op's business: its ``check`` verifies the numbering."""

    def __init__(self, *choices: str):
        self.choices = choices
        self.name = "steps [op, dtype, args...]"

    def check(self, value):
        if not isinstance(value, (tuple, list)) or not value:
            self._fail(value)
        return tuple(self._step(step) for step in value)

    def _step(self, step):
        if not isinstance(step, (tuple, list)) or len(step) < 2:
            self._fail(step)
        op, dtype, *args = step
        if not isinstance(op, str) or op not in self.choices:
            raise AttrError(f"step op must be one of {' '.join(self.choices)}, got {op!r}")
        dtype = SCALAR_TYPE.check(dtype)
        if not all(_is_int(a) and a >= 0 for a in args):
            raise AttrError(f"step args are value numbers (ints >= 0), got {args!r}")
        return (str(op), dtype, *args)

    def encode(self, value) -> str:
        return "[" + ", ".join("[" + ", ".join(map(str, step)) + "]" for step in value) + "]"


def _layout_classes():
    from tilejit.layout import ComposeLayout, TileLayout  # lazy: layout is a sibling package
    return TileLayout, ComposeLayout


def decode_layout(text: str):
    """Read back ``str(layout)`` for a TileLayout or a ComposeLayout."""
    errors = []
    for cls in _layout_classes():
        try:
            layout = cls.parse(text)
        except Exception as err:  # the layout parsers raise LayoutError; anything else is a miss too
            errors.append(f"{cls.__name__}: {err}")
            continue
        if str(layout) == text:
            return layout
    raise AttrError(f"not a layout: {text!r} ({'; '.join(errors)})")


class _Layout(AttrKind):
    name = "layout (TileLayout or ComposeLayout)"

    def check(self, value):
        return value if isinstance(value, _layout_classes()) else self._fail(value)

    def encode(self, value) -> str:
        return json.dumps(str(value))

    def decode(self, literal):
        if not isinstance(literal, str) or isinstance(literal, Ident):
            self._fail(literal)
        return decode_layout(literal)


def _check_config_value(value):
    if value is None or isinstance(value, (int, float, ScalarType)):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (tuple, list)):
        return tuple(_check_config_value(v) for v in value)
    raise AttrError(f"config values are int/float/bool/str/dtype/tuple, got {value!r}")


def _decode_config_value(literal):
    if isinstance(literal, Ident):
        if literal not in SCALAR_TYPES:
            raise AttrError(f"unknown word {literal!r} in a config value (strings are quoted)")
        return SCALAR_TYPES[literal]
    if isinstance(literal, list):
        return tuple(_decode_config_value(v) for v in literal)
    if isinstance(literal, dict):
        raise AttrError("config values cannot be dicts")
    return literal


class _Config(AttrKind):
    """A dict of str -> int/float/bool/str/dtype/None/(nested) tuple; order is kept."""

    name = "config dict"

    def check(self, value):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self._fail(value)
        return {str(k): _check_config_value(v) for k, v in value.items()}

    def decode(self, literal):
        if not isinstance(literal, dict):
            self._fail(literal)
        return {k: _decode_config_value(v) for k, v in literal.items()}


FILTER_AXES = ("lane", "warp", "warp_in_wg", "warpgroup", "thread", "cta", "elect")


@dataclass(frozen=True)
class FilterSpec:
    """The thread range ``[lo, hi)`` on ``axis`` that an ``if``'s then-branch keeps.

    ``axis == "elect"`` (one elected lane per warp) has no range.
    """

    axis: str
    lo: int | None = None
    hi: int | None = None

    def __post_init__(self):
        if self.axis not in FILTER_AXES:
            raise AttrError(f"filter axis must be one of {' '.join(FILTER_AXES)}, got {self.axis!r}")
        if self.axis == "elect":
            if self.lo is not None or self.hi is not None:
                raise AttrError("an elect filter has no range")
        elif not (_is_int(self.lo) and _is_int(self.hi) and 0 <= self.lo < self.hi):
            raise AttrError(f"filter range [{self.lo}, {self.hi}) on {self.axis} is empty or not static")

    def __str__(self) -> str:
        if self.axis == "elect":
            return "{axis = elect}"
        return f"{{axis = {self.axis}, lo = {self.lo}, hi = {self.hi}}}"


class _Filter(AttrKind):
    name = "filter spec"

    def check(self, value):
        return value if isinstance(value, FilterSpec) else self._fail(value)

    def encode(self, value) -> str:
        return str(value)

    def decode(self, literal):
        if not isinstance(literal, dict) or set(literal) - {"axis", "lo", "hi"}:
            self._fail(literal)
        return FilterSpec(str(literal.get("axis")), literal.get("lo"), literal.get("hi"))


def _exec_scope_class():
    from .scope import ExecScope  # lazy: scope.py builds on this package
    return ExecScope


class _ExecScope(AttrKind):
    name = "exec scope"

    def check(self, value):
        return value if isinstance(value, _exec_scope_class()) else self._fail(value)

    def encode(self, value) -> str:
        return json.dumps(str(value))

    def decode(self, literal):
        if not isinstance(literal, str) or isinstance(literal, Ident):
            self._fail(literal)
        try:
            return _exec_scope_class().parse(literal)
        except AttrError:
            raise
        except Exception as err:
            raise AttrError(f"not an exec scope: {literal!r} ({err})") from None


INT = _Int()
FLOAT = _Float()
NUMBER = _Number()
SCALAR = _Scalar()
BOOL = _Bool()
STR = _Str()
SCALAR_TYPE = _ScalarTypeKind()
LAYOUT = _Layout()
CONFIG = _Config()
FILTER = _Filter()
EXEC_SCOPE = _ExecScope()

REQUIRED = object()  # marker: the attribute has no default


@dataclass(frozen=True)
class Attr:
    """An attribute declaration: its kind and default (``REQUIRED`` when it has none)."""

    kind: AttrKind
    default: object = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


# Kernel-level attributes (printed on the `kernel` line).
KERNEL_ATTRS: dict[str, Attr] = {
    "num_warps": Attr(INT, 4),
    "cluster": Attr(Tuple(INT), (1, 1, 1)),
    "target": Attr(Optional(STR), None),
    "arch": Attr(Optional(STR), None),
    # how tile primitives spread over a team's threads, when not the target's own mode
    # ("per_thread" on the CPU: TILEJIT_SIMT, simt=True)
    "distribution": Attr(Optional(STR), None),
    "constexprs": Attr(CONFIG, {}),
    "specialization": Attr(CONFIG, {}),  # param name -> tuple of flags ("aligned16", ...)
    "shared_bytes": Attr(Optional(INT), None),  # planned shared memory per CTA (bytes)
    "auto_sync": Attr(BOOL, True),  # sync-hazards inserts missing barriers (else: errors)
}


def check_attrs(decls: dict[str, Attr], given: dict, what: str) -> dict:
    """Validate ``given`` against ``decls``; return all attributes, defaults filled in.

    Raises AttrError naming the offending attribute.
    """
    unknown = [name for name in given if name not in decls]
    if unknown:
        raise AttrError(f"{what} has no attribute {unknown[0]!r} "
                        f"(it has: {', '.join(decls) or 'none'})")
    out = {}
    for name, decl in decls.items():
        if name not in given:
            if decl.required:
                raise AttrError(f"{what} needs attribute {name!r} ({decl.kind.name})")
            value = decl.default
            out[name] = dict(value) if isinstance(value, dict) else value
            continue
        try:
            out[name] = decl.kind.check(given[name])
        except AttrError as err:
            raise AttrError(f"attribute {name!r} of {what}: {err}") from None
    return out
