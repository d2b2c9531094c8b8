"""Pass ``nki-independent-loops``: a sequential loop whose iterations share nothing is
marked ``independent`` (printed as ``nl.affine_range``, docs/nki.md "Loops").

The rules mark the loops they make over independent tiles; this pass looks at the others,
the kernel's own ``for r in range(...)`` among them. A loop's iterations share nothing when

- every on-chip tile an instruction in the loop writes is allocated inside the loop (NKI
  gives each iteration of ``nl.affine_range`` its own copy of such a tile); a tile
  allocated outside and written inside carries a value or a reuse from one iteration to
  the next, so the loop stays ``nl.sequential_range``; and
- every tensor the loop writes is written, in some dim, at a start ``c * iv + k`` that
  moves past everything one iteration writes there (``out[r * 128:r * 128 + 128]``):
  the writes of two iterations never meet. (A tensor the kernel writes is never one it
  reads: ``emit.py`` refuses that.)

Starts are read as affine functions of loop variables (``+``, ``-``, ``*`` by a number);
a value defined outside the loop is a symbol that every iteration sees alike. Anything
else keeps the loop sequential, which is always correct.
"""
from __future__ import annotations

from tilejit.ir.core import Block, KernelIR, Operation, Value, walk
from tilejit.ir.rewrite import Rewriter
from tilejit.ir.types import MemScope
from tilejit.passes.effects import root_buffer

__all__ = ["affine_of", "mark_independent_loops"]

Affine = dict   # term (a Value, or None for the constant) -> integer coefficient


def affine_of(value: Value, inside: set[int]) -> Affine | None:
    """``value`` as ``sum(coef * term)``: terms are loop variables and values from outside
    the loop (ids of the loop's ops in ``inside``); None where it is not affine."""
    owner = value.owner
    if isinstance(owner, Block) or id(owner) not in inside:
        return {value: 1}
    if owner.name == "const" and isinstance(owner.attrs["value"], int):
        return {None: owner.attrs["value"]}
    if owner.name == "cast" and owner.operands[0].type.is_int and owner.attrs["to"].is_int:
        return affine_of(owner.operands[0], inside)
    if owner.name != "binary" or owner.attrs["op"] not in ("add", "sub", "mul"):
        return None
    lhs, rhs = (affine_of(v, inside) for v in owner.operands)
    if lhs is None or rhs is None:
        return None
    if owner.attrs["op"] == "mul":
        number, other = (lhs, rhs) if set(lhs) <= {None} else (rhs, lhs)
        if not set(number) <= {None}:
            return None   # a product of two variables
        return {t: c * number.get(None, 0) for t, c in other.items()}
    sign = -1 if owner.attrs["op"] == "sub" else 1
    out = dict(lhs)
    for t, c in rhs.items():
        out[t] = out.get(t, 0) + sign * c
    return out


def _trips(loop: Operation) -> range | None:
    """The values of ``loop``'s variable, where its bounds are numbers."""
    bounds = [v.owner.attrs["value"] if getattr(v.owner, "name", None) == "const" else None
              for v in loop.operands[:3]]
    return None if None in bounds else range(*bounds)


def _span(start: Affine, size: int, iv: Value, inner: dict) -> tuple | None:
    """(iv's coefficient, the symbols, lowest and past-highest offsets from them) of the
    indices ``[start, start + size)`` over every value of the inner loops' variables."""
    lo = hi = start.get(None, 0)
    symbols = {}
    for term, coef in start.items():
        if term is None or term is iv or coef == 0:
            continue
        if term in inner:
            values = [coef * v for v in (inner[term][0], inner[term][-1])]
            lo, hi = lo + min(values), hi + max(values)
        else:
            symbols[term] = coef
    return start.get(iv, 0), frozenset(symbols.items()), lo, hi + size


def _independent(loop: Operation) -> bool:
    body = loop.regions[0]
    iv, ops = body.args[0], list(walk(body))
    inside = {id(op) for op in ops}
    trips = _trips(loop)
    inner = {op.regions[0].args[0]: _trips(op) for op in ops if op.name == "for"}
    if trips is None or any(not r for r in inner.values()):
        return False   # run-time bounds, or an inner loop that never runs
    writes: dict[Value, list] = {}   # tensor -> per write, per dim: its span
    for op in ops:
        if not op.name.startswith("nki."):
            continue
        dst = op.operands[0]
        root = root_buffer(dst)
        if root.type.scope is not MemScope.GLOBAL:
            if id(root.owner) not in inside:
                return False   # a tile from outside the loop, written in it
            continue
        region = dst.owner if getattr(dst.owner, "name", None) == "region" else None
        if region is None:
            return False       # the whole tensor, every iteration
        spans = []
        for start, size in zip(region.operands[1:], region.attrs["sizes"]):
            affine = affine_of(start, inside)
            spans.append(None if affine is None else _span(affine, size, iv, inner))
        writes.setdefault(root, []).append(spans)
    return all(_apart(spans, trips.step) for spans in writes.values())


def _apart(writes: list[list], step: int) -> bool:
    """Some dim where every write moves by the same ``c * step`` per iteration over the same
    symbols, and what one iteration writes there fits inside that move."""
    for dim in range(len(writes[0])):
        spans = [w[dim] for w in writes]
        if None in spans or len({(c, symbols) for c, symbols, _, _ in spans}) != 1:
            continue
        coef = spans[0][0]
        width = max(hi for *_, hi in spans) - min(lo for _, _, lo, _ in spans)
        if coef and abs(coef * step) >= width:
            return True
    return False


def mark_independent_loops(kernel: KernelIR) -> KernelIR:
    """The pass: sequential loops whose iterations share nothing become ``independent``."""
    def mark(op: Operation, ctx) -> Operation | None:
        if op.attrs["independent"] or op.attrs["unroll"] or len(op.operands) > 3 \
                or not _independent(op):
            return None
        return op.replace(attrs={"independent": True})
    return Rewriter([("for", mark)], "nki-independent-loops").sweep(kernel)
