"""Row softmax and RMSNorm on the nki target: one engine instruction per tile primitive
(tensor_reduce, tensor_scalar with a row statistic, activation), the lines that matter,
the module on the NKI reference against torch, and the same kernels on the CPU."""
import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.kernels import rmsnorm, softmax

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")


def lint_clean(source: str) -> bool:
    """The module keeps to the NKI compiler's Python subset (the lint beside the tests)."""
    nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")
    return nki_lint.lint(source) == []


def spec(*shape):
    return tj.TensorSpec(shape, tj.float32)


def body(source: str) -> list[str]:
    """The instructions and loops, stripped, without the line comments."""
    return [line.strip() for line in source.splitlines()
            if line.strip().startswith(("nisa.", "for "))]


def test_softmax_is_one_instruction_per_primitive():
    compiled = softmax.compile(spec(256, 200), spec(256, 200), R=256, N=200, target="nki")
    assert [(r.primitive, r.rule) for r in compiled.dispatch_log] == [
        ("copy", "dma"), ("reduce", "tensor_reduce"), ("pointwise", "engine"),
        ("pointwise", "engine"), ("reduce", "tensor_reduce"), ("pointwise", "engine"),
        ("copy", "dma")]
    assert body(compiled.asm["nki"]) == [
        "for r in nl.affine_range(2):",   # tiles allocated per block: nothing carried
        "nisa.dma_copy(dst=t, src=x[r * 128:r * 128 + 128, 0:200])",
        "nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=t, axis=1, keepdims=True)",
        "nisa.tensor_scalar(dst=t, data=t, op0=nl.subtract, operand0=row_max)",
        "nisa.activation(dst=t, op=nl.exp, data=t)",
        "nisa.tensor_reduce(dst=row_sum, op=nl.add, data=t, axis=1, keepdims=True)",
        "nisa.tensor_scalar(dst=t, data=t, op0=nl.divide, operand0=row_sum)",
        "nisa.dma_copy(dst=out[r * 128:r * 128 + 128, 0:200], src=t)",
    ]
    assert lint_clean(compiled.asm["nki"])
    x = np.random.default_rng(0).standard_normal((256, 200), dtype=np.float32) * 4
    y = reference.run(compiled.asm["nki"], "softmax", x, strict_reads=True)
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x), 1).numpy(),
                               rtol=1e-5, atol=1e-7)


def test_rmsnorm_scales_rows_by_a_column_and_a_number():
    compiled = rmsnorm.compile(spec(384, 96), spec(128, 96), spec(384, 96), R=384, N=96,
                               target="nki")
    lines = body(compiled.asm["nki"])
    assert "nisa.tensor_scalar(dst=ms, data=ms, op0=nl.add, operand0=1e-06)" in lines
    assert "nisa.activation(dst=ms, op=nl.rsqrt, data=ms)" in lines
    assert "nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=ms)" in lines
    assert "nisa.tensor_tensor(dst=t, data1=t, data2=weight, op=nl.multiply)" in lines
    assert lint_clean(compiled.asm["nki"])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((384, 96), dtype=np.float32)
    w = rng.standard_normal(96, dtype=np.float32)
    rows = np.broadcast_to(w, (128, 96)).copy()
    y = reference.run(compiled.asm["nki"], "rmsnorm", x, rows, strict_reads=True)
    expected = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_a_left_hand_number_reverses_the_operands():
    @tj.kernel
    def reciprocal_minus(x, out):
        with tj.thread():
            t = tj.alloc_shared((128, 32), tj.float32)
            tj.copy(t, x[0:128, 0:32])
            tj.sub(t, 1.0, t)
            tj.copy(out[0:128, 0:32], t)

    compiled = reciprocal_minus.compile(spec(128, 32), spec(128, 32), target="nki")
    assert ("nisa.tensor_scalar(dst=t, data=t, op0=nl.subtract, operand0=1.0, reverse0=True)"
            in body(compiled.asm["nki"]))
    x = np.random.default_rng(2).standard_normal((128, 32), dtype=np.float32)
    np.testing.assert_allclose(reference.run(compiled.asm["nki"], "reciprocal_minus", x),
                               1 - x, rtol=1e-6)


def test_the_same_kernels_run_on_the_cpu():
    x = torch.randn(256, 200)
    out = torch.empty_like(x)
    softmax[(1,)](x, out, R=256, N=200, num_warps=1)
    torch.testing.assert_close(out, torch.softmax(x, 1))
    w = torch.randn(200)
    rmsnorm[(1,)](x, w.expand(128, 200).contiguous(), out, R=256, N=200, num_warps=1)
    expected = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
