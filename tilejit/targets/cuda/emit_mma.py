"""The cuda printer's tensor-core ops: ``mma_sync`` as one inline-PTX ``mma.sync.aligned``,
``ldmatrix_at`` as one ``ldmatrix.sync.aligned.m8n8``, ``stmatrix_at`` as one
``stmatrix.sync.aligned.m8n8``.

PTX takes A and B fragments packed into 32-bit registers -- 16-bit values in pairs,
8-bit ones in fours -- the element of lower index in the lower bits (PTX ISA "Matrix
Fragments for mma.m16n8k16" and "for mma.m16n8k32"); the f32 C and D values are one
register each. ldmatrix delivers its 16- or 8-bit values packed the same way, and
stmatrix takes them so. mma.sync m16n8k16 exists from sm_80 on, m16n8k32 with .e4m3/.e5m2 from
sm_89, ldmatrix from sm_75, stmatrix from sm_90 (PTX ISA 7.8).
"""
from __future__ import annotations

import itertools

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.ops_native import MMA_FRAGMENT_SIZES
from tilejit.ir.types import bf16, f8e4m3, f8e5m2, f16, f32
from tilejit.passes.rules.gemm_mma import MIN_SM

from .emit import CudaPrinter
from .emit_scalar import packed_words, storage_type

__all__ = ["HANDLERS"]

LDMATRIX_MIN_SM = 75
STMATRIX_MIN_SM = 90
PTX_TYPES = {f16: "f16", bf16: "bf16", f32: "f32", f8e4m3: "e4m3", f8e5m2: "e5m2"}


def print_mma_sync(p: CudaPrinter, op: Operation) -> None:
    attrs = op.attrs
    min_sm = MIN_SM[attrs["shape"]]
    if p.sm < min_sm:
        raise CompilationError(f"mma_sync (mma.sync.aligned.{attrs['shape']}) needs "
                               f"sm_{min_sm} or later; compiling for {p.arch}")
    a_count, b_count, _ = MMA_FRAGMENT_SIZES[attrs["shape"]]
    a, b = op.operands[:a_count], op.operands[a_count:a_count + b_count]
    c = op.operands[a_count + b_count:]
    a_type, b_type, c_type = (PTX_TYPES[attrs[t]] for t in ("a_type", "b_type", "c_type"))
    instruction = (f"mma.sync.aligned.{attrs['shape']}.{attrs['a_layout']}.{attrs['b_layout']}"
                   f".{c_type}.{a_type}.{b_type}.{c_type}")
    d = [p.declare(result, hint=result.name_hint or "d") for result in op.results]
    registers = itertools.count()   # the asm operand numbers, outputs first

    def group(count: int) -> str:
        return "{" + ", ".join(f"%{next(registers)}" for _ in range(count)) + "}"

    a_words, b_words = packed_words(p, a), packed_words(p, b)
    operands = " ".join([group(len(d)) + ",", group(len(a_words)) + ",",
                         group(len(b_words)) + ",", group(len(c))])
    outputs = ", ".join(f'"=f"({name})' for name in d)
    inputs = ", ".join([*(f'"r"({x})' for x in a_words + b_words),
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
    dtype = buf.type.dtype
    element, bits = storage_type(dtype), dtype.bits
    per_register = 32 // bits
    bit_type, mask = ("unsigned short", "0xFFFFu") if bits == 16 else ("unsigned char", "0xFFu")
    for i, result in enumerate(op.results):
        register, part = registers[i // per_register], i % per_register
        shifted = f"({register} >> {bits * part})" if part else register
        p.define(result, f"tj_from_bits<{element}>(({bit_type})({shifted} & {mask}))")
        p.register_parts[result] = (register, part)


def print_stmatrix_at(p: CudaPrinter, op: Operation) -> None:
    if p.sm < STMATRIX_MIN_SM:
        raise CompilationError(f"stmatrix needs sm_{STMATRIX_MIN_SM} or later; compiling for "
                               f"{p.arch}")
    num, (buf, offset, *values) = op.attrs["num"], op.operands
    instruction = ("stmatrix.sync.aligned.m8n8.x" + str(num)
                   + (".trans" if op.attrs["trans"] else "") + ".shared.b16")
    operands = f"[%0], {{{', '.join(f'%{i + 1}' for i in range(num))}}}"
    inputs = ", ".join([f'"r"(tj_smem_addr(&{p[buf]}[{p[offset]}]))',
                        *(f'"r"({x})' for x in packed_words(p, values))])
    # volatile and "memory": a warp collective writing shared memory that other threads
    # read after a barrier; it must stay where the IR puts it.
    p.emit(f'asm volatile("{instruction} {operands};" :: {inputs} : "memory");')


HANDLERS = {"mma_sync": print_mma_sync, "ldmatrix_at": print_ldmatrix_at,
            "stmatrix_at": print_stmatrix_at}
