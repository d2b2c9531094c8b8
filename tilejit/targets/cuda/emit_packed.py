"""The cuda printer's packed pairs: ``packed_binary``, ``packed_unary`` and ``packed_cast``
as one inline-PTX instruction on a 32-bit register of two 16-bit values (the pair's first
in the low half).

Which instruction (PTX ISA, half precision and bf16 arithmetic):

* f16: ``add/sub/mul.rn.f16x2``, ``neg/abs.f16x2`` (sm_53+), ``max/min.NaN.f16x2``
  (sm_80+); bf16: ``neg/abs.bf16x2`` (sm_80+);
* bf16: ``add/sub/mul.rn.bf16x2`` from sm_90; on sm_80 and sm_89 they are one
  ``fma.rn.bf16x2`` each, which rounds once as they do: ``a * 1 + b``, ``b * -1 + a``,
  ``a * b + -0`` (-0 keeps a -0 product's sign); ``max/min.NaN.bf16x2`` (sm_80+);
* ``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32`` (sm_80+; its first source goes to the
  upper half).

``.NaN``: max/min of a NaN is NaN, as the CPU's (llvm.maximum) and torch's are; without
it PTX returns the other operand. Not ``volatile``: the instructions have no effects, so
the compiler may move or merge them.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.types import bf16, f16
from tilejit.passes.rules.pointwise_packed import MIN_SM

from .emit import CudaPrinter
from .emit_scalar import packed_words, storage_type

__all__ = ["HANDLERS"]

PTX_TYPE = {f16: "f16x2", bf16: "bf16x2"}
NATIVE_BF16X2_SM = 90   # add/sub/mul.rn.bf16x2
# bf16x2 constants for the fma forms of bf16 add/sub/mul before sm_90
ONE, MINUS_ONE, MINUS_ZERO = "0x3F803F80", "0xBF80BF80", "0x80008000"


def _instruction(op: str, t, sm: int) -> tuple[str, str | None]:
    """(the PTX of ``op`` on ``t`` pairs for ``sm`` with ``d``, ``a``, ``b`` as ``%0``,
    ``%1``, ``%2``, the bf16x2 constant it reads as ``%3`` -- fma takes no immediate
    bf16x2 -- or None)."""
    kind = PTX_TYPE[t]
    if op in ("max", "min"):
        return f"{op}.NaN.{kind} %0, %1, %2;", None
    if t == f16 or sm >= NATIVE_BF16X2_SM:
        return f"{op}.rn.{kind} %0, %1, %2;", None
    operands, constant = {"add": ("%1, %3, %2", ONE), "sub": ("%2, %3, %1", MINUS_ONE),
                          "mul": ("%1, %2, %3", MINUS_ZERO)}[op]
    return f"fma.rn.{kind} %0, {operands};", constant


def _require(p: CudaPrinter, key, what: str) -> None:
    if p.sm < MIN_SM[key]:
        raise CompilationError(f"{what} needs sm_{MIN_SM[key]} or later; compiling for "
                               f"{p.arch}")


def _unpack(p: CudaPrinter, op: Operation, word: str) -> None:
    element = storage_type(op.results[0].type)
    for result, half in zip(op.results, (f"{word} & 0xFFFFu", f"{word} >> 16")):
        p.define(result, f"tj_from_bits<{element}>((unsigned short)({half}))")


def print_packed_binary(p: CudaPrinter, op: Operation) -> None:
    name, t = op.attrs["op"], op.results[0].type
    _require(p, (name, t), f"packed_binary {name} on {t} pairs")
    text, constant = _instruction(name, t, p.sm)
    inputs = [*packed_words(p, op.operands[:2]), *packed_words(p, op.operands[2:])]
    inputs += [f"{constant}u"] if constant else []
    word = p.fresh("pair")
    p.emit(f"unsigned {word};")
    operands = ", ".join(f'"r"({x})' for x in inputs)
    p.emit(f'asm("{text}" : "=r"({word}) : {operands});')
    _unpack(p, op, word)


def print_packed_unary(p: CudaPrinter, op: Operation) -> None:
    name, t = op.attrs["op"], op.results[0].type
    _require(p, (name, t), f"packed_unary {name} on {t} pairs")
    (word_in,) = packed_words(p, op.operands)
    word = p.fresh("pair")
    p.emit(f"unsigned {word};")
    p.emit(f'asm("{name}.{PTX_TYPE[t]} %0, %1;" : "=r"({word}) : "r"({word_in}));')
    _unpack(p, op, word)


def print_packed_cast(p: CudaPrinter, op: Operation) -> None:
    t = op.attrs["to"]
    _require(p, ("cast", t), f"packed_cast of f32 pairs to {t}")
    word = p.fresh("pair")
    x0, x1 = (p[x] for x in op.operands)
    p.emit(f"unsigned {word};")
    # the first source fills the upper half: x1 first
    p.emit(f'asm("cvt.rn.{PTX_TYPE[t]}.f32 %0, %1, %2;" : "=r"({word}) : "f"({x1}), '
           f'"f"({x0}));')
    _unpack(p, op, word)


HANDLERS = {"packed_binary": print_packed_binary, "packed_unary": print_packed_unary,
            "packed_cast": print_packed_cast}
