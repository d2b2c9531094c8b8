"""``exp``, ``exp2`` and ``log`` pointwise on the CPU: family ``poly``.

LLVM turns ``llvm.exp.f32`` and friends into calls of the scalar libm functions, which
keeps a loop of them from vectorizing. This family writes each function as native
arithmetic that the SLP vectorizer turns into vector code -- range reduction and a
polynomial, with the exponent built or read through the CPU instruction ``cpu.bitcast``:

* ``exp(x) = 2^n * e^r`` with ``n = round(x / ln 2)`` and ``r = x - n ln 2`` (``ln 2`` in
  two parts, Cody and Waite), ``|r| <= ln(2)/2``; ``e^r`` is its Taylor polynomial of
  degree 7 (truncation error below 1e-8 relative). ``n`` is rounded by adding
  ``1.5 * 2^23`` (the integer then sits in the low bits of the sum), and ``2^n`` is applied
  by the CPU instruction ``cpu.ldexp``, which rounds once, so results in the subnormal
  range and overflow to infinity come out like libm's. ``exp2(x)`` uses ``n = round(x)``,
  ``r = (x - n) ln 2``.
* ``log(x) = e ln 2 + log(m)`` with ``x = m 2^e``, ``m`` in ``[sqrt(1/2), sqrt(2))``
  (subnormal inputs scaled by ``2^23`` first); with ``f = m - 1`` (exact) and
  ``s = f / (2 + f)``, ``|s| < 0.172``, ``log(m) = 2 atanh(s) = f - s (f - R)`` where
  ``R = 2 s^2 / 3 + 2 s^4 / 5 + ... + 2 s^10 / 11``: the exact ``f`` leads and only the
  small correction carries rounding error (the arrangement of fdlibm's log).
* Special values follow IEEE/libm: ``exp(-inf) = 0``, ``exp(inf) = inf``, ``log(0) = -inf``,
  ``log(x < 0) = nan``, ``log(inf) = inf``; NaN stays NaN. Measured errors are below
  1 ulp of the correctly rounded result over the f32 range (exp 0.84, exp2 0.89, log
  0.76; the tests allow 2).

The element loops are the generic ``vector`` family's (``passes/rules/elementwise``):
the same legality (chunks of ``W`` contiguous elements, the last ``extent % W`` elements
of each row one shorter chunk), masking and fusion; this module replaces the per-element
computation.

Legality contract (else ``Decline``; ``vector``/``scalar`` take over with libm calls):
the ``vector`` family's contract, the op is ``exp``, ``exp2`` or ``log`` (or a fused chain
holds one) computed in f32 (sources are converted to f32 first), at most one operand in
global memory (between tensors the ``stream`` family runs the same polynomials), and the
target runs tile primitives once per team (``team_once``).
"""
from __future__ import annotations

import math

from tilejit.ir.ops_tile import FUSED
from tilejit.ir.types import MemScope, f32, i32
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter
from tilejit.passes.rules import elementwise

from .common import team_once_reasons

__all__ = ["POLY_POINTWISE", "FUNCTIONS", "polynomial_step"]

LN2 = math.log(2.0)
LN2_HI = 0.693359375            # 355/512: n * LN2_HI is exact for |n| < 2^15
LN2_LO = LN2 - LN2_HI
LOG2E = 1.0 / LN2
ROUNDER = 12582912.0            # 1.5 * 2^23: adding it leaves round(k) in the low bits
ROUNDER_BITS = 0x4B400000
EXPONENT_BIAS = 127
MANTISSA_BITS = 23
SMALLEST_NORMAL = 2.0 ** -126
SQRT2 = math.sqrt(2.0)


class _Math:
    """Native IR for one element, in f32 (constants hoisted by the emitter)."""

    def __init__(self, em: Emitter):
        self.em, self.b = em, em.b

    def c(self, value: float):
        return self.em.const(float(value), f32)

    def i(self, value: int):
        return self.em.const(int(value), i32)

    def op(self, name, x, y):
        return self.b.binary(name, x, y)

    def fma(self, x, y, z):  # x * y + z (contracted to an FMA by the backend)
        return self.op("add", self.op("mul", x, y), z)

    def select(self, pred, x, y, yes, no):
        return self.b.select(self.b.cmp(pred, x, y), yes, no)

    def bits(self, x):
        return self.b.create("cpu.bitcast", [x], {"to": i32}).result

    def float_of(self, bits):
        return self.b.create("cpu.bitcast", [bits], {"to": f32}).result

    def scaled(self, p, t):
        """``p * 2^n`` where ``t = n + ROUNDER`` holds the integer ``n`` in its low bits."""
        n = self.op("sub", self.bits(t), self.i(ROUNDER_BITS))
        return self.b.create("cpu.ldexp", [p, n]).result

    def taylor(self, r):
        """``e^r`` for ``|r| <= ln(2)/2``: the Taylor polynomial of degree 7, Horner form."""
        p = self.c(1.0 / math.factorial(7))
        for k in range(6, -1, -1):
            p = self.fma(p, r, self.c(1.0 / math.factorial(k)))
        return p

    def clamp(self, x, low: float, high: float):
        """``x`` limited to [low, high]; NaN passes through (comparisons are false)."""
        x = self.select("gt", x, self.c(high), self.c(high), x)
        return self.select("lt", x, self.c(low), self.c(low), x)

    def exp(self, x):
        x = self.clamp(x, -104.0, 89.0)
        t = self.fma(x, self.c(LOG2E), self.c(ROUNDER))   # round(x / ln 2) + ROUNDER
        n = self.op("sub", t, self.c(ROUNDER))
        r = self.fma(n, self.c(-LN2_HI), x)
        r = self.fma(n, self.c(-LN2_LO), r)
        return self.scaled(self.taylor(r), t)

    def exp2(self, x):
        x = self.clamp(x, -151.0, 129.0)
        t = self.op("add", x, self.c(ROUNDER))             # round(x) + ROUNDER
        n = self.op("sub", t, self.c(ROUNDER))
        return self.scaled(self.taylor(self.op("mul", self.op("sub", x, n), self.c(LN2))), t)

    def log(self, x):
        tiny = self.b.cmp("lt", x, self.c(SMALLEST_NORMAL))
        scaled = self.b.select(tiny, self.op("mul", x, self.c(2.0 ** MANTISSA_BITS)), x)
        bits = self.bits(scaled)
        exponent = self.op("sub", self.op("shr", bits, self.i(MANTISSA_BITS)),
                           self.i(EXPONENT_BIAS))
        mantissa = self.float_of(self.op("or", self.op("and", bits, self.i(0x007FFFFF)),
                                         self.i(EXPONENT_BIAS << MANTISSA_BITS)))
        e = self.b.cast(exponent, f32)
        e = self.b.select(tiny, self.op("sub", e, self.c(MANTISSA_BITS)), e)
        big = self.b.cmp("gt", mantissa, self.c(SQRT2))
        m = self.b.select(big, self.op("mul", mantissa, self.c(0.5)), mantissa)
        e = self.b.select(big, self.op("add", e, self.c(1.0)), e)
        f = self.op("sub", m, self.c(1.0))                     # exact
        s = self.op("div", f, self.op("add", f, self.c(2.0)))  # s = f / (2 + f)
        z = self.op("mul", s, s)
        series = self.c(2.0 / 11)
        for k in (9, 7, 5, 3):
            series = self.fma(series, z, self.c(2.0 / k))
        tail = self.op("mul", z, series)  # 2 atanh(s) = 2s + s * tail, and 2s = f - s f
        log_m_minus_f = self.op("mul", s, self.op("sub", tail, f))
        low = self.fma(e, self.c(LN2_LO), log_m_minus_f)
        result = self.fma(e, self.c(LN2_HI), self.op("add", f, low))
        result = self.select("eq", x, self.c(math.inf), self.c(math.inf), result)
        result = self.select("eq", x, self.c(0.0), self.c(-math.inf), result)
        result = self.select("lt", x, self.c(0.0), self.c(math.nan), result)
        return self.select("ne", x, x, x, result)  # NaN in, NaN out


FUNCTIONS = ("exp", "exp2", "log")


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = team_once_reasons(call)
    op = call.attrs.get("op")
    ops = elementwise.computed_ops(call)
    if not any(name in FUNCTIONS for name, _ in ops):
        what = f"op {op!r}" if op != FUSED else "no step of the fused chain"
        reasons.append(f"{what} is not one of {', '.join(FUNCTIONS)}")
    elif not any(name in FUNCTIONS and dtype == f32 for name, dtype in ops):
        dtype = next(dtype for name, dtype in ops if name in FUNCTIONS)
        reasons.append(f"dst is {dtype}: the polynomials are evaluated in f32")
    if sum(o.role is MemScope.GLOBAL for o in call.tiles) >= 2:
        reasons.append("two operands in global memory: the stream family runs the "
                       "polynomials in chunks that vectorize between tensors")
    if reasons:
        return Decline(*reasons)
    return elementwise.check_vector(call)


def polynomial_step(em: Emitter):
    """``step(op, dtype, values, idx)`` for ``elementwise.compute_steps``: f32 exp, exp2
    and log by their polynomials, every other op as the element loops compute it."""
    math = _Math(em)

    def step(name, dtype, values, idx):
        if name in FUNCTIONS and dtype == f32:
            (value,) = values
            return getattr(math, name)(value if value.type == f32 else em.b.cast(value, f32))
        return elementwise.compute_op(em, name, dtype, values, idx)
    return step


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    """The vector family's loops, each f32 exp/exp2/log (alone or a step of a fused
    chain) computed by its polynomial."""
    elementwise.lower(call, plan, em, polynomial_step(em))


POLY_POINTWISE = register(Rule(
    "poly", "pointwise", check, lower, targets=("cpu",), priority=10,
    doc="exp/exp2/log as range reduction + polynomial in f32, vectorized by LLVM"))
