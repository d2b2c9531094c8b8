"""Pass ``nki-peel-ragged-tiles`` (before dispatch): a loop whose last iteration copies a
tile running past a tensor's end runs that iteration on its own, after the others.

NKI slices are static and a DMA writes whole slices, so a tile at a run-time start
(``x[r * 128:r * 128 + 128]``) cannot be cut where the tensor ends. Shapes and loop bounds
are compile-time here, though: for ``r in range(cdiv(R, 128))`` only the last ``r`` reaches
past row ``R``. Peeling it gives that iteration's regions static starts (the loop variable
becomes a number and the index arithmetic folds), which ``rules/copy.py`` cuts to static
slices like any tile at a static start: a load fills the rest of its tile first, a store
writes the valid rows only. The loop keeps the iterations that stay inside the tensor.

A tile past the end in an earlier iteration too (the tile is longer than the loop's step)
is refused at its line: peeling one iteration would not cut it.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.core import KernelIR, Operation, Value, walk
from tilejit.ir.rewrite import Rewriter, clone_ops
from tilejit.ir.types import MemScope

from .loops import affine_of

__all__ = ["peel_ragged_tiles"]

_FOLDED = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__}


def _number(value: Value) -> int | None:
    owner = value.owner
    if getattr(owner, "name", None) == "const" and isinstance(owner.attrs["value"], int):
        return owner.attrs["value"]
    return None


def _past_end(loop: Operation, trips: range) -> bool:
    """Whether some tensor region in ``loop``'s body runs past its tensor's end in the last
    of ``trips``; a CompilationError where it does so in another iteration as well (a start
    affine in the loop variable reaches furthest at an end of the others)."""
    body = loop.regions[0]
    iv, ops = body.args[0], list(walk(body))
    inside = {id(op) for op in ops}
    others = {trips[0], trips[-2]} if len(trips) > 1 else set()
    ragged = False
    for op in ops:
        if op.name != "region" or op.operands[0].type.scope is not MemScope.GLOBAL:
            continue
        extents = op.operands[0].type.shape
        for start, size, extent in zip(op.operands[1:], op.attrs["sizes"], extents):
            terms = affine_of(start, inside)
            if extent is None or terms is None or not terms.get(iv) \
                    or set(terms) - {iv, None}:
                continue   # a run-time size, or a start that does not move with iv alone

            def reach(v):
                return terms.get(iv, 0) * v + terms.get(None, 0) + size
            if any(reach(v) > extent for v in others):
                raise CompilationError(
                    f"a tile of {size} runs past the end ({extent}) of a tensor in more than "
                    "the last iteration of its loop: NKI slices are static, so only the last "
                    "iteration is cut short (step the loop by the tile's size)", op.loc)
            ragged = ragged or reach(trips[-1]) > extent
    return ragged


def _folded(op: Operation, operands: list[Value]) -> Operation | None:
    """``op`` as a constant where it is integer arithmetic on numbers (else None)."""
    numbers = [_number(v) for v in operands]
    if op.name == "binary" and op.attrs["op"] in _FOLDED and None not in numbers \
            and op.result_types[0].is_int:
        return Operation("const", (), {"value": _FOLDED[op.attrs["op"]](*numbers)},
                         op.result_types, (), op.loc)
    return None


def _peel(op: Operation, ctx) -> list[Operation] | None:
    bounds = [_number(v) for v in op.operands[:3]]
    if len(op.operands) > 3 or op.attrs["unroll"] or None in bounds:
        return None   # carried values, an unrolled loop, or run-time bounds
    trips = range(*bounds)
    if not trips or not _past_end(op, trips):
        return None
    body = op.regions[0]
    last = Operation("const", (), {"value": trips[-1]}, (body.args[0].type,), (), op.loc)
    peeled = clone_ops(body.ops, {body.args[0]: last.result}, _folded)[:-1]   # its yield dropped
    if len(trips) == 1:
        return [last, *peeled]
    loop = op.replace(operands=(op.operands[0], last.result, op.operands[2]))
    return [last, loop, *peeled]


def _check_run_time_starts(kernel: KernelIR) -> None:
    """A tile at a start known only at run time (not made static by peeling) in a tensor dim
    its size does not divide may run past the end, where NKI cannot cut it: a located
    CompilationError, unless loop bounds keep it inside the tensor. (Where the size divides
    the dim, a tile at a multiple of its size stays inside: the launch grid's contract.)"""
    ops = list(walk(kernel.body))
    inside = {id(op) for op in ops}
    trips = {op.regions[0].args[0]: range(*bounds) for op in ops if op.name == "for"
             and None not in (bounds := [_number(v) for v in op.operands[:3]])}
    for op in ops:
        if op.name != "region" or op.operands[0].type.scope is not MemScope.GLOBAL:
            continue
        for start, size, extent in zip(op.operands[1:], op.attrs["sizes"],
                                       op.operands[0].type.shape):
            if extent is None or _number(start) is not None or extent % size == 0:
                continue
            terms = affine_of(start, inside) or {start: 1}
            if all(t is None or trips.get(t) for t in terms):
                low = high = terms.get(None, 0)
                for term, coef in terms.items():
                    if term is not None:
                        ends = (coef * trips[term][0], coef * trips[term][-1])
                        low, high = low + min(ends), high + max(ends)
                if low >= 0 and high + size <= extent:
                    continue
            raise CompilationError(
                f"a tile of {size} at a start known only at run time may run past the end "
                f"({extent}) of a tensor, and NKI slices are static: tile with a loop over "
                f"tj.cdiv({extent}, {size}) (its last tile is cut short) or with a size that "
                f"divides {extent}", op.loc)


def peel_ragged_tiles(kernel: KernelIR) -> KernelIR:
    """The pass: the last iteration of a loop whose tiles run past a tensor's end, peeled;
    then no tile at a run-time start may reach past its tensor's end."""
    kernel = Rewriter([("for", _peel)], "nki-peel-ragged-tiles").sweep(kernel)
    _check_run_time_starts(kernel)
    return kernel
