"""The cuda printer's warpgroup ops (``ir/ops_wgmma.py``) as inline PTX, sm_90a only (the
``a`` target: wgmma and setmaxnreg are Hopper's arch-specific instructions).

* ``wgmma_desc`` is the descriptor's constant fields (``MatrixDescriptor.encode`` with a
  zero start) or'ed with the buffer element's shared address, bits 4-17 at bits 0-13.
* ``wgmma_mma_async`` is one ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}`` (or
  ``m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}`` for fp8) with the thread's N / 2 accumulators
  as ``"+f"`` operands, the two descriptors, scale-d as a predicate set from a register, A
  and B scales 1 and, for 16-bit types only, the transpose immediates (the fp8 form has
  none: it reads K-major operands, which the verifier requires).
* ``wgmma_mma_async_reg_a`` is the form with A from registers: the eight 16-bit A values
  packed two to a 32-bit register as ``{a0, a1, a2, a3}`` in place of A's descriptor, and
  no transpose-A immediate (``..., p, 1, 1, trans_b;``).
* ``wgmma_fence`` / ``wgmma_commit_group`` / ``wgmma_wait_group N`` are ``wgmma.fence``,
  ``wgmma.commit_group`` and ``wgmma.wait_group N``, each ``.sync.aligned``.

``setmaxnreg`` is ``setmaxnreg.{inc,dec}.sync.aligned.u32 N``.

Every wgmma op names the accumulators it passes through as ``"+f"`` operands of its
``asm volatile``: the registers the tensor cores write after the multiply returns must not
be read, moved or reused by the compiler before the wait, which it learns only this way.
"""
from __future__ import annotations

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.ops_wgmma import WGMMA_A_VALUES, WGMMA_FP8_TYPES, MatrixDescriptor, wgmma_k
from tilejit.ir.types import f8e4m3, f8e5m2

from .emit import CudaPrinter
from .emit_scalar import packed_words

__all__ = ["HANDLERS", "WGMMA_ARCH"]

WGMMA_ARCH = "sm_90a"
_PTX_FP8 = {f8e4m3: "e4m3", f8e5m2: "e5m2"}   # PTX's names; f16 and bf16 are spelled alike


def _needs_sm90a(p: CudaPrinter, op: Operation) -> None:
    if p.arch != WGMMA_ARCH:
        what = f"{op.name} (wgmma)" if op.name.startswith("wgmma") else op.name
        raise CompilationError(f"{what} needs {WGMMA_ARCH}; compiling for {p.arch}", op.loc)


def _accumulators(p: CudaPrinter, op: Operation, first: int = 0) -> list[str]:
    """The op's results as mutable locals holding its accumulator operands' values."""
    return [p.declare(result, p[value], hint=result.name_hint or "acc")
            for result, value in zip(op.results, op.operands[first:])]


def _tied(names: list[str]) -> str:
    return ", ".join(f'"+f"({name})' for name in names)


def print_wgmma_desc(p: CudaPrinter, op: Operation) -> None:
    _needs_sm90a(p, op)
    buf, offset = op.operands
    a = op.attrs
    fields = MatrixDescriptor(0, a["lbo"], a["sbo"], a["swizzle"], a["base_offset"]).encode()
    address = f"tj_smem_addr(&{p[buf]}[{p[offset]}])"
    p.define(op.result, f"{fields:#x}ull | (unsigned long long)(({address} & 0x3FFFFu) >> 4)")


def print_wgmma_mma_async(p: CudaPrinter, op: Operation) -> None:
    _needs_sm90a(p, op)
    a = op.attrs
    a_desc, b_desc = op.operands[:2]
    d = _accumulators(p, op, first=2)
    count = len(d)
    registers = "{" + ", ".join(f"%{i}" for i in range(count)) + "}"
    a_type = a["a_type"]
    a_name, b_name = (_PTX_FP8.get(t, str(t)) for t in (a_type, a["b_type"] or a_type))
    transposes = ("" if a_type in WGMMA_FP8_TYPES
                  else f", {int(a['trans_a'])}, {int(a['trans_b'])}")
    instruction = (f"wgmma.mma_async.sync.aligned.m64n{a['n']}k{wgmma_k(a_type)}.f32."
                   f"{a_name}.{b_name} {registers}, %{count}, %{count + 1}, p, 1, 1"
                   f"{transposes};")
    _emit_multiply(p, instruction, d, [f'"l"({p[a_desc]})', f'"l"({p[b_desc]})'],
                   a["scale_d"])


def print_wgmma_mma_async_reg_a(p: CudaPrinter, op: Operation) -> None:
    _needs_sm90a(p, op)
    a = op.attrs
    d = _accumulators(p, op, first=1 + WGMMA_A_VALUES)
    count = len(d)
    words = packed_words(p, op.operands[1:1 + WGMMA_A_VALUES])   # a0..a3: two halves each
    registers = "{" + ", ".join(f"%{i}" for i in range(count)) + "}"
    a_registers = "{" + ", ".join(f"%{count + i}" for i in range(len(words))) + "}"
    b_operand = count + len(words)
    # no imm-trans-a: A in registers is given as [M, K]
    instruction = (f"wgmma.mma_async.sync.aligned.m64n{a['n']}k{wgmma_k(a['a_type'])}.f32."
                   f"{a['a_type']}.{a['a_type']} {registers}, {a_registers}, %{b_operand}, p, "
                   f"1, 1, {int(a['trans_b'])};")
    inputs = [*(f'"r"({word})' for word in words), f'"l"({p[op.operands[0]]})']
    _emit_multiply(p, instruction, d, inputs, a["scale_d"])


def _emit_multiply(p: CudaPrinter, instruction: str, d: list[str], inputs: list[str],
                   scale_d: bool) -> None:
    """The multiply's ``asm volatile``: the accumulators tied, then ``inputs`` (the asm
    operands after them), then scale-d as a predicate set from a register."""
    # one PTX line each (the C string's \\n), so the PTX reads as the instruction it is
    scale = len(d) + len(inputs)
    body = f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n{instruction}\\n}}"
    p.emit(f'asm volatile("{body}" : {_tied(d)} : {", ".join(inputs)}, '
           f'"r"({int(scale_d)}) : "memory");')


def _print_passthrough(instruction: str):
    def print_op(p: CudaPrinter, op: Operation) -> None:
        _needs_sm90a(p, op)
        text = instruction.format(**op.attrs)
        p.emit(f'asm volatile("{text}" : {_tied(_accumulators(p, op))} :: "memory");')
    return print_op


def print_setmaxnreg(p: CudaPrinter, op: Operation) -> None:
    _needs_sm90a(p, op)
    action, count = op.attrs["action"], op.attrs["count"]
    p.emit(f'asm volatile("setmaxnreg.{action}.sync.aligned.u32 {count};");')


HANDLERS = {"wgmma_desc": print_wgmma_desc, "wgmma_mma_async": print_wgmma_mma_async,
            "wgmma_mma_async_reg_a": print_wgmma_mma_async_reg_a,
            "wgmma_fence": _print_passthrough("wgmma.fence.sync.aligned;"),
            "wgmma_commit_group": _print_passthrough("wgmma.commit_group.sync.aligned;"),
            "wgmma_wait_group": _print_passthrough("wgmma.wait_group.sync.aligned {pending};"),
            "setmaxnreg": print_setmaxnreg}
