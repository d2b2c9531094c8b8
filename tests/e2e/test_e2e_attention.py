"""Fused attention forward the Triton way (online softmax over key blocks, causal mask
from two aranges, `where`, expression reductions) against torch's
scaled_dot_product_attention, on sequence lengths that end inside a block."""
import math

import pytest
import torch

import tilejit as tj


@tj.kernel
def attention(q, k, v, out, seq, scale, CAUSAL: tj.constexpr, BM: tj.constexpr,
              BN: tj.constexpr, D: tj.constexpr):
    m0 = tj.cta_id(0) * BM
    qt = tj.fragment((BM, D), tj.float32)
    tj.copy(qt, q[m0:m0 + BM, 0:D])
    row_max = tj.full((BM, 1), float("-inf"), tj.float32)
    row_sum = tj.zeros((BM, 1), tj.float32)
    acc = tj.zeros((BM, D), tj.float32)
    rows = m0 + tj.arange(0, BM)
    for n0 in tj.range(0, seq, BN):
        kt = tj.fragment((BN, D), tj.float32)
        vt = tj.fragment((BN, D), tj.float32)
        tj.copy(kt, k[n0:n0 + BN, 0:D])
        tj.copy(vt, v[n0:n0 + BN, 0:D])
        s = tj.zeros((BM, BN), tj.float32)
        tj.gemm(s, qt, kt, transpose_b=True)
        cols = n0 + tj.arange(0, BN)
        keep = cols[None, :] < seq
        if CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        s = tj.where(keep, s * scale, float("-inf"))
        new_max = tj.maximum(row_max, tj.max(s, axis=1, keep_dims=True))
        p = tj.exp(s - new_max)
        rescale = tj.exp(row_max - new_max)
        row_sum = row_sum * rescale + tj.sum(p, axis=1, keep_dims=True)
        pv = tj.zeros((BM, D), tj.float32)
        tj.gemm(pv, p, vt)
        acc = acc * rescale + pv
        row_max = new_max
    tj.copy(out[m0:m0 + BM, 0:D], acc / row_sum)


@pytest.mark.parametrize("seq", [1, 37, 64, 101])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch(seq, causal):
    gen = torch.Generator().manual_seed(seq)
    d = 16
    q, k, v = (torch.randn(seq, d, generator=gen) for _ in range(3))
    out = torch.full((seq, d), 7.0)
    attention[(tj.cdiv(seq, 16),)](q, k, v, out, seq, 1 / math.sqrt(d), CAUSAL=causal,
                                   BM=16, BN=24, D=d)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], v[None], is_causal=causal)[0]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
