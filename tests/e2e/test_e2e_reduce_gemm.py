"""reduce (sum/max/min over each axis, the axis dropped or kept as 1) and gemm (both
transposes, accum, shared and fragment operands) per dtype, with masked edge tiles and K
not a multiple of the K tile."""
import numpy as np
import pytest
import torch
from e2e_helpers import assert_close, assert_guard_intact, guarded, make, torch_dtype

import tilejit as tj
from tilejit.passes import reference

H, W, BM, BN = 45, 70, 16, 32            # 3 x 3 tiles, the last row and column masked
GM, GN = tj.cdiv(H, BM), tj.cdiv(W, BN)


@tj.kernel
def reduce2d(x, out0, out1, out0k, out1k, OP: tj.constexpr, BM: tj.constexpr,
             BN: tj.constexpr):
    i = tj.cta_id(0)
    j = tj.cta_id(1)
    r = i * BM
    c = j * BN
    a = tj.fragment((BM, BN), x.dtype)
    tj.copy(a, x[r:r + BM, c:c + BN])            # zero-filled past the end
    d0 = tj.fragment((BN,), out0.dtype)
    tj.reduce(d0, a, OP, axis=0)
    tj.copy(out0[i, c:c + BN], d0)
    d1 = tj.fragment((BM,), out1.dtype)
    tj.reduce(d1, a, OP, 1)
    tj.copy(out1[j, r:r + BM], d1)
    d0k = tj.fragment((1, BN), out0k.dtype)
    tj.reduce(d0k, a, OP, axis=0)
    tj.copy(out0k[i:i + 1, c:c + BN], d0k)
    d1k = tj.fragment((BM, 1), out1k.dtype)
    tj.reduce(d1k, a, OP, axis=-1)
    tj.copy(out1k[r:r + BM, j:j + 1], d1k)


def _tiles(x: torch.Tensor) -> np.ndarray:
    """x zero-padded to whole tiles, as (GM, BM, GN, BN) float64."""
    padded = np.zeros((GM * BM, GN * BN))
    padded[:H, :W] = x.double().numpy()
    return padded.reshape(GM, BM, GN, BN)


REDUCE_CASES = [("float32", "float32"), ("float64", "float64"), ("float16", "float16"),
                ("bfloat16", "float32"), ("float8_e4m3", "float32"), ("int8", "int8"),
                ("int32", "int32"), ("int64", "int64"), ("uint8", "uint8"),
                ("int16", "int32")]


# every op for most dtypes; one op for the dtypes that only add a conversion
CASES = [(s, d, op) for s, d in REDUCE_CASES for op in ("sum", "max", "min")
         if op == "sum" or s not in ("int16", "float8_e4m3")]


@pytest.mark.parametrize("src,dst,op", CASES)
def test_reduce_each_axis(src, dst, op):
    gen = torch.Generator().manual_seed(17)
    x = make((H, W), src, gen)
    outs = [guarded(s, dst) for s in [(GM, W), (GN, H), (GM, W), (H, GN)]]
    reduce2d[(GM, GN)](x, *(o for o, _ in outs), OP=op, BM=BM, BN=BN)
    tiles = _tiles(x)
    np_dst = np.dtype("int64") if "int" in dst else np.float64
    fold = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    per_col = fold(tiles, axis=1).reshape(GM, GN * BN)[:, :W]       # (GM, W)
    per_row = fold(tiles, axis=3).transpose(2, 0, 1).reshape(GN, GM * BM)[:, :H]  # (GN, H)
    expected = [per_col, per_row, per_col, per_row.T]
    for (out, whole), e, shape in zip(outs, expected, [(GM, W), (GN, H), (GM, W), (H, GN)]):
        e = torch.from_numpy(np.asarray(e, np_dst))
        if "int" in dst:   # integer sums fold in the destination's dtype: they wrap
            e = e.to(torch.int64).to(torch_dtype(dst))
        assert_close(out, e.to(torch_dtype(dst)), dst)
        assert_guard_intact(whole, shape, dst)


def test_reduce_3d_middle_axis_matches_reference():
    @tj.kernel
    def reduce3d(x, out, A: tj.constexpr, B: tj.constexpr, C: tj.constexpr):
        t = tj.fragment((A, B, C), x.dtype)
        tj.copy(t, x[0:A, 0:B, 0:C])
        d = tj.fragment((A, 1, C), out.dtype)
        tj.reduce(d, t, "max", axis=1)
        tj.copy(out[0:A, 0:1, 0:C], d)

    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    out = np.zeros((3, 1, 7), np.float32)
    reduce3d[(1,)](x, out, A=3, B=5, C=7)
    np.testing.assert_array_equal(out, reference.reduce(out, x, "max", 1))


@tj.kernel
def gemm_tiled(A, B, C, K, TA: tj.constexpr, TB: tj.constexpr, STAGE: tj.constexpr,
               BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    a_s = tj.alloc_shared((BK, BM) if TA else (BM, BK), A.dtype)
    b_s = tj.alloc_shared((BN, BK) if TB else (BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), C.dtype)
    tj.copy(acc, C[m0:m0 + BM, n0:n0 + BN])      # accumulate onto C's old value
    for k0 in tj.range(0, K, BK):
        if TA:
            tj.copy(a_s, A[k0:k0 + BK, m0:m0 + BM])
        else:
            tj.copy(a_s, A[m0:m0 + BM, k0:k0 + BK])
        if TB:
            tj.copy(b_s, B[n0:n0 + BN, k0:k0 + BK])
        else:
            tj.copy(b_s, B[k0:k0 + BK, n0:n0 + BN])
        tj.sync()
        if STAGE == "fragment":
            a_f = tj.fragment((BK, BM) if TA else (BM, BK), A.dtype)
            b_f = tj.fragment((BN, BK) if TB else (BK, BN), B.dtype)
            tj.copy(a_f, a_s)
            tj.copy(b_f, b_s)
            tj.gemm(acc, a_f, b_f, transpose_a=TA, transpose_b=TB)
        else:
            tj.gemm(acc, a_s, b_s, transpose_a=TA, transpose_b=TB, accum=True)
        tj.sync()
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


def _run_gemm(ab: str, c: str, ta=False, tb=False, stage="shared", M=50, N=37, K=40,
              bm=16, bn=16, bk=16):
    gen = torch.Generator().manual_seed(23)
    A = make((K, M) if ta else (M, K), ab, gen, -4, 4)
    B = make((N, K) if tb else (K, N), ab, gen, -4, 4)
    C, whole = guarded((M, N), c)
    C.copy_(make((M, N), c, gen, -4, 4))
    before = C.clone()
    gemm_tiled[(tj.cdiv(M, bm), tj.cdiv(N, bn))](A, B, C, K, TA=ta, TB=tb, STAGE=stage,
                                                 BM=bm, BN=bn, BK=bk)
    a = A.double().T if ta else A.double()
    b = B.double().T if tb else B.double()
    expected = before.double() + a @ b
    assert_close(C, expected.to(torch_dtype(c)), c)
    assert_guard_intact(whole, (M, N), c)


@pytest.mark.parametrize("ab,c", [("float32", "float32"), ("float64", "float64"),
                                  ("float16", "float32"), ("bfloat16", "float32"),
                                  ("float8_e4m3", "float32"), ("float8_e5m2", "float32"),
                                  ("int8", "int32"), ("uint8", "int32"), ("int32", "int64")])
def test_gemm_dtypes(ab, c):
    _run_gemm(ab, c)


@pytest.mark.parametrize("stage", ["shared", "fragment"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(ta, tb, stage):
    _run_gemm("float32", "float32", ta, tb, stage, M=40, N=24, K=30, bm=24, bn=24, bk=8)


def test_gemm_accum_false_overwrites():
    @tj.kernel
    def gemm_once(A, B, C, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr):
        a = tj.alloc_shared((M, K), A.dtype)
        b = tj.alloc_shared((K, N), B.dtype)
        tj.copy(a, A[0:M, 0:K])
        tj.copy(b, B[0:K, 0:N])
        tj.sync()
        acc = tj.fragment((M, N), C.dtype)
        tj.fill(acc, 100.0)
        tj.gemm(acc, a, b, accum=False)
        tj.copy(C[0:M, 0:N], acc)

    A = torch.randn(12, 7, dtype=torch.float64)
    B = torch.randn(7, 9, dtype=torch.float64)
    C = torch.zeros(12, 9, dtype=torch.float64)
    gemm_once[(1,)](A, B, C, M=12, N=9, K=7)
    torch.testing.assert_close(C, A @ B)
