"""Rows whose length is not a multiple of the vector width (issue 12): the example softmax
and layer norm (tilejit/examples) against torch on ragged lengths, f32 and bf16, the layer
norm's row tile the length itself, a multiple of 16 or the next power of two; Triton's
masked softmax in such tiles; and the dispatch log, which must keep every row-long
primitive in a vector family (a vector body and one shorter chunk) instead of the scalar
fallback."""
import pytest
import torch
from e2e_helpers import assert_close, assert_guard_intact, guarded

import tilejit as tj
from tilejit.examples import layer_norm, row_softmax, run_layer_norm, run_softmax
from tilejit.targets.cpu import CONTEXT

LENGTHS = [1, 5, 17, 33, 100, 781]


def blocks(n: int) -> list[int]:
    """The row tiles a user picks: the length, the next multiple of 16, the next power of
    two."""
    return sorted({n, -(-n // 16) * 16, 1 << (n - 1).bit_length()})


def inputs(rows: int, n: int, dtype: str, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Every element negative: a fill of 0 past the row's end would win the max.
    return (-torch.rand(rows, n, generator=gen, dtype=torch.float64) * 8).to(
        getattr(torch, dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", LENGTHS)
def test_row_softmax_on_ragged_lengths(n, dtype):
    x = inputs(3, n, dtype)
    expected = torch.softmax(x.double(), 1).to(x.dtype)
    for rows_per_cta in (1, 2):
        out, whole = guarded((3, n), dtype)
        run_softmax(x, out, rows_per_cta)
        assert_close(out, expected, dtype)
        assert_guard_intact(whole, (3, n), dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", LENGTHS)
def test_layer_norm_on_ragged_lengths(n, dtype):
    x = inputs(3, n, dtype, seed=1) + 3
    gen = torch.Generator().manual_seed(2)
    weight = torch.randn(n, generator=gen).to(x.dtype)
    bias = torch.randn(n, generator=gen).to(x.dtype)
    expected = torch.nn.functional.layer_norm(x.double(), (n,), weight.double(), bias.double(),
                                              1e-5).to(x.dtype)
    for block in blocks(n):
        out, whole = guarded((3, n), dtype)
        run_layer_norm(x, weight, bias, out, 1e-5, block)
        assert_close(out, expected, dtype)
        assert_guard_intact(whole, (3, n), dtype)


@tj.kernel
def masked_softmax(x, out, n_cols, BLOCK: tj.constexpr):
    """Triton's tutorial softmax, masks and all."""
    row = tj.program_id(0)
    mask = tj.arange(0, BLOCK) < n_cols
    t = tj.fragment((BLOCK,), tj.float32)
    tj.copy(t, x[row, 0:BLOCK], mask=mask, other=float("-inf"))
    e = tj.exp(t - tj.max(t))
    tj.copy(out[row, 0:BLOCK], e / tj.sum(e), mask=mask)


@pytest.mark.parametrize("n", [5, 33, 781])
def test_masked_softmax_on_ragged_lengths(n):
    x = inputs(4, n, "float32")
    for block in blocks(n):
        out, whole = guarded((4, n), "float32")
        masked_softmax[(4,)](x, out, n, BLOCK=block)
        assert_close(out, torch.softmax(x, 1), "float32")
        assert_guard_intact(whole, (4, n), "float32")


@pytest.mark.team_once_only("checks the CPU team_once families")
def test_a_ragged_row_stays_in_the_vector_families():
    lanes = (CONTEXT.vector_bytes // 4,)  # f32 lanes: 781 is no multiple of any width
    x = torch.zeros(2, 781)
    log = row_softmax.warmup(x, x, BM=2, BN=781).dispatch_log
    # exp(t - max) is one fused pass; 1 / the row sums is a (2, 1) tile: a chunk of 2.
    # Twice: reading x in place, then (a box past x's end) copied first (read_in_place.py).
    passes = [("reduce", "lanes", lanes), ("pointwise", "poly", lanes),
              ("reduce", "lanes", lanes), ("pointwise", "vector", (2,)),
              ("pointwise", "vector", lanes)]
    assert [(r.primitive, r.rule, r.shape) for r in log] == [
        *passes, ("copy", "vector", lanes), *passes]
    vector = torch.zeros(781)
    log = layer_norm.warmup(x, vector, vector, x, 1e-5, N=781, BM=2, BLOCK=784).dispatch_log
    # Weight and bias come straight from their tensors (stream: 32-byte chunks); the
    # per-row numbers (mean, variance, 1/std) are (2, 1) tiles: chunks of 2.
    assert {r.rule for r in log} == {"vector", "lanes", "stream"}
    assert {r.shape for r in log if r.primitive in ("copy", "reduce")} == {lanes}
