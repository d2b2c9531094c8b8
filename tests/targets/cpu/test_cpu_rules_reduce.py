"""The CPU ``lanes`` reduce family: row sum/max/min in vector accumulators vs torch for row
lengths around the vector width (masked last vector), masked rows, NaN and infinities;
declines (another axis, another dtype) leave the ``tree`` fallback with its reason."""
import math

import pytest
import torch
from rule_kernels import column_reduce, fresh_cache, records, row_reduce  # noqa: F401

import tilejit as tj

REFERENCE = {"sum": lambda x: x.double().sum(1).float(), "max": lambda x: x.amax(1),
             "min": lambda x: x.amin(1)}


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("cols", [1, 7, 64, 100, 1000])
def test_row_reduce_matches_torch(op, cols):
    rows, bm = 10, 4                                   # the last CTA's rows 2 and 3 masked
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))
    out = torch.empty(rows)
    compiled = row_reduce.warmup(x, out, OP=op, BM=bm, BN=cols)
    row_reduce[(tj.cdiv(rows, bm),)](x, out, OP=op, BM=bm, BN=cols)
    # two versions (read_in_place.py): the tile read in place, and copied (the last CTA)
    in_place, copied = records(compiled, "reduce")
    assert all(r.rule == "lanes" and not r.fallback for r in (in_place, copied))
    torch.testing.assert_close(out, REFERENCE[op](x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_and_infinities(op):
    x = torch.randn(4, 37)
    x[0, 30] = math.nan                    # in the masked last vector
    x[1, 3] = math.nan                     # in the first vector
    x[2, :] = -math.inf if op == "max" else math.inf
    x[3, 36] = math.inf if op == "max" else -math.inf
    out = torch.empty(4)
    row_reduce[(1,)](x, out, OP=op, BM=4, BN=37)
    torch.testing.assert_close(out, REFERENCE[op](x), equal_nan=True)


def test_other_axes_and_dtypes_fall_back_to_the_tree_with_reasons():
    x = torch.randn(6, 20)
    out = torch.empty(1, 20)
    compiled = column_reduce.warmup(x, out, OP="sum", BM=6, BN=20)
    column_reduce[(1,)](x, out, OP="sum", BM=6, BN=20)
    for record in records(compiled, "reduce"):   # in place and copied (read_in_place.py)
        assert record.rule == "tree" and record.fallback
        assert "not src's innermost dim" in dict(record.rejected)["lanes"]
    torch.testing.assert_close(out, x.sum(0, keepdim=True), rtol=1e-5, atol=1e-5)


def test_a_long_row_reduce_stays_a_loop_so_no_vector_is_spilled():
    """Unrolled, each reduce over a 1000-float row read in place loaded 63 vectors that
    LLVM then shared with the next pass over the row (the same loads): more values than
    registers, spilled to the stack and read back, and the spill stores queued behind the
    row's stores to ``out`` when those miss the cache (layer norm 4096 x 1000 on one core:
    1.9 ms unrolled, 1.5 as a loop, BENCHMARKS.md). Kept a loop, each pass loads again
    from L1."""
    from rule_kernels import host_assembly

    from tilejit.examples.kernels import layer_norm
    x, weight, bias, out = torch.randn(8, 1000), torch.randn(1000), torch.randn(1000), \
        torch.empty(8, 1000)
    compiled = layer_norm.warmup(x, weight, bias, out, 1e-5, N=1000, BM=1, BLOCK=1000)
    stack_vectors = [line for line in host_assembly(compiled).splitlines()
                     if "mm" in line and "(%rsp)" in line]
    assert len(stack_vectors) < 40, f"{len(stack_vectors)} vector stack accesses"
