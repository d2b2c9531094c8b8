"""The NKI reference (nki_reference.py) runs hand-written modules of the contract to numpy's
answers (its checks: test_nki_reference_limits.py)."""
import numpy as np
import pytest
from nki_kernels import ATTENTION, CAUSAL_T, RMSNORM, SOFTMAX, gemm, module
from nki_reference import run

RNG = np.random.default_rng(15)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- kernels against numpy

@pytest.mark.parametrize("seed", [0, 1])
def test_gemm_accumulates_k_in_psum(seed):
    a_t, b = randn(300, 200), randn(300, 600)          # K, M, N all ragged
    out = run(gemm(), "gemm", a_t, b, seed=seed)
    np.testing.assert_allclose(out, a_t.T @ b, rtol=1e-4, atol=1e-4)


def test_gemm_bfloat16_inputs_round_then_sum_in_fp32():
    a_t, b = randn(130, 70), randn(130, 90)
    out = run(gemm("bfloat16"), "gemm", a_t, b)
    def to_bf16(x):
        bits = x.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    np.testing.assert_allclose(out, to_bf16(a_t).T @ to_bf16(b), rtol=1e-4, atol=1e-4)
    assert np.abs(out - a_t.T @ b).max() > 1e-3         # the rounding did happen


def test_softmax_rows():
    x = randn(200, 300) * 4
    out = run(SOFTMAX, "softmax", x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_rmsnorm():
    x, w = randn(130, 96), randn(96)
    out = run(RMSNORM, "rmsnorm", x, w)
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def attention_reference(q, k, v):
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s = np.where(np.tri(q.shape[1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_causal_attention_forward():
    q, k, v = randn(2, 128, 64), randn(2, 128, 64), randn(2, 128, 64)
    out = run(ATTENTION, "attention", q, k, v)
    np.testing.assert_allclose(out, attention_reference(q, k, v), rtol=1e-4, atol=1e-5)


def test_transpose_and_causal_select():
    x = randn(96, 96)
    out = run(CAUSAL_T, "causal_t", x)
    np.testing.assert_array_equal(out, np.where(np.tri(96, dtype=bool), x.T, -1e4))


def test_iota_pattern_offset_and_channel_multiplier():
    src = module("""
        out = nl.ndarray((8, 12), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 3, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[10, 3], [1, 4]], offset=5, channel_multiplier=100)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, params="")
    p, i, j = np.meshgrid(np.arange(8), np.arange(3), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(run(src, "k"), (5 + 100 * p + 10 * i + j).reshape(8, 12))


# One instruction each: the body computes SBUF tile ``y`` (8 x 6 float32, from ``t`` = x).
ONE_INSTRUCTION = {
    "tensor_scalar reversed, two ops": (
        "nisa.tensor_scalar(dst=y, data=t, op0=nl.subtract, operand0=1.0, reverse0=True, "
        "op1=nl.multiply, operand1=3.0)", lambda x: (1.0 - x) * 3.0),
    "tensor_scalar per-partition vector": (
        "v = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
        "nisa.iota(dst=v, pattern=[[0, 1]], channel_multiplier=2)\n"
        "nisa.tensor_scalar(dst=y, data=t, op0=nl.add, operand0=v)",
        lambda x: x + 2.0 * np.arange(8)[:, None]),
    "tensor_tensor compare": (
        "nisa.tensor_tensor(dst=y, data1=t, data2=t0, op=nl.greater)",
        lambda x: (x > 0).astype(np.float32)),
    "activation scale and bias": (
        "nisa.activation(dst=y, op=nl.tanh, data=t, scale=0.5, bias=b)",
        lambda x: np.tanh(0.5 * x + 0.25)),
    "tensor_reduce two trailing axes, negated": (
        "t3 = t[0:8, 0:6]\n"
        "r = nl.ndarray((8, 2, 3), dtype=nl.float32, buffer=nl.sbuf)\n"
        "nisa.tensor_copy(dst=r, src=t3)\n"
        "s = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
        "nisa.tensor_reduce(dst=s, op=nl.add, data=r, axis=(1, 2), negate=True)\n"
        "nisa.tensor_scalar(dst=y, data=t0, op0=nl.add, operand0=s)",
        lambda x: np.broadcast_to(-x.sum(1, keepdims=True), (8, 6))),
    "bfloat16 round trip": (
        "h = nl.ndarray((8, 6), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
        "nisa.tensor_copy(dst=h, src=t)\n"
        "nisa.tensor_copy(dst=y, src=h)",
        lambda x: ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1))
                   & 0xFFFF0000).view(np.float32)),
}


@pytest.mark.parametrize("name", ONE_INSTRUCTION)
def test_one_instruction(name):
    body, want = ONE_INSTRUCTION[name]
    src = module("""
        out = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        t0 = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t0, value=0.0)
        b = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=b, value=0.25)
        y = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.sbuf)
        BODY
        nisa.dma_copy(dst=out, src=y)
        return out
    """).replace("BODY", body.replace("\n", "\n    "))
    x = randn(8, 6)
    np.testing.assert_allclose(run(src, "k", x), want(x), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- the NKI simulator

CASES = [
    (gemm(), "gemm", lambda: (randn(300, 200), randn(300, 600)), lambda a, b: a.T @ b),
    (SOFTMAX, "softmax", lambda: (randn(200, 300),),
     lambda x: np.exp(x - x.max(1, keepdims=True))
     / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    (RMSNORM, "rmsnorm", lambda: (randn(130, 96), randn(96)),
     lambda x, w: x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w),
    (ATTENTION, "attention", lambda: (randn(2, 128, 64), randn(2, 128, 64), randn(2, 128, 64)),
     lambda q, k, v: attention_reference(q, k, v)),
]


@pytest.mark.parametrize("source,name,inputs,want", CASES, ids=[c[1] for c in CASES])
def test_same_modules_on_the_nki_simulator(source, name, inputs, want, tmp_path):
    """On a Neuron machine: the modules the reference runs give numpy's answers on
    nki.simulate too, so the reference and NKI agree on their meaning."""
    # nki.language, not nki: under pytest a test directory named nki is importable as a
    # namespace package called nki
    pytest.importorskip("nki.language")
    import importlib.util

    import nki
    path = tmp_path / f"{name}.py"            # nki.jit reads the kernel's source file
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"nki_sim_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = inputs()
    out = nki.simulate(getattr(mod, name))(*args)
    np.testing.assert_allclose(np.asarray(out), want(*args), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(run(source, name, *args), want(*args), rtol=1e-3, atol=1e-3)
