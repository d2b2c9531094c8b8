"""The cuda printer's tensor-core ops: ``mma_sync`` as one inline-PTX ``mma.sync.aligned``,
``ldmatrix_at`` as one ``ldmatrix.sync.aligned.m8n8``, ``stmatrix_at`` as one
``stmatrix.sync.aligned.m8n8``.

PTX takes 16-bit A and B fragments packed in pairs into 32-bit registers, the element of
lower index in the lower half (PTX ISA "Matrix Fragments for mma.m16n8k16"); the f32 C
and D values are one register each. ldmatrix delivers its 16-bit values packed the same
way, and stmatrix takes them so. mma.sync m16n8k16 exists from sm_80 on, ldmatrix from
sm_75, stmatrix from sm_90 (PTX ISA 7.8).
"""
from __future__ import annotations

import itertools

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.ops_native import MMA_FRAGMENT_SIZES
from tilejit.passes.rules.gemm_mma import MIN_SM

from .emit import CudaPrinter
from .emit_scalar import storage_type

__all__ = ["HANDLERS"]

LDMATRIX_MIN_SM = 75
STMATRIX_MIN_SM = 90


def _packed(p: CudaPrinter, values) -> list[str]:
    """The 16-bit values as 32-bit registers of two, the first in the low half."""
    return [f"((unsigned)tj_bits({p[high]}) << 16 | tj_bits({p[low]}))"
            for low, high in zip(values[::2], values[1::2])]


def print_mma_sync(p: CudaPrinter, op: Operation) -> None:
    if p.sm < MIN_SM:
        raise CompilationError(f"mma_sync (mma.sync.aligned.{op.attrs['shape']}) needs "
                               f"sm_{MIN_SM} or later; compiling for {p.arch}")
    attrs = op.attrs
    a_count, b_count, _ = MMA_FRAGMENT_SIZES[attrs["shape"]]
    a, b = op.operands[:a_count], op.operands[a_count:a_count + b_count]
    c = op.operands[a_count + b_count:]
    instruction = (f"mma.sync.aligned.{attrs['shape']}.{attrs['a_layout']}.{attrs['b_layout']}"
                   f".{attrs['c_type']}.{attrs['a_type']}.{attrs['b_type']}.{attrs['c_type']}")
    d = [p.declare(result, hint=result.name_hint or "d") for result in op.results]
    registers = itertools.count()   # the asm operand numbers, outputs first

    def group(count: int) -> str:
        return "{" + ", ".join(f"%{next(registers)}" for _ in range(count)) + "}"

    operands = " ".join([group(len(d)) + ",", group(len(a) // 2) + ",",
                         group(len(b) // 2) + ",", group(len(c))])
    outputs = ", ".join(f'"=f"({name})' for name in d)
    inputs = ", ".join([*(f'"r"({x})' for x in _packed(p, a) + _packed(p, b)),
                        *(f'"f"({p[v]})' for v in c)])
    # volatile: .aligned needs every lane of the warp at this one instruction, so the
    # compiler must not move it (into a branch, out of a loop) or merge it.
    p.emit(f'asm volatile("{instruction} {operands};" : {outputs} : {inputs});')


def print_ldmatrix_at(p: CudaPrinter, op: Operation) -> None:
    if p.sm < LDMATRIX_MIN_SM:
        raise CompilationError(f"ldmatrix needs sm_{LDMATRIX_MIN_SM} or later; compiling for "
                               f"{p.arch}")
    num, buf, offset = op.attrs["num"], *op.operands
    instruction = ("ldmatrix.sync.aligned.m8n8.x" + str(num)
                   + (".trans" if op.attrs["trans"] else "") + ".shared.b16")
    registers = [p.fresh("ldm") for _ in range(num)]
    p.emit(f"unsigned {', '.join(registers)};")
    outputs = ", ".join(f'"=r"({r})' for r in registers)
    operands = "{" + ", ".join(f"%{i}" for i in range(num)) + f"}}, [%{num}]"
    address = f"tj_smem_addr(&{p[buf]}[{p[offset]}])"
    # volatile and "memory": a warp collective reading shared memory other threads wrote
    # before a barrier; it must stay where the IR puts it.
    p.emit(f'asm volatile("{instruction} {operands};" : {outputs} : "r"({address}) '
           ': "memory");')
    element = storage_type(buf.type.dtype)
    for i, result in enumerate(op.results):
        half = f"({registers[i // 2]} >> 16)" if i % 2 else registers[i // 2]
        p.define(result, f"tj_from_bits<{element}>((unsigned short)({half} & 0xFFFFu))")


def print_stmatrix_at(p: CudaPrinter, op: Operation) -> None:
    if p.sm < STMATRIX_MIN_SM:
        raise CompilationError(f"stmatrix needs sm_{STMATRIX_MIN_SM} or later; compiling for "
                               f"{p.arch}")
    num, (buf, offset, *values) = op.attrs["num"], op.operands
    instruction = ("stmatrix.sync.aligned.m8n8.x" + str(num)
                   + (".trans" if op.attrs["trans"] else "") + ".shared.b16")
    operands = f"[%0], {{{', '.join(f'%{i + 1}' for i in range(num))}}}"
    inputs = ", ".join([f'"r"(tj_smem_addr(&{p[buf]}[{p[offset]}]))',
                        *(f'"r"({x})' for x in _packed(p, values))])
    # volatile and "memory": a warp collective writing shared memory that other threads
    # read after a barrier; it must stay where the IR puts it.
    p.emit(f'asm volatile("{instruction} {operands};" :: {inputs} : "memory");')


HANDLERS = {"mma_sync": print_mma_sync, "ldmatrix_at": print_ldmatrix_at,
            "stmatrix_at": print_stmatrix_at}
