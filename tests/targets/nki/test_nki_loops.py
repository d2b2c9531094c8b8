"""Loop kinds in emitted NKI modules against the dependences they carry: a loop that
carries one (a PSUM accumulation whose first K step overwrites, the online softmax's
running max / sum / output across key blocks, a tile the kernel reuses per row block) is
printed as ``nl.sequential_range``, and the reference's shuffled ``nl.affine_range``
would catch a wrong choice: each such loop, mutated into ``nl.affine_range`` in the
emitted text, makes the reference raise or give a wrong answer. The loops printed as
``nl.affine_range`` (by a rule, or by the ``nki-independent-loops`` pass for a kernel loop
whose tiles are allocated inside it and whose writes move apart) run shuffled there and
still give torch's answer."""
import math

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.kernels import attention, nki_gemm, softmax

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")
RNG = np.random.default_rng(15)


def spec(*shape):
    return tj.TensorSpec(shape, tj.float32)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@tj.kernel
def psum_gemm(at, b, c, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr):
    """C = A @ B accumulated in a PSUM tile the kernel allocates: K > 128 makes a K loop
    whose first step overwrites (``accumulate=k != 0``)."""
    with tj.thread():
        A = tj.alloc_shared((K, M), tj.float32)
        B = tj.alloc_shared((K, N), tj.float32)
        acc = tj.alloc_psum((M, N), tj.float32)
        C = tj.alloc_shared((M, N), tj.float32)
        tj.copy(A, at[0:K, 0:M])
        tj.copy(B, b[0:K, 0:N])
        tj.gemm(acc, A, B, transpose_a=True, accum=False)
        tj.copy(C, acc)
        tj.copy(c[0:M, 0:N], C)


@tj.kernel
def reused_tiles(x, out, R: tj.constexpr, N: tj.constexpr):
    """Row softmax with its tiles allocated once, outside the row-block loop: every block
    reuses them, so the loop is sequential."""
    with tj.thread():
        t = tj.alloc_shared((128, N), tj.float32)
        row_max = tj.alloc_shared((128, 1), tj.float32)
        row_sum = tj.alloc_shared((128, 1), tj.float32)
        for r in range(R // 128):
            tj.copy(t, x[r * 128:r * 128 + 128, 0:N])
            tj.reduce(row_max, t, "max", axis=1)
            tj.sub(t, t, row_max)
            tj.exp(t, t)
            tj.reduce(row_sum, t, "sum", axis=1)
            tj.div(t, t, row_sum)
            tj.copy(out[r * 128:r * 128 + 128, 0:N], t)


@tj.kernel
def overlapping_rows(x, out, R: tj.constexpr, N: tj.constexpr):
    """Each block's tiles are its own, but block r writes rows r * 64 .. r * 64 + 127 of
    ``out``, half of them again in block r + 1: the blocks' order decides the result."""
    with tj.thread():
        for r in range(R // 64 - 1):
            t = tj.alloc_shared((128, N), tj.float32)
            tj.copy(t, x[r * 64:r * 64 + 128, 0:N])
            tj.exp(t, t)
            tj.copy(out[r * 64:r * 64 + 128, 0:N], t)


def loops(source: str, kind: str) -> list[int]:
    """Indices of the lines of ``source`` that open a ``kind`` loop."""
    return [i for i, line in enumerate(source.splitlines())
            if line.lstrip().startswith("for ") and f" in {kind}(" in line]


def as_affine(source: str, index: int) -> str:
    """``source`` with the sequential loop opening on line ``index`` claimed independent."""
    lines = source.splitlines()
    assert "nl.sequential_range(" in lines[index]
    lines[index] = lines[index].replace("nl.sequential_range(", "nl.affine_range(")
    return "\n".join(lines) + "\n"


def caught(source: str, name: str, inputs, want, seed: int) -> bool:
    """The reference refuses ``source`` or computes something other than ``want``."""
    try:
        got = reference.run(source, name, *inputs, seed=seed)
    except reference.NkiReferenceError:
        return True
    return not np.allclose(got, want, rtol=1e-4, atol=1e-4)


def psum_case():
    compiled = psum_gemm.compile(spec(256, 96), spec(256, 320), spec(96, 320), M=96, N=320,
                                 K=256, target="nki")
    at, b = randn(256, 96), randn(256, 320)
    return compiled.asm["nki"], "psum_gemm", (at, b), at.T @ b


def attention_case():
    H, S, D = 2, 256, 64
    qkv = spec(H, S, D)
    compiled = attention.compile(qkv, qkv, qkv, qkv, H=H, S=S, D=D, scale=1 / math.sqrt(D),
                                 target="nki")
    q, k, v = (randn(H, S, D) * 3 for _ in range(3))   # later blocks raise the row max
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in (q, k, v))).numpy()
    return compiled.asm["nki"], "attention", (q, k, v), want


def softmax_case(kernel=softmax):
    compiled = kernel.compile(spec(256, 64), spec(256, 64), R=256, N=64, target="nki")
    x = randn(256, 64)
    return (compiled.asm["nki"], kernel.__name__, (x,),
            torch.softmax(torch.from_numpy(x), 1).numpy())


def overlapping_case():
    compiled = overlapping_rows.compile(spec(256, 64), spec(256, 64), R=256, N=64,
                                        target="nki")
    x = randn(256, 64)
    return compiled.asm["nki"], "overlapping_rows", (x,), np.exp(x)


CASES = {"psum gemm K loop": psum_case, "attention key loop": attention_case,
         "row-block loop over reused tiles": lambda: softmax_case(reused_tiles),
         "row-block loop writing overlapping rows": overlapping_case}


@pytest.mark.parametrize("case", CASES)
def test_every_sequential_loop_turned_affine_is_caught_by_the_reference(case):
    source, name, inputs, want = CASES[case]()
    np.testing.assert_allclose(reference.run(source, name, *inputs, strict_reads=True), want,
                               rtol=1e-4, atol=1e-4)
    sequential = loops(source, "nl.sequential_range")
    assert sequential
    for index in sequential:
        for seed in range(3):   # no seed's shuffle happens to hide it
            assert caught(as_affine(source, index), name, inputs, want, seed), \
                source.splitlines()[index]


def test_the_psum_k_loop_is_sequential_because_its_first_step_overwrites():
    source = psum_case()[0].splitlines()
    at = loops("\n".join(source), "nl.sequential_range")
    assert [source[i].strip() for i in at] == ["for k in nl.sequential_range(2):"]
    assert source[at[0] + 1].strip() == (
        "nisa.nc_matmul(dst=acc, stationary=A[0:128, k, 0:96], moving=B[0:128, k, 0:320], "
        "accumulate=k != 0)")


def test_the_online_softmax_state_crosses_key_blocks_in_a_sequential_loop():
    source = attention_case()[0].splitlines()
    assert [source[i].strip() for i in loops("\n".join(source), "nl.sequential_range")] == [
        "for j in nl.sequential_range(2):"]
    assert [source[i].strip() for i in loops("\n".join(source), "nl.affine_range")
            if source[i].strip().startswith(("for h ", "for i "))] == [
        "for h in nl.affine_range(2):", "for i in nl.affine_range(2):"]


@pytest.mark.parametrize("kernel, kind", [(softmax, "nl.affine_range"),
                                          (reused_tiles, "nl.sequential_range"),
                                          (overlapping_rows, "nl.sequential_range")])
def test_a_kernel_loop_is_affine_only_when_its_iterations_share_nothing(kernel, kind):
    compiled = kernel.compile(spec(256, 64), spec(256, 64), R=256, N=64, target="nki")
    source = compiled.asm["nki"].splitlines()
    assert [line.strip() for line in source if line.strip().startswith("for r ")] == [
        f"for r in {kind}({3 if kernel is overlapping_rows else 2}):"]


def test_an_affine_kernel_loop_runs_shuffled_on_the_reference_as_torch_computes_it():
    source, name, inputs, want = softmax_case()
    state = reference.ReferenceRun("<nki:softmax>", seed=2, strict_reads=True)
    got = reference.run(source, name, *inputs, state=state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert state.affine_orders == [[1, 0]]   # the row blocks, second first


def test_the_rules_independent_loops_run_shuffled_and_agree_with_numpy():
    """The paper's GEMM: the copies' tile loops and the M / N loops are nl.affine_range;
    the reference runs each in a shuffled order (never first iteration first)."""
    compiled = nki_gemm.compile(spec(512, 1024), spec(1024, 256), spec(512, 256),
                                target="nki")
    source = compiled.asm["nki"]
    assert len(loops(source, "nl.affine_range")) >= 4
    state = reference.ReferenceRun("<nki:nki_gemm>", seed=5, strict_reads=True)
    a, b = randn(512, 1024), randn(1024, 256)
    c = reference.run(source, "nki_gemm", a, b, state=state)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    shuffled = [order for order in state.affine_orders if len(order) > 1]
    assert shuffled and all(order[0] != 0 for order in shuffled)


def test_the_papers_k_loop_would_also_be_legal_as_affine():
    """nc_matmul accumulating into a fresh PSUM tile (no accumulate flag) is an associative
    reduction, which NKI allows in nl.affine_range: the printed sequential K loop is
    conservative there, and the reference agrees the affine form computes the same."""
    compiled = nki_gemm.compile(spec(512, 1024), spec(1024, 256), spec(512, 256),
                                target="nki")
    source = compiled.asm["nki"]
    k_loop = [i for i in loops(source, "nl.sequential_range")
              if source.splitlines()[i].strip() == "for k in nl.sequential_range(8):"]
    assert len(k_loop) == 1
    a, b = randn(512, 1024), randn(1024, 256)
    c = reference.run(as_affine(source, k_loop[0]), "nki_gemm", a, b, seed=1)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
