"""gemm_async family ``wgmma`` on fp8 (e4m3 / e5m2, mixed): m64nNk32, K-major operands in
every swizzle, against torch's f32 matmul of the fp8 values (exact in f32, so only the sum's
rounding differs); an MN-major fp8 operand and an arch without wgmma are located refusals.
The kernel is ``test_e2e_wgmma``'s."""
import inspect

import pytest
import torch
from test_e2e_wgmma import MODES, wgmma_gemm

import tilejit as tj
from tilejit.layout import smem_layout

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NAMES = {E4M3: "float8_e4m3", E5M2: "float8_e5m2"}


def fp8_layouts(m, n, k, a_swizzle, b_swizzle, a_type, b_type, b_mn_major=False):
    """A [M, K] K-major; B [N, K] K-major (transpose_b), or [K, N] (MN-major) if asked."""
    return dict(LA=smem_layout((m, k), NAMES[a_type], MODES[a_swizzle]),
                LB=smem_layout((k, n) if b_mn_major else (n, k), NAMES[b_type],
                               MODES[b_swizzle]),
                TB=not b_mn_major)


@pytest.mark.parametrize("m, n, k, a_swizzle, b_swizzle, a_type, b_type", [
    (64, 40, 96, 0, 0, E4M3, E4M3),          # K = 3 k-steps, N = 40: neither a power of two
    (64, 24, 96, 32, 32, E5M2, E5M2),
    (128, 48, 128, 64, 128, E4M3, E5M2),     # two row blocks; e4m3 by e5m2
    (64, 56, 160, 32, 0, E5M2, E4M3)])
def test_fp8_wgmma_matches_torch(lowering, m, n, k, a_swizzle, b_swizzle, a_type, b_type):
    gen = torch.Generator().manual_seed(m + n + k)
    a = (torch.randn(m, k, generator=gen) * 4).to(a_type)
    b = (torch.randn(n, k, generator=gen) * 4).to(b_type)
    c = torch.randn(m, n, generator=gen)
    expected = c.double() + a.double() @ b.double().T
    options = dict(N=n, K=k, M=m, ACCUM=True,
                   **fp8_layouts(m, n, k, a_swizzle, b_swizzle, a_type, b_type))
    wgmma_gemm[(1,)](a, b, c, **options)
    torch.testing.assert_close(c.double(), expected, rtol=1e-5, atol=1e-4)
    (record,) = [r for r in wgmma_gemm.compile(a, b, c, **options).dispatch_log
                 if r.primitive == "gemm_async"]
    assert record.rule == "wgmma"
    if lowering == "per_thread":
        assert record.shape == (64, n, 32)
        assert record.note.startswith("A K-major") and "; B K-major" in record.note


def _compile(b_mn_major=False, k=128, swizzle=128, **options):
    device = "cuda" if options.get("target") == "cuda" else "cpu"
    m, n = 64, 128
    tensors = (tj.TensorSpec((m, k), tj.float8_e4m3, device=device),
               tj.TensorSpec((k, n) if b_mn_major else (n, k), tj.float8_e4m3, device=device),
               tj.TensorSpec((m, n), tj.float32, device=device))
    return wgmma_gemm.compile(*tensors, N=n, K=k, M=m, simt=True, **options,
                              **fp8_layouts(m, n, k, swizzle, swizzle, E4M3, E4M3, b_mn_major))


@pytest.mark.parametrize("options, reason", [
    (dict(b_mn_major=True), r"B is f8e4m3 stored MN-major: wgmma reads fp8 operands K-major "
                            r"only \(the PTX ISA transposes f16 / bf16 only\)"),
    (dict(k=48, swizzle=0), r"M, N, K = 64, 128, 48: wgmma m64nNk32 takes M a multiple of 64, "
                            r"N a multiple of 8 up to 256 and K a multiple of 32"),
    (dict(target="cuda", arch="sm_80"), r"wgmma needs sm_90a; compiling for sm_80"),
])
def test_fp8_refusals_name_the_reason_and_the_line(options, reason):
    with pytest.raises(tj.DispatchError, match=reason) as info:
        _compile(**options)
    lines, first = inspect.getsourcelines(wgmma_gemm.fn)   # the gemm_async's own line
    assert info.value.line == first + next(i for i, line in enumerate(lines)
                                           if "tj.gemm_async(" in line)
