"""The cuda printer's tcgen05 ops (``ir/ops_tcgen05.py``) as inline PTX, sm_100a only (the
``a`` target: tcgen05 is Blackwell's arch-specific instruction set; PTX ISA 9.7.16).

* ``tcgen05_alloc`` / ``tcgen05_dealloc`` / ``tcgen05_relinquish_alloc_permit``:
  ``tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], cols;`` (the slot's
  shared address), ``tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, cols;`` and
  ``tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;``.
* ``tcgen05_desc``: the descriptor's constant fields (``MatrixDescriptor.encode``, version
  1, zero start) or'ed with the element's shared address, bits 4-17 at bits 0-13.
* ``tcgen05_mma``: ``tcgen05.mma.cta_group::1.kind::f16 [taddr], a_desc, b_desc, idesc,
  p;`` with the instruction descriptor a constant (``InstructionDescriptor.encode``) and
  enable-input-d a predicate set from the ``accumulate`` attribute.
* ``tcgen05_commit``: ``tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster
  .b64 [bar];`` (a CTA's own shared address is a valid shared::cluster address).
* ``tcgen05_ld``: ``tcgen05.ld.sync.aligned.32x32b.xN.b32`` into N f32 ``"=f"``
  registers; ``tcgen05_wait_ld`` is ``tcgen05.wait::ld.sync.aligned;`` with the values
  tied (``"+f"``), so the compiler reads them only after it.
* ``tcgen05_st``: ``tcgen05.st.sync.aligned.32x32b.xN.b32 [taddr], {...};`` from N ``"f"``
  registers; ``tcgen05_wait_st`` is ``tcgen05.wait::st.sync.aligned;``.
* ``tcgen05_fence``: ``tcgen05.fence::before_thread_sync;`` / ``::after_thread_sync``.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.ops_tcgen05 import TMEM_DESCRIPTOR_VERSION, instruction_descriptor
from tilejit.ir.ops_wgmma import MatrixDescriptor

from .emit import CudaPrinter
from .emit_sync import _barrier

__all__ = ["HANDLERS", "TCGEN05_ARCH"]

TCGEN05_ARCH = "sm_100a"


def _needs_sm100a(p: CudaPrinter, op: Operation) -> None:
    if p.arch != TCGEN05_ARCH:
        raise CompilationError(f"{op.name} (tcgen05) needs {TCGEN05_ARCH}; compiling for "
                               f"{p.arch}", op.loc)


def _asm(p: CudaPrinter, op: Operation, text: str, operands: str = " ::") -> None:
    _needs_sm100a(p, op)
    p.emit(f'asm volatile("{text}"{operands} : "memory");')


def print_tcgen05_alloc(p: CudaPrinter, op: Operation) -> None:
    slot = f"tj_smem_addr(&{p[op.operands[0]]}[0])"
    _asm(p, op, f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], "
                f"{op.attrs['cols']};", f' :: "r"({slot})')


def print_tcgen05_dealloc(p: CudaPrinter, op: Operation) -> None:
    _asm(p, op, f"tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, {op.attrs['cols']};",
         f' :: "r"({p[op.operands[0]]})')


def print_tcgen05_desc(p: CudaPrinter, op: Operation) -> None:
    _needs_sm100a(p, op)
    buf, offset = op.operands
    a = op.attrs
    fields = MatrixDescriptor(0, a["lbo"], a["sbo"], a["swizzle"],
                              version=TMEM_DESCRIPTOR_VERSION).encode()
    address = f"tj_smem_addr(&{p[buf]}[{p[offset]}])"
    p.define(op.result, f"{fields:#x}ull | (unsigned long long)(({address} & 0x3FFFFu) >> 4)")


def print_tcgen05_mma(p: CudaPrinter, op: Operation) -> None:
    taddr, a_desc, b_desc = (p[value] for value in op.operands)
    idesc = instruction_descriptor(op.attrs).encode()
    body = (f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %3, 0;\\n"
            f"tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, {idesc:#x}, p;\\n}}")
    _asm(p, op, body, f' :: "r"({taddr}), "l"({a_desc}), "l"({b_desc}), '
                      f'"r"({int(op.attrs["accumulate"])})')


def print_tcgen05_commit(p: CudaPrinter, op: Operation) -> None:
    _asm(p, op, "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];",
         f' :: "r"(tj_smem_addr({_barrier(p, op)}))')


def print_tcgen05_ld(p: CudaPrinter, op: Operation) -> None:
    _needs_sm100a(p, op)
    num = op.attrs["num"]
    # f32 registers: PTX's .b32 takes any 32-bit register, so no reinterpreting copy
    names = [p.declare(result, hint=result.name_hint or "tv") for result in op.results]
    registers = "{" + ", ".join(f"%{i}" for i in range(num)) + "}"
    outputs = ", ".join(f'"=f"({name})' for name in names)
    p.emit(f'asm volatile("tcgen05.ld.sync.aligned.{op.attrs["shape"]}.x{num}.b32 '
           f'{registers}, [%{num}];" : {outputs} : "r"({p[op.operands[0]]}) : "memory");')


def print_tcgen05_wait_ld(p: CudaPrinter, op: Operation) -> None:
    _needs_sm100a(p, op)
    names = [p.declare(result, p[value], hint=result.name_hint or "tv")
             for result, value in zip(op.results, op.operands)]
    tied = ", ".join(f'"+f"({name})' for name in names)
    p.emit(f'asm volatile("tcgen05.wait::ld.sync.aligned;" : {tied} :: "memory");')


def print_tcgen05_st(p: CudaPrinter, op: Operation) -> None:
    taddr, *values = op.operands
    num = op.attrs["num"]
    registers = "{" + ", ".join(f"%{i + 1}" for i in range(num)) + "}"
    inputs = ", ".join(f'"f"({p[value]})' for value in values)
    _asm(p, op, f"tcgen05.st.sync.aligned.{op.attrs['shape']}.x{num}.b32 [%0], {registers};",
         f' :: "r"({p[taddr]}), {inputs}')


def print_tcgen05_fence(p: CudaPrinter, op: Operation) -> None:
    _asm(p, op, f"tcgen05.fence::{op.attrs['kind']};")


HANDLERS = {"tcgen05_alloc": print_tcgen05_alloc, "tcgen05_dealloc": print_tcgen05_dealloc,
            "tcgen05_relinquish_alloc_permit": lambda p, op: _asm(
                p, op, "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;"),
            "tcgen05_desc": print_tcgen05_desc, "tcgen05_mma": print_tcgen05_mma,
            "tcgen05_commit": print_tcgen05_commit, "tcgen05_ld": print_tcgen05_ld,
            "tcgen05_wait_ld": print_tcgen05_wait_ld, "tcgen05_st": print_tcgen05_st,
            "tcgen05_wait_st": lambda p, op: _asm(p, op, "tcgen05.wait::st.sync.aligned;"),
            "tcgen05_fence": print_tcgen05_fence}
