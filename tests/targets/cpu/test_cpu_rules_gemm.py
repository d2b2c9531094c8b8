"""The CPU ``blocked`` gemm family: register-blocked micro-kernel vs torch on odd shapes,
both transposes, accum, f16/bf16 inputs, shared and fragment A, config shapes; declines
(with reasons in the dispatch log) hand the call to the ``fma`` fallback."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from rule_kernels import fresh_cache, gemm_tile, host_assembly, records  # noqa: F401
from support.tile_kernels import dispatched, global_matrix, lowered, make_kernel

from tilejit.examples import matmul, run_matmul
from tilejit.ir.types import MemScope, f32, i32
from tilejit.layout import ComposeLayout, TileLayout
from tilejit.passes.dispatch import PER_THREAD
from tilejit.targets import cpu

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# (M, N, K, transpose_a, transpose_b, accum, input dtype, A's scope)
CASES = [
    (1, 1, 1, False, False, True, "f32", "shared"),
    (7, 13, 5, False, False, False, "f32", "shared"),
    (17, 40, 9, True, False, True, "f32", "shared"),      # N = 32 + 8: a masked vector
    (33, 70, 31, False, True, True, "f32", "fragment"),   # edges in both M and N
    (8, 32, 16, True, True, False, "f32", "fragment"),    # exactly one block
    (50, 100, 3, False, False, True, "f16", "shared"),
    (9, 48, 65, True, True, True, "bf16", "shared"),
    (24, 17, 12, False, True, False, "bf16", "fragment"),
]


def run_gemm(m, n, k, ta, tb, accum, dtype, a_scope, shape=None, c_dtype=torch.float32,
             seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((k, m) if ta else (m, k), generator=gen).to(DTYPES[dtype])
    b = torch.randn((n, k) if tb else (k, n), generator=gen).to(DTYPES[dtype])
    c = torch.randn((m, n), generator=gen).to(c_dtype)
    expected = (a.float().T if ta else a.float()) @ (b.float().T if tb else b.float())
    if accum:
        expected += c.float()
    meta = dict(M=m, N=n, K=k, TA=ta, TB=tb, ACC=accum, A_SCOPE=a_scope, SHAPE=shape)
    compiled = gemm_tile.warmup(a, b, c, **meta)
    gemm_tile[(1,)](a, b, c, **meta)
    return compiled, c, expected


@pytest.mark.parametrize("m,n,k,ta,tb,accum,dtype,a_scope", CASES)
def test_blocked_gemm_matches_torch(m, n, k, ta, tb, accum, dtype, a_scope):
    compiled, c, expected = run_gemm(m, n, k, ta, tb, accum, dtype, a_scope)
    (record,) = records(compiled, "gemm")
    assert record.rule == "blocked" and not record.fallback
    torch.testing.assert_close(c, expected, rtol=1e-5, atol=1e-5)


def test_config_picks_another_legal_block():
    compiled, c, expected = run_gemm(19, 37, 11, False, False, True, "f32", "shared",
                                     shape=(4, 16, 1))
    (record,) = records(compiled, "gemm")
    assert (record.rule, record.shape) == ("blocked", (4, 16, 1))
    torch.testing.assert_close(c, expected, rtol=1e-5, atol=1e-5)


def test_a_half_precision_accumulator_falls_back_to_fma_with_the_reason():
    compiled, c, expected = run_gemm(6, 10, 4, False, False, True, "f16", "shared",
                                     c_dtype=torch.float16)
    (record,) = records(compiled, "gemm")
    assert record.rule == "fma" and record.fallback
    assert ("blocked", "C is f16: the micro-kernel accumulates in f32 vectors") in \
        record.rejected
    torch.testing.assert_close(c.float(), expected, rtol=1e-2, atol=1e-2)


def _ir_gemm(a_layout=None, c_dtype=f32, c_scope=MemScope.FRAGMENT, c_layout=None):
    """An IR kernel: A (16 x 8, optionally laid out) and B (8 x 32) in shared memory,
    C = A @ B in a fragment (or shared memory), written back."""
    def body(b, a, bm, c):
        zero = b.const(0, i32)
        sa = b.alloc(MemScope.SHARED, f32, (16, 8), a_layout)
        b.tile("copy", sa, b.region(a, [zero, zero], (16, 8)))
        sb = b.alloc(MemScope.SHARED, f32, (8, 32))
        b.tile("copy", sb, b.region(bm, [zero, zero], (8, 32)))
        sc = b.alloc(c_scope, c_dtype, (16, 32), c_layout)
        b.tile("gemm", sc, sa, sb, transpose_a=False, transpose_b=False, accum=False)
        b.tile("copy", b.region(c, [zero, zero], (16, 32)), sc)
    return make_kernel([("A", global_matrix(f32)), ("B", global_matrix(f32)),
                        ("C", global_matrix(c_dtype))], body, target="cpu")


def _gemm_record(kernel, context=cpu.CONTEXT):
    _, log = dispatched(kernel, context)
    (record,) = [r for r in log if r.primitive == "gemm"]
    return record


def _swizzled(rows, cols):
    return ComposeLayout.for_mode("B32", 4, TileLayout.parse(f"({rows},{cols}):({cols},1)"))


def test_a_swizzled_a_is_packed_and_a_swizzled_c_falls_back():
    kernel = _ir_gemm(a_layout=_swizzled(16, 8))
    lowered_kernel, log = lowered(kernel, cpu.CONTEXT)
    assert [r.rule for r in log if r.primitive == "gemm"] == ["blocked"]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 32), np.float32)
    c = np.zeros((16, 32), np.float32)
    cpu.load(cpu.compile(lowered_kernel)).launch(1, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    record = _gemm_record(_ir_gemm(c_scope=MemScope.SHARED, c_layout=_swizzled(16, 32)))
    assert record.rule == "fma" and record.fallback
    assert "swizzled layout" in dict(record.rejected)["blocked"]


def test_declines_are_logged_and_the_fallback_runs():
    record = _gemm_record(_ir_gemm(c_dtype=i32))
    assert record.rule == "fma" and record.fallback
    assert "C is i32" in dict(record.rejected)["blocked"]
    per_thread = replace(cpu.CONTEXT, distribution=PER_THREAD)
    record = _gemm_record(_ir_gemm(), per_thread)
    assert "team_once" in dict(record.rejected)["blocked"]
    assert _gemm_record(_ir_gemm()).rule == "blocked"


def test_example_matmul_with_edge_tiles_matches_torch_and_uses_vector_fmas():
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(100, 130, generator=gen), torch.randn(130, 70, generator=gen)
    c = torch.empty(100, 70)
    run_matmul(a, b, c, 64, 64, 64)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    compiled = matmul.warmup(a, b, c, BM=64, BN=64, BK=64)
    assert records(compiled, "gemm")[0].rule == "blocked"
    width = cpu.CONTEXT.vector_bytes // 4
    assert f"llvm.fma.v{width}f32" in compiled.asm["llir"]
    if width >= 8:   # AVX2 or AVX-512 host: the FMAs run on ymm/zmm registers
        register = "%zmm" if width == 16 else "%ymm"
        fmas = [line for line in host_assembly(compiled).splitlines()
                if "vfmadd" in line and register in line]
        assert len(fmas) >= 16
