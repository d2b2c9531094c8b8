"""Named physical axes and the ``n @ axis`` stride notation.

A layout maps a logical index to coordinates on *named* axes: ``1@laneid`` and ``1@TLane``
are different places even though the numbers match. An :class:`Axis` is interned by name,
so ``Axis("laneid") is laneid`` and identity comparison is safe everywhere.
"""
from __future__ import annotations

import enum
import numbers
import re
from dataclasses import dataclass

from ..errors import LayoutError

__all__ = [
    "Axis", "AxisKind", "AxisValue", "as_axis", "as_int",
    "m", "laneid", "warpid", "wid_in_wg", "tid_in_wg", "wgid", "tx", "bx", "by", "bz",
    "cbx", "cby", "cbz", "TLane", "TCol", "P", "F", "Bank", "pid",
]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class AxisKind(enum.Enum):
    """What an axis indexes: a memory, a thread team, or a device in a mesh."""

    MEMORY = "memory"
    THREAD = "thread"
    DEVICE = "device"


class Axis:
    """A named physical axis. ``Axis(name)`` returns the one axis with that name.

    Thread axes carry the team they live in (``scope``) and the team they count
    (``subscope``): ``laneid`` counts threads inside a warp, ``warpid`` warps inside a CTA.
    Names not known in advance become memory axes, the kind with no hidden structure.
    """

    _registry: dict[str, "Axis"] = {}
    __slots__ = ("name", "kind", "scope", "subscope")

    def __new__(cls, name: str, kind: AxisKind | None = None,
                scope: str | None = None, subscope: str | None = None) -> "Axis":
        if isinstance(name, Axis):
            return name
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise LayoutError(f"axis name must be an identifier, got {name!r}")
        existing = cls._registry.get(name)
        if existing is not None:
            if kind is not None and kind != existing.kind:
                raise LayoutError(f"axis {name!r} already exists as a {existing.kind.value} "
                                  f"axis; it cannot be redefined as {kind.value}")
            return existing
        axis = super().__new__(cls)
        object.__setattr__(axis, "name", name)
        object.__setattr__(axis, "kind", kind if kind is not None else AxisKind.MEMORY)
        object.__setattr__(axis, "scope", scope)
        object.__setattr__(axis, "subscope", subscope)
        cls._registry[name] = axis
        return axis

    def __setattr__(self, key, value):
        raise AttributeError("Axis objects are immutable")

    def __reduce__(self):
        # Unpickling goes through Axis(name) so the copy is the interned axis.
        return (Axis, (self.name,))

    def __repr__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash(("Axis", self.name))

    def __lt__(self, other: "Axis") -> bool:
        return self.name < other.name

    def __rmatmul__(self, value) -> "AxisValue":
        return AxisValue(as_int(value, "a stride or offset"), self)

    def __matmul__(self, other):
        raise LayoutError(f"write the number first: `n @ {self.name}`, not `{self.name} @ n`")


@dataclass(frozen=True)
class AxisValue:
    """``value @ axis``: a stride or an offset on one named axis."""

    value: int
    axis: Axis

    def __str__(self) -> str:
        return f"{self.value}@{self.axis.name}"

    __repr__ = __str__

    def __neg__(self) -> "AxisValue":
        return AxisValue(-self.value, self.axis)

    # `S[...] + 5@warpid` and `5@warpid + S[...]` build layout expressions; the
    # builder lives in syntax.py, which registers itself here to avoid an import cycle.
    def __add__(self, other):
        return _layout_expr_of(self) + other

    def __radd__(self, other):
        # Only reached for `k + n@axis` with a plain int k (an offset on m).
        return _layout_expr_of(AxisValue(as_int(other, "an offset"), m)) + self

    def __sub__(self, other):
        return _layout_expr_of(self) - other


def _layout_expr_of(value: AxisValue):
    from .syntax import LayoutExpr  # the builder module imports this one
    return LayoutExpr(offset=((value.axis, value.value),))


def as_int(value, what: str) -> int:
    """``value`` as a Python int, or a LayoutError naming ``what`` was malformed."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LayoutError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def as_axis(axis) -> Axis:
    """Accept an Axis or an axis name."""
    if isinstance(axis, Axis):
        return axis
    if isinstance(axis, str):
        return Axis(axis)
    raise LayoutError(f"expected an axis or an axis name, got {axis!r}")


def _thread(name: str, scope: str, subscope: str) -> Axis:
    return Axis(name, AxisKind.THREAD, scope, subscope)


# Memory-like coordinate spaces: linear memory, Trainium SBUF partition/free, shared-memory
# banks, Blackwell tensor-memory lanes and columns.
m = Axis("m", AxisKind.MEMORY)
P = Axis("P", AxisKind.MEMORY)
F = Axis("F", AxisKind.MEMORY)
Bank = Axis("Bank", AxisKind.MEMORY)
TLane = Axis("TLane", AxisKind.MEMORY)
TCol = Axis("TCol", AxisKind.MEMORY)

# Thread coordinates: (team the axis lives in, team it counts).
laneid = _thread("laneid", "warp", "thread")
warpid = _thread("warpid", "cta", "warp")
wid_in_wg = _thread("wid_in_wg", "warpgroup", "warp")
tid_in_wg = _thread("tid_in_wg", "warpgroup", "thread")
wgid = _thread("wgid", "cta", "warpgroup")
tx = _thread("tx", "cta", "thread")
bx = _thread("bx", "grid", "cta")
by = _thread("by", "grid", "cta")
bz = _thread("bz", "grid", "cta")
cbx = _thread("cbx", "cluster", "cta")
cby = _thread("cby", "cluster", "cta")
cbz = _thread("cbz", "cluster", "cta")

# A device in a distributed mesh.
pid = Axis("pid", AxisKind.DEVICE)
