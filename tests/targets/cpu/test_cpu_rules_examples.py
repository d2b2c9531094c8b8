"""The example kernels (``tilejit/examples/kernels.py``) on the CPU families: softmax rows
of any length (reductions in ``lanes``, exp in ``poly``), vector add with a masked last
tile, against torch."""
import pytest
import torch
from rule_kernels import fresh_cache, records  # noqa: F401

from tilejit.examples import row_softmax, run_softmax, run_vector_add, vector_add


@pytest.mark.parametrize("rows,cols,rows_per_cta", [(5, 1000, 2), (3, 4096, 1), (7, 33, 4)])
def test_softmax_matches_torch(rows, cols, rows_per_cta):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols)) * 4
    x[0, 0] = 80.0                                   # a large logit: exp must not overflow
    out = torch.empty_like(x)
    run_softmax(x, out, rows_per_cta)
    torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    compiled = row_softmax.warmup(x, out, BM=rows_per_cta, BN=cols)
    assert {r.rule for r in records(compiled, "reduce")} == {"lanes"}
    assert "poly" in {r.rule for r in records(compiled, "pointwise")}


def test_vector_add_masks_the_last_tile():
    n = 10_000
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n + 8,), 7.0)
    run_vector_add(x, y, out[:n], block=1024)
    torch.testing.assert_close(out[:n], x + y)
    assert torch.all(out[n:] == 7.0)
    compiled = vector_add.warmup(x, y, out[:n], BLOCK=1024)
    assert [r.rule for r in compiled.dispatch_log] == ["stream"]
