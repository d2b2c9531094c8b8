"""Attention forward for one head on the nki target: two nc_matmul gemms around a row
softmax, the probabilities turned onto the key partitions by a copy between layouts
(nc_transpose), on the NKI reference against torch and on the CPU."""
import math

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.layout.hw_trainium import sbuf_layout

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")


def lint_clean(source: str) -> bool:
    """The module keeps to the NKI compiler's Python subset (the lint beside the tests)."""
    nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")
    return nki_lint.lint(source) == []

S, D = 128, 64
HEAD_DIM_ON_P = sbuf_layout((S, D), partition_dim=1)   # [S, D] with D on the partitions
KEYS_ON_P = sbuf_layout((S, S), partition_dim=1)       # [S_q, S_k] with S_k on them


@tj.kernel
def attention(q, k, v, out, scale: tj.constexpr):
    with tj.thread():
        Q = tj.alloc_shared((S, D), tj.float32, layout=HEAD_DIM_ON_P)
        K = tj.alloc_shared((S, D), tj.float32, layout=HEAD_DIM_ON_P)
        V = tj.alloc_shared((S, D), tj.float32)
        scores = tj.alloc_shared((S, S), tj.float32)
        probs_t = tj.alloc_shared((S, S), tj.float32, layout=KEYS_ON_P)
        row_max = tj.alloc_shared((S, 1), tj.float32)
        row_sum = tj.alloc_shared((S, 1), tj.float32)
        o = tj.alloc_shared((S, D), tj.float32)
        tj.copy(Q, q[0:S, 0:D])
        tj.copy(K, k[0:S, 0:D])
        tj.copy(V, v[0:S, 0:D])
        tj.gemm(scores, Q, K, transpose_b=True, accum=False)
        tj.mul(scores, scores, scale)
        tj.reduce(row_max, scores, "max", axis=1)
        tj.sub(scores, scores, row_max)
        tj.exp(scores, scores)
        tj.reduce(row_sum, scores, "sum", axis=1)
        tj.copy(probs_t, scores)
        tj.gemm(o, probs_t, V, accum=False)
        tj.div(o, o, row_sum)
        tj.copy(out[0:S, 0:D], o)


def spec(*shape):
    return tj.TensorSpec(shape, tj.float32)


@pytest.fixture(scope="module")
def compiled():
    return attention.compile(spec(S, D), spec(S, D), spec(S, D), spec(S, D),
                             scale=1 / math.sqrt(D), target="nki")


def inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((S, D), dtype=np.float32) for _ in range(3)]


def expected(q, k, v):
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v).numpy()


def test_attention_dispatches_two_matmuls_and_a_transpose(compiled):
    log = [(r.primitive, r.rule) for r in compiled.dispatch_log]
    assert log.count(("gemm", "nc_matmul")) == 2 and ("copy", "nc_transpose") in log
    source = [line.strip() for line in compiled.asm["nki"].splitlines()]
    assert "nisa.nc_matmul(dst=acc, stationary=Q, moving=K)" in source
    assert "nisa.nc_transpose(dst=transposed_2, data=scores)" in source
    assert "nisa.tensor_copy(dst=probs_t, src=transposed_2)" in source
    assert "nisa.nc_matmul(dst=acc_1, stationary=probs_t, moving=V)" in source
    assert lint_clean(compiled.asm["nki"])


@pytest.mark.parametrize("seed", [0, 1])
def test_attention_runs_on_the_reference_as_torch_computes_it(compiled, seed):
    q, k, v = inputs(seed)
    out = reference.run(compiled.asm["nki"], "attention", q, k, v, seed=seed,
                        strict_reads=True)
    np.testing.assert_allclose(out, expected(q, k, v), rtol=1e-4, atol=1e-5)


def test_attention_runs_on_the_cpu():
    q, k, v = inputs(2)
    out = torch.zeros(S, D)
    attention[(1,)](*(torch.from_numpy(x) for x in (q, k, v)), out, scale=1 / math.sqrt(D),
                    num_warps=1)
    np.testing.assert_allclose(out.numpy(), expected(q, k, v), rtol=1e-4, atol=1e-5)
