"""The cuda printer's asynchronous copies (``ir/ops_async.py``) as inline PTX.

* ``cp_async_at`` is ``cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes;``:
  ``.cg`` (cached in L2 only, PTX allows it for 16-byte copies alone) for 16 bytes, ``.ca``
  for 4 and 8; the source size reads that many bytes and zero-fills the rest of the chunk
  (PTX ISA "cp.async"). From sm_80 on.
* ``cp_async_commit`` / ``cp_async_wait {pending = N}`` are ``cp.async.commit_group;`` /
  ``cp.async.wait_group N;``.
* ``mbarrier_complete_tx`` is ``mbarrier.complete_tx.relaxed.cta.shared::cta.b64`` (sm_90
  on, like ``expect_tx``).

The addresses are the flat offsets ``lower-addresses`` computed: the printer converts the
two elements' generic addresses to their state spaces, nothing more.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.types import i32

from .emit import CudaPrinter

__all__ = ["HANDLERS", "MIN_SM"]

MIN_SM = 80         # cp.async
MIN_SM_TX = 90      # mbarrier transaction counts


def _needs(p: CudaPrinter, op: Operation, sm: int, what: str) -> None:
    if p.sm < sm:
        raise CompilationError(f"{op.name} ({what}) needs sm_{sm} or later; compiling for "
                               f"{p.arch}", op.loc)


def _u32(p: CudaPrinter, value) -> str:
    return f"(unsigned){p[value]}" if value.type != i32 else p[value]


def print_cp_async_at(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "cp.async")
    dst, dst_offset, src, src_offset, src_bytes = op.operands
    nbytes = op.attrs["bytes"]
    cache = "cg" if nbytes == 16 else "ca"
    p.emit(f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;" :: '
           f'"r"(tj_smem_addr(&{p[dst]}[{p[dst_offset]}])), '
           f'"l"(__cvta_generic_to_global(&{p[src]}[{p[src_offset]}])), '
           f'"r"({_u32(p, src_bytes)}) : "memory");')


def print_cp_async_commit(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "cp.async")
    p.emit('asm volatile("cp.async.commit_group;" ::: "memory");')


def print_cp_async_wait(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "cp.async")
    p.emit(f'asm volatile("cp.async.wait_group {op.attrs["pending"]};" ::: "memory");')


def print_mbarrier_complete_tx(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM_TX, "mbarrier transaction counts")
    bar, index, nbytes = op.operands
    p.emit('asm volatile("mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: '
           f'"r"(tj_smem_addr(&{p[bar]}[{p[index]}])), "r"({_u32(p, nbytes)}) : "memory");')


HANDLERS = {"cp_async_at": print_cp_async_at, "cp_async_commit": print_cp_async_commit,
            "cp_async_wait": print_cp_async_wait,
            "mbarrier_complete_tx": print_mbarrier_complete_tx}
