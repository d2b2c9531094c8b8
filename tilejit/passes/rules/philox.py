"""Counter-based random numbers in target-neutral native IR: Philox 4x32-10.

The element computation of the pointwise ops ``rand``, ``randn`` and ``randint`` (built by
the generic element rule, so every target computes the same stream from u32/u64 integer
ops). ``tilejit.passes.reference`` is the numpy twin; docs/language.md states the mapping:

* key ``(k0, k1)`` = the low and high 32 bits of the seed as a 64-bit two's complement
  integer; counter ``(c0, c1, c2, c3)`` = ``(offset mod 2^32, high 32 bits of a 64-bit
  offset or 0, 0, 0)`` (Triton's choice, so streams agree with ``tl.rand``'s words).
* ten rounds of Salmon et al.'s Philox 4x32 (multipliers ``0xD2511F53``, ``0xCD9E8D57``;
  Weyl key increments ``0x9E3779B9``, ``0xBB67AE85``).
* ``randint`` is output word 0; ``rand`` is word 0's top ``p`` bits times ``2^-p``, where
  ``p`` is the destination's significand precision (at most 32): exact, so always < 1;
  ``randn`` is Box-Muller on words 0 and 1, computed in f64 and rounded once.
"""
from __future__ import annotations

import math

from ...ir.types import ScalarType, f64, i64, u32, u64

__all__ = ["ROUNDS", "MULTIPLIERS", "WEYL", "uniform_bits", "random_element"]

ROUNDS = 10
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)
# Significand precision (bits, implicit one included) of each float dtype: ``rand`` keeps
# that many random bits so that converting it to the dtype is exact.
PRECISION = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8, "f8e4m3": 4, "f8e5m2": 3}


def uniform_bits(dtype: ScalarType) -> int:
    """How many of word 0's bits ``rand`` keeps for ``dtype``."""
    return min(32, PRECISION[dtype.name])


def _mul_hi_lo(em, a, multiplier: int):
    """(high, low) 32-bit halves of the 64-bit product ``a * multiplier`` (u32 ``a``)."""
    wide = em.b.binary("mul", em.b.cast(a, u64), em.const(multiplier, u64))
    high = em.b.cast(em.b.binary("shr", wide, em.const(32, u64)), u32)
    return high, em.b.cast(wide, u32)


def philox(em, seed, offset) -> list:
    """The four u32 output words for a scalar ``seed`` and an integer ``offset``."""
    seed = em.b.cast(em.b.cast(seed, i64), u64)
    key = [em.b.cast(seed, u32), em.b.cast(em.b.binary("shr", seed, em.const(32, u64)), u32)]
    zero = em.const(0, u32)
    high = zero
    if offset.type.bits == 64:
        high = em.b.cast(em.b.binary("shr", em.b.cast(offset, u64), em.const(32, u64)), u32)
    counter = [em.b.cast(offset, u32), high, zero, zero]
    for round_index in range(ROUNDS):
        if round_index:
            key = [em.b.binary("add", k, em.const(w, u32)) for k, w in zip(key, WEYL)]
        hi0, lo0 = _mul_hi_lo(em, counter[0], MULTIPLIERS[0])
        hi1, lo1 = _mul_hi_lo(em, counter[2], MULTIPLIERS[1])
        counter = [em.b.binary("xor", em.b.binary("xor", hi1, counter[1]), key[0]), lo1,
                   em.b.binary("xor", em.b.binary("xor", hi0, counter[3]), key[1]), lo0]
    return counter


def _unit(em, word, bits: int, dtype: ScalarType, plus_one: bool = False):
    """``(word >> (32 - bits) [+ 1]) * 2^-bits`` in ``dtype`` (exact)."""
    top = em.b.binary("shr", word, em.const(32 - bits, u32)) if bits < 32 else word
    count = em.b.cast(top, u64 if plus_one and bits == 32 else u32)
    if plus_one:
        count = em.b.binary("add", count, em.const(1, count.type))
    return em.b.binary("mul", em.b.cast(count, dtype), em.const(2.0 ** -bits, dtype))


def random_element(em, op: str, seed, offset, dtype: ScalarType):
    """One element of ``rand``/``randn``/``randint`` in the destination dtype."""
    words = philox(em, seed, offset)
    if op == "randint":
        return em.b.cast(words[0], dtype)
    if op == "rand":
        return _unit(em, words[0], uniform_bits(dtype), dtype)
    # Box-Muller with u1 in (0, 1] (so log(u1) is finite) and u2 in [0, 1), 32 bits each
    u1 = _unit(em, words[0], 32, f64, plus_one=True)
    u2 = _unit(em, words[1], 32, f64)
    radius = em.b.unary("sqrt", em.b.binary("mul", em.const(-2.0, f64), em.b.unary("log", u1)))
    angle = em.b.binary("mul", em.const(2 * math.pi, f64), u2)
    normal = em.b.binary("mul", radius, em.b.unary("cos", angle))
    return normal if dtype == f64 else em.b.cast(normal, dtype)
