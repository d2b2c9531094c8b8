"""gemm_async family ``wgmma`` with A from registers (PTX ``wgmma.mma_async`` with
``{a0, a1, a2, a3}`` in place of A's descriptor): A a [M, K] f16 / bf16 fragment that
layout inference lays out by ``layout/hw_nvidia.wgmma_a_register_layout``, B in shared
memory. A GEMM whose A is copied to registers from shared memory, and the FlashAttention
chain ``O = (Q K^T -> f16) V`` whose P never leaves the registers (the S accumulator's
layout is P's A layout), against torch in both CPU lowerings; the errors for an A that is
not what the form reads."""
import pytest
import torch

import tilejit as tj
from tilejit.errors import CompilationError
from tilejit.ir.parser import parse_kernel
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.layout.fragments import blocked_layout
from tilejit.layout.hw_nvidia import wgmma_a_register_layout
from tilejit.passes.pipeline import PIPELINE, run_pipeline



def _shared(shape):
    """The widest swizzle whose rows the tile's f16 rows fill (128, 64 or 32 bytes)."""
    width = shape[-1] * 2
    mode = next(m for bytes_, m in ((128, SwizzleMode.B128), (64, SwizzleMode.B64),
                                    (32, SwizzleMode.B32)) if width % bytes_ == 0)
    return smem_layout(shape, "float16", mode)


@tj.kernel
def register_a_gemm(A, B, C, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr,
                    LA: tj.constexpr, LB: tj.constexpr):
    """C = A @ B for one M x N tile (A, B ragged: rows and columns beyond theirs are 0),
    A through shared memory into a register fragment."""
    a_shared = tj.alloc_shared((M, K), A.dtype, layout=LA)
    b = tj.alloc_shared((K, N), B.dtype, layout=LB)
    tj.copy(a_shared, A[0:M, 0:K])
    tj.copy(b, B[0:K, 0:N])
    tj.sync()
    a = tj.fragment((M, K), A.dtype)
    tj.copy(a, a_shared)
    acc = tj.fragment((M, N), tj.float32)
    tj.fill(acc, 0.0)
    tj.gemm_async(acc, a, b, dispatch="wgmma")
    tj.copy(C[0:M, 0:N], acc)


@tj.kernel
def attention_chain(Q, Kt, V, O, M: tj.constexpr, D: tj.constexpr, L: tj.constexpr,
                    LQ: tj.constexpr, LK: tj.constexpr, LV: tj.constexpr):
    """O = (Q @ K^T as f16) @ V: S by wgmma from shared Q and K, P = S cast in registers,
    O by wgmma with P as its register A."""
    q = tj.alloc_shared((M, D), Q.dtype, layout=LQ)
    k = tj.alloc_shared((L, D), Kt.dtype, layout=LK)
    v = tj.alloc_shared((L, D), V.dtype, layout=LV)
    tj.copy(q, Q[0:M, 0:D])
    tj.copy(k, Kt[0:L, 0:D])
    tj.copy(v, V[0:L, 0:D])
    tj.sync()
    s = tj.fragment((M, L), tj.float32)
    tj.fill(s, 0.0)
    tj.gemm_async(s, q, k, transpose_b=True, dispatch="wgmma")
    p = tj.cast(s, Q.dtype)
    o = tj.fragment((M, D), tj.float32)
    tj.fill(o, 0.0)
    tj.gemm_async(o, p, v, dispatch="wgmma")
    tj.copy(O[0:M, 0:D], o)


def _gemm(m, n, k, rows, cols, dtype=torch.float16):
    gen = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(rows, k, generator=gen).to(dtype)
    b = torch.randn(k, cols, generator=gen).to(dtype)
    c = torch.zeros(rows, cols)
    options = dict(M=m, N=n, K=k, LA=_shared((m, k)), LB=_shared((k, n)))
    register_a_gemm[(1,)](a, b, c, **options)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    (record,) = [r for r in register_a_gemm.compile(a, b, c, **options).dispatch_log
                 if r.primitive == "gemm_async"]
    return record


@pytest.mark.parametrize("m, n, k, rows, cols", [
    (64, 64, 64, 50, 40), (128, 32, 32, 100, 32), (64, 16, 16, 64, 9)])
def test_register_a_gemm_matches_torch(lowering, m, n, k, rows, cols):
    record = _gemm(m, n, k, rows, cols)
    assert record.rule == "wgmma"
    if lowering == "per_thread":
        assert record.note.startswith("A from registers; B MN-major")


def test_bf16_register_a(lowering):
    assert _gemm(64, 32, 32, 60, 30, torch.bfloat16).rule == "wgmma"


def _chain_inputs(m, d, l, rows, keys):
    gen = torch.Generator().manual_seed(rows * keys)
    q = (torch.randn(rows, d, generator=gen) / 4).half()
    k = (torch.randn(keys, d, generator=gen) / 4).half()
    v = torch.randn(keys, d, generator=gen).half()
    layouts = dict(LQ=_shared((m, d)), LK=_shared((l, d)), LV=_shared((l, d)))
    return q, k, v, torch.zeros(rows, d), dict(M=m, D=d, L=l, **layouts)


@pytest.mark.parametrize("m, d, l, rows, keys", [(64, 64, 64, 64, 64), (128, 32, 48, 90, 37)])
def test_attention_chain_keeps_p_in_registers(lowering, m, d, l, rows, keys):
    q, k, v, o, options = _chain_inputs(m, d, l, rows, keys)
    attention_chain[(1,)](q, k, v, o, **options)
    p = (q.float() @ k.float().T).half()   # S in f32 (exact products), rounded to f16
    torch.testing.assert_close(o.double(), p.double() @ v.double(), rtol=1e-4, atol=1e-4)
    records = [r for r in attention_chain.compile(q, k, v, o, **options).dispatch_log
               if r.primitive == "gemm_async"]
    assert [r.rule for r in records] == ["wgmma", "wgmma"]
    if lowering == "per_thread":
        assert records[1].note.startswith("A from registers")


@tj.kernel
def register_a_checked(A, B, C, M: tj.constexpr, LF: tj.constexpr = None,
                       REWRITE_A: tj.constexpr = False):
    """C = A @ B (M x 32 x 16) with A's fragment laid out by LF (None: inferred); with
    REWRITE_A the gemm is left in flight and A's registers written before the wait."""
    a_shared = tj.alloc_shared((M, 16), A.dtype, layout=_shared((M, 16)))
    b = tj.alloc_shared((16, 32), B.dtype, layout=_shared((16, 32)))
    tj.copy(a_shared, A[0:M, 0:16])
    tj.copy(b, B[0:16, 0:32])
    tj.sync()
    a = tj.fragment((M, 16), A.dtype, layout=LF)
    tj.copy(a, a_shared)
    acc = tj.fragment((M, 32), tj.float32)
    tj.fill(acc, 0.0)
    if REWRITE_A:
        tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)
        tj.copy(a, a_shared)
        tj.wgmma_wait(0)
    else:
        tj.gemm_async(acc, a, b, dispatch="wgmma")
    tj.copy(C[0:M, 0:32], acc)


def _checked(m=64, dtype=tj.float16, **options):
    def tensor(*shape, dtype=dtype):
        return tj.TensorSpec(shape, dtype)
    return register_a_checked.compile(tensor(m, 16), tensor(16, 32),
                                      tensor(m, 32, dtype=tj.float32), M=m, simt=True,
                                      **options)


def _source_line(text: str) -> int:
    """The line of register_a_checked that starts with ``text`` (its first)."""
    lines = open(__file__).read().splitlines()
    start = lines.index("def register_a_checked(A, B, C, M: tj.constexpr, LF: tj.constexpr = None,")
    return next(i for i, line in enumerate(lines[start:], start + 1)
                if line.strip().startswith(text))


@pytest.mark.team_once_only("the per-thread wgmma rule's refusals (compiled with simt=True)")
@pytest.mark.parametrize("options, reason", [
    (dict(LF=blocked_layout((64, 16), lanes=32, warps=4, warp_axis="warpid", vector=2)),
     r"A is laid out by .*; wgmma reads A from registers in the layout .* "
     r"\(layout.hw_nvidia.wgmma_a_register_layout\(\(64, 16\)\)\)"),
    (dict(dtype=tj.float8_e4m3),
     r"A is a f8e4m3 fragment: wgmma reads A from registers as f16 or bf16"),
    (dict(m=32), r"M, N, K = 32, 32, 16: wgmma m64nNk16 takes M a multiple of 64"),
])
def test_register_a_refusals_name_the_gemm_line(options, reason):
    with pytest.raises(tj.DispatchError, match=reason) as info:
        _checked(**options)
    assert info.value.line == _source_line('tj.gemm_async(acc, a, b, dispatch="wgmma")')


@pytest.mark.team_once_only("compiled with simt=True: the tile-level check, once")
def test_a_registers_written_while_the_group_is_in_flight_is_located():
    """The PTX ISA: A's registers must not be touched until the wait that retires the
    multiply reading them (as the accumulators)."""
    with pytest.raises(CompilationError, match=r"copy touches 'a' while the wgmma group of the "
                                               r"gemm_async at line \d+ \(wait=False\)") as info:
        _checked(REWRITE_A=True)
    assert info.value.line == _source_line("tj.copy(a, a_shared)") + 5   # the one in flight


@tj.kernel
def register_a_in_flight(A, B, C, OVERWRITE_B: tj.constexpr = False):
    """C = A @ B, the group left in flight over a rewrite of B's shared tile (OVERWRITE_B):
    the multiply may still read B there, A being in its registers."""
    a_shared = tj.alloc_shared((64, 16), A.dtype, layout=_shared((64, 16)))
    b = tj.alloc_shared((16, 32), B.dtype, layout=_shared((16, 32)))
    tj.copy(a_shared, A[0:64, 0:16])
    tj.copy(b, B[0:16, 0:32])
    tj.sync()
    a = tj.fragment((64, 16), A.dtype)
    tj.copy(a, a_shared)
    acc = tj.fragment((64, 32), tj.float32)
    tj.fill(acc, 0.0)
    tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)
    if OVERWRITE_B:
        tj.copy(b, B[0:16, 0:32])   # rewrite B in flight
    tj.wgmma_wait(0)
    tj.copy(C[0:64, 0:32], acc)


@pytest.mark.team_once_only("the race detector runs in the per-thread lowering")
def test_rewriting_b_while_a_register_a_group_is_in_flight_is_a_race():
    """The queued multiply records B's reads at the wait (A's registers are not shared
    memory: nothing to record for them)."""
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 16, generator=gen).half(), torch.randn(16, 32, generator=gen).half()
    c = torch.zeros(64, 32)
    register_a_in_flight[(1,)](a, b, c, simt=True)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    with pytest.raises(tj.LaunchError, match=r"data race on shared buffer 'b'"):
        register_a_in_flight[(1,)](a, b, c, simt=True, OVERWRITE_B=True)


@pytest.mark.team_once_only("reads the IR after layout inference (compiled with simt=True)")
def test_layout_inference_gives_a_its_register_layout():
    """The fragment read as A gets wgmma_a_register_layout, noted as the tensor cores' A
    operand; the CTA's 4 warps are the warpgroup (warp axis warpid)."""
    compiled = _checked()
    passes = [name for name, _ in PIPELINE]
    passes = passes[:passes.index("infer-fragment-layouts") + 1]
    text = run_pipeline(parse_kernel(compiled.asm["ir"]), dump=(),
                        passes=passes)[1]["infer-fragment-layouts"]
    (a,) = [line for line in text.splitlines() if line.strip().startswith("%a = alloc")]
    layout = wgmma_a_register_layout((64, 16), warp_axis="warpid")
    assert f'layout = "{layout}"' in a
    gemm_line = _source_line('tj.gemm_async(acc, a, b, dispatch="wgmma")')
    assert f'layout_note = "inferred: the tensor-core A operand of the wgmma at line {gemm_line}' \
        in a
