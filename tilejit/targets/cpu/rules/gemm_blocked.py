"""``C (+)= op(A) @ op(B)`` on the CPU: family ``blocked``, a register-blocked micro-kernel.

Instruction shape ``(MR, NR, 1)``: an ``MR x NR`` block of C held in ``MR * NR / W``
vector accumulators (``W`` f32 lanes per register); each ``k`` step loads ``NR / W``
vectors of a B row, broadcasts ``MR`` elements of A's column and does one FMA per
accumulator (the CPU instruction ``cpu.gemm_block``, ``ops.py``). Blocks of C are
visited column panel by column panel (``j`` outer, ``i`` inner), so a ``K x NR`` panel of
B stays in L1 while A streams through; edge blocks of any size use a smaller ``MR`` and
masked vectors. ``config={"shape": (MR, NR, 1)}`` picks another legal block.

Legality contract (else ``Decline`` with the reasons; the ``fma`` fallback takes over):

* the target runs tile primitives once per team (``team_once``);
* C is f32 (the accumulators are f32 vectors) with a unit-stride innermost dim;
* A and B are f32, f16 or bf16 (narrow inputs are computed in f32);
* every operand has static sizes, lies in global, shared, fragment or local memory and
  cannot run past a tensor's end; C's logical dims each have a single stride (no swizzle).

Packing: B is read a row of ``NR`` at a time, so it is used in place when it is f32 with
unit-stride rows; otherwise (``transpose_b``, strided, swizzled or narrow B) it is first
converted into an f32 ``[K, N]`` scratch tile. A is broadcast one element at a time, so
any two strides (and ``transpose_a``) are used in place; a narrow A, or one whose layout
has no single stride per dim (a swizzle), is converted into an f32 ``[M, K]`` scratch
tile. The copies go through the operands' layouts element by element.
"""
from __future__ import annotations

from tilejit.ir.types import MemScope, bf16, f16, f32
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.distribution import Uniform
from tilejit.passes.loopgen import Box, Emitter
from tilejit.passes.rules.common import element_access_reasons, verdict

from .common import lanes, team_once_reasons, tile_strides

__all__ = ["BLOCKED_GEMM", "default_block"]

INPUT_DTYPES = (f32, f16, bf16)
_MAX_MR = 16
_MAX_VECTORS = 4
# The preferred blocks, MR rows x NV vectors, best first (measured on an AVX-512 Zen 4
# host, BENCHMARKS.md); the first that keeps MR * NV accumulators + NV B vectors + 1
# broadcast in the register file wins: 8 x 2 with 32 registers, 6 x 2 (the classic 6x16)
# with AVX2's 16.
_PREFERRED = ((8, 2), (6, 2), (4, 2), (8, 1))


def _mnk(call: PrimitiveCall) -> tuple[int, int, int]:
    (m, n), a = call["C"].shape, call["A"].shape
    return m, n, a[0] if call.attrs["transpose_a"] else a[1]


def _fits(mr: int, nv: int, registers: int) -> bool:
    return mr * nv + nv + 1 <= registers


def default_block(registers: int) -> tuple[int, int]:
    """(MR, vectors per row) of the preferred block that fits ``registers``."""
    return next(((mr, nv) for mr, nv in _PREFERRED if _fits(mr, nv, registers)), (1, 1))


def _shapes(call: PrimitiveCall, m: int, n: int) -> list[tuple[int, int, int]]:
    """Every block that fits the register file, the preferred one (narrowed to the tile)
    first, then the others by size."""
    w, registers = lanes(call), call.context.registers
    mr0, nv0 = default_block(registers)
    nv0 = max(1, min(nv0, -(-n // w)))
    mr0 = min(mr0, m)
    legal = [(mr, nv * w, 1) for mr in range(1, _MAX_MR + 1)
             for nv in range(1, _MAX_VECTORS + 1) if _fits(mr, nv, registers)]
    legal.sort(key=lambda s: (s[0] * s[1], s[1]), reverse=True)
    first = (mr0, nv0 * w, 1)
    return [first] + [s for s in legal if s != first]


def _packs(call: PrimitiveCall) -> tuple[bool, bool]:
    """(A needs an f32 copy, B needs an f32 [K, N] copy): the micro-kernel reads A one
    element at a time through its two strides and B a row of NR at a time."""
    a, b = call["A"], call["B"]
    a_strides, _ = tile_strides(a)
    b_strides, _ = tile_strides(b)
    b_rows_ok = b_strides is not None and not call.attrs["transpose_b"] and (
        b_strides[-1] == 1 or b.shape[-1] == 1)
    return a.dtype != f32 or a_strides is None, b.dtype != f32 or not b_rows_ok


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = element_access_reasons(call, allow_oob=False) + team_once_reasons(call)
    c, a, b = call["C"], call["A"], call["B"]
    if c.dtype != f32:
        reasons.append(f"C is {c.dtype}: the micro-kernel accumulates in f32 vectors")
    for o in (a, b):
        if o.dtype not in INPUT_DTYPES:
            reasons.append(f"{o.name} is {o.dtype}: the micro-kernel reads f32, f16 or bf16")
    if c.role in (MemScope.GLOBAL, MemScope.SHARED, MemScope.FRAGMENT, MemScope.LOCAL):
        strides, why = tile_strides(c)
        if why:
            reasons.append(f"{why}: C's accumulators are loaded and stored as vectors")
        elif strides[-1] != 1 and c.shape[-1] > 1:
            reasons.append(f"C's rows are not contiguous (innermost stride {strides[-1]}): "
                           "the accumulators are stored as vectors")
    if reasons:
        return Decline(*reasons)
    m, n, k = _mnk(call)
    pack_a, pack_b = _packs(call)
    return verdict([], _shapes(call, m, n), distribution=Uniform(), lanes=lanes(call),
                   pack_a=pack_a, pack_b=pack_b)


# --------------------------------------------------------------------------- lowering
def _pack(em: Emitter, operand, rows: int, cols: int, transposed: bool):
    """An f32 fragment ``[rows, cols]`` holding ``op(operand)`` (hoisted allocation)."""
    scratch = em.once(("pack", operand.name),
                      lambda: em.b.alloc(MemScope.FRAGMENT, f32, (rows, cols)))

    def row(i):
        def element(j):
            value = em.load(operand, [j, i] if transposed else [i, j])
            em.b.store(scratch, value if value.type == f32 else em.b.cast(value, f32),
                       [em.index(i), em.index(j)])
        em.loop(0, cols, 1, element)
    em.loop(0, rows, 1, row)
    return scratch


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    m, n, k = _mnk(call)
    if m == 0 or n == 0:
        return
    mr, nr, _ = plan.shape
    w = plan.details["lanes"]
    ta = call.attrs["transpose_a"]
    a_value, b_value = call["A"].value, call["B"].value
    if plan.details["pack_a"]:
        a_value, ta = _pack(em, call["A"], m, k, ta), False
    if plan.details["pack_b"]:
        b_value = _pack(em, call["B"], k, n, call.attrs["transpose_b"])
    c_value = call["C"].value
    attrs = {"k": k, "lanes": w, "transpose_a": bool(ta), "accum": bool(call.attrs["accum"])}

    def block(rows: int, cols: int):
        def body(base):
            j0, i0 = base
            em.b.create("cpu.gemm_block", [c_value, a_value, b_value, em.index(i0),
                                           em.index(j0)], {"mr": rows, "nr": cols, **attrs})
        return body

    # Dims (j, i): column panels outside, row blocks inside; edges as their own boxes.
    mf, nf = m - m % mr, n - n % nr
    items = [(Box((0, 0), (nf, mf), (nr, mr)), block(mr, nr)),
             (Box((0, mf), (nf, m), (nr, m - mf or 1)), block(m - mf, nr)),
             (Box((nf, 0), (n, mf), (n - nf or 1, mr)), block(mr, n - nf)),
             (Box((nf, mf), (n, m), (n - nf or 1, m - mf or 1)), block(m - mf, n - nf))]
    em.each(items)


BLOCKED_GEMM = register(Rule(
    "blocked", "gemm", check, lower, targets=("cpu",), priority=10,
    doc="register-blocked f32 micro-kernel: MR x NR accumulators in vector registers"))
