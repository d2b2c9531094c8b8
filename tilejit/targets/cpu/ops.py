"""The CPU instructions as typed IR ops (``cpu.*``), declared in the one op catalogue.

The native IR has scalar values only. What it cannot say -- whole vectors kept in
registers across a loop (a GEMM micro-kernel's accumulators, a row reduction's partial
sums), a store past the caches, a float's bits -- the CPU target's dispatch rules
(``rules/``) build as these ops, and ``emit_vector`` writes each with LLVM vector types.
Their compile-time parameters are typed attributes, so the verifier checks here what
each instruction needs and the emitter reads them as they are:

* ``cpu.bitcast(x) {to}`` -- the bits of ``x`` reinterpreted as ``to`` (same width);
* ``cpu.ldexp(x, n) : f32`` -- ``x * 2^n`` for an f32 ``x`` and an i32 ``n`` in
  [-252, 254], rounded once (``vscalefps`` on AVX-512, two exact power-of-two factors
  elsewhere); scalar code that LLVM's vectorizers take;
* ``cpu.store_streaming(buf, value, *indices)`` -- a ``store`` marked non-temporal: it
  bypasses the caches (``run_ctas`` then fences before it returns);
* ``cpu.gemm_block(C, A, B, i0, j0) {mr, nr, k, lanes, transpose_a, accum}`` -- the
  register-blocked micro-kernel of ``rules/gemm_blocked.py``:
  ``C[i0:i0+mr, j0:j0+nr] (+)= op(A)[i0:i0+mr, :k] @ B[:k, j0:j0+nr]`` in f32 with
  ``mr * ceil(nr / lanes)`` vector accumulators; every ``k`` step loads
  ``ceil(nr / lanes)`` vectors of a B row, broadcasts ``mr`` elements of A and does one
  FMA per accumulator. The last vector of a row is masked when ``lanes`` does not divide
  ``nr``;
* ``cpu.row_reduce(src, *start, *sources) {op, length, lanes, steps} : f32`` --
  ``sum``/``max``/``min`` of ``length`` consecutive elements of ``src`` from ``start``
  (one index per dim) along its innermost dim, in ``lanes``-wide vector accumulators, a
  masked tail and a shuffle tree; max/min return NaN when any element is NaN. With
  ``steps`` the reduced elements are a fused chain (``tile.reduce``'s ``steps``: value 0
  is src's row, value ``i`` the i-th further source) computed on the vectors; each
  further source is a tile followed by the start indices of its row, or a scalar that
  stays the same along the row (:func:`row_reduce_operands`).

The emitter addresses tiles through their strides: the rules pass only tiles whose
logical dims each have one stride (and a unit stride where a vector is read).
"""
from __future__ import annotations

from tilejit.ir.attrs import BOOL, INT, SCALAR_TYPE, Attr, Choice, Optional, Steps
from tilejit.ir.opdef import OpGroup, register
from tilejit.ir.ops_native import fixed, index_check
from tilejit.ir.ops_tile import check_steps
from tilejit.ir.types import ScalarType, f32, i1, i32
from tilejit.passes.fusion import ARITHMETIC

__all__ = ["CHAIN_OPS", "REDUCE_OPS", "row_reduce_operands"]

REDUCE_OPS = ("sum", "max", "min")
# The chain steps cpu.row_reduce computes on vectors: what fusion gives a reduce (f32
# values; a select's condition a bool source)
CHAIN_OPS = ARITHMETIC


def _is_int(value) -> bool:
    return isinstance(value.type, ScalarType) and value.type.is_int


def _lanes_problem(op) -> str | None:
    lanes = op.attrs["lanes"]
    if lanes < 1 or lanes & (lanes - 1):
        return f"{op.name}: lanes must be a power of two, not {lanes}"
    return None


def _check_bitcast(op):
    source, target = op.operands[0].type, op.attrs["to"]
    if source.bits != target.bits or source.is_bool or target.is_bool:
        return f"cpu.bitcast needs two types of one width (not bool), got {source} and {target}"
    return None


def _check_ldexp(op):
    x, n = (value.type for value in op.operands)
    return None if (x, n) == (f32, i32) else f"cpu.ldexp takes an f32 and an i32, got {x} and {n}"


def _check_gemm_block(op):
    c, a, b = (value.type for value in op.operands[:3])
    attrs = op.attrs
    for name, t in zip("CAB", (c, a, b)):
        if t.rank != 2 or t.dtype != f32:
            return f"cpu.gemm_block reads rank-2 f32 tiles, {name} is {t}"
    mr, nr, k = attrs["mr"], attrs["nr"], attrs["k"]
    if mr < 1 or nr < 1 or k < 0:
        return f"cpu.gemm_block needs mr, nr >= 1 and k >= 0, got {mr}, {nr}, {k}"
    a_rows, a_cols = a.shape[::-1] if attrs["transpose_a"] else a.shape
    for what, needed, extent in (("rows of C", mr, c.shape[0]), ("columns of C", nr, c.shape[1]),
                                 ("rows of op(A)", mr, a_rows), ("columns of op(A)", k, a_cols),
                                 ("rows of B", k, b.shape[0]), ("columns of B", nr, b.shape[1])):
        if extent is not None and needed > extent:
            return f"cpu.gemm_block's {mr} x {nr} x {k} block needs {needed} {what}, " \
                   f"which has {extent}"
    return _lanes_problem(op)


def row_reduce_operands(op) -> tuple[tuple, list[tuple]]:
    """``cpu.row_reduce``'s start indices of src, and its further sources in order: each
    ``(tile, start indices of its row)`` or ``(scalar, ())``."""
    src, *rest = op.operands
    start, rest = tuple(rest[:src.type.rank]), rest[src.type.rank:]
    sources = []
    while rest:
        value, rest = rest[0], rest[1:]
        count = 0 if isinstance(value.type, ScalarType) else value.type.rank
        sources.append((value, tuple(rest[:count])))
        rest = rest[count:]
    return start, sources


def _check_row_reduce(op):
    src, steps = op.operands[0], op.attrs["steps"]
    if src.type.rank == 0 or src.type.dtype != f32:
        return f"cpu.row_reduce reduces the rows of an f32 tile, not of {src.type}"
    extent = src.type.shape[-1]
    if op.attrs["length"] < 0 or (extent is not None and op.attrs["length"] > extent):
        return f"cpu.row_reduce: a row of {op.attrs['length']} elements does not fit src's " \
               f"innermost extent {extent}"
    start, sources = row_reduce_operands(op)
    rows = [(src, start)] + [(value, indices) for value, indices in sources
                             if not isinstance(value.type, ScalarType)]
    for value, indices in rows:
        if len(indices) != value.type.rank or not all(map(_is_int, indices)):
            return f"cpu.row_reduce needs {value.type.rank} integer start indices of a " \
                   f"rank-{value.type.rank} tile, got {len(indices)}"
    if steps is None:
        return "cpu.row_reduce reads more than src only through steps" if sources else \
            _lanes_problem(op)
    conditions = {args[0] for name, _, *args in steps if name == "select"}
    for number, (value, _) in enumerate(sources, start=1):
        dtype = getattr(value.type, "dtype", value.type)
        wanted = i1 if number in conditions else f32
        if dtype != wanted:
            return f"cpu.row_reduce: source {number} is {dtype}, its chain reads {wanted}"
    if conditions - set(range(1, len(sources) + 1)):
        return "cpu.row_reduce: a select's condition is not a bool source of the chain"
    if any(dtype != f32 for _, dtype, *_ in steps):
        return "cpu.row_reduce computes its chain in f32"
    return check_steps(steps, 1 + len(sources), f32) or _lanes_problem(op)


NATIVE, MEMORY = OpGroup.NATIVE, OpGroup.MEMORY
register("cpu.bitcast", NATIVE, "x:scalar", {"to": Attr(SCALAR_TYPE)},
         lambda types, attrs: (attrs["to"],), check=_check_bitcast,
         doc="the bits of x as a value of type to (of x's width)")
register("cpu.ldexp", NATIVE, "x:scalar n:int", results=fixed(f32), check=_check_ldexp,
         doc="x * 2^n for an f32 x and an i32 n in [-252, 254], rounded once")
register("cpu.store_streaming", MEMORY, "buf:memory value:scalar *indices:int",
         results=fixed(), check=index_check(2), writes=True,
         doc="store marked non-temporal: it bypasses the caches (outputs not read again soon)")
register("cpu.gemm_block", MEMORY, "C:memory A:memory B:memory i0:int j0:int",
         {"mr": Attr(INT), "nr": Attr(INT), "k": Attr(INT), "lanes": Attr(INT),
          "transpose_a": Attr(BOOL), "accum": Attr(BOOL)}, fixed(), check=_check_gemm_block,
         writes=True,
         doc="C[i0:i0+mr, j0:j0+nr] (+)= op(A)[i0:i0+mr, :k] @ B[:k, j0:j0+nr] in f32 vector "
             "accumulators of lanes elements")
register("cpu.row_reduce", MEMORY, "src:memory *operands",
         {"op": Attr(Choice(*REDUCE_OPS)), "length": Attr(INT), "lanes": Attr(INT),
          "steps": Attr(Optional(Steps(*CHAIN_OPS)), None)}, fixed(f32),
         check=_check_row_reduce,
         doc="op over length elements of src from start along its innermost dim (or over a "
             "fused chain of them, steps) in vector accumulators of lanes elements")
