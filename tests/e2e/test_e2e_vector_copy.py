"""Per thread, copies between a tile laid out over threads and a tensor move each thread's
runs of the last dim in one vector access (the ``vec`` family): against torch on ragged
last dims (the runs at a row's end, and every run of a row whose offset is not a multiple
of the run, go element by element), f32, f16 and bf16, both directions, and a region
starting at a column no run can be aligned from (declined: the ``scalar`` family)."""
import pytest
import torch
from e2e_helpers import assert_close, assert_guard_intact, guarded

import tilejit as tj
from tilejit.examples import row_softmax, run_softmax

WIDTHS = [781, 1000, 1024]
DTYPES = ["float32", "float16", "bfloat16"]


@tj.kernel
def add_rows(x, y, out, COL0: tj.constexpr, BN: tj.constexpr):
    """out[r, COL0:] = x[r, COL0:] + y[r, COL0:], one row per CTA through register tiles."""
    r = tj.cta_id(0)
    a = tj.fragment((1, BN), x.dtype)
    b = tj.fragment((1, BN), x.dtype)
    tj.copy(a, x[r:r + 1, COL0:COL0 + BN])
    tj.copy(b, y[r:r + 1, COL0:COL0 + BN])
    tj.copy(out[r:r + 1, COL0:COL0 + BN], a + b)


@tj.kernel
def copy_rows(x, out, BM: tj.constexpr, BN: tj.constexpr):
    r0 = tj.cta_id(0) * BM
    t = tj.fragment((BM, BN), x.dtype)
    tj.copy(t, x[r0:r0 + BM, 0:BN])
    tj.copy(out[r0:r0 + BM, 0:BN], t)


def _rules(compiled, primitive):
    return [(r.rule, r.shape) for r in compiled.dispatch_log if r.primitive == primitive]


def _data(rows, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, n, generator=gen) * 4).to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", WIDTHS)
def test_rows_round_trip_through_registers(lowering, n, dtype):
    x = _data(5, n, dtype, n)
    out, whole = guarded((5, n), dtype)
    options = dict(BM=2, BN=1024, num_warps=4)
    copy_rows[(3,)](x, out, **options)
    assert torch.equal(out, x)
    assert_guard_intact(whole, (5, n), dtype)
    if lowering == "per_thread":
        count = 16 // x.element_size()
        assert _rules(copy_rows.compile(x, out, **options), "copy") == [("vec", (count,))] * 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", WIDTHS)
def test_a_vector_add_of_rows_stores_its_sum_in_runs(lowering, n, dtype):
    x, y = _data(3, n, dtype, 1), _data(3, n, dtype, 2)
    out, whole = guarded((3, n), dtype)
    add_rows[(3,)](x, y, out, COL0=0, BN=1024, num_warps=2)
    assert_close(out, (x.double() + y.double()).to(x.dtype), dtype)
    assert_guard_intact(whole, (3, n), dtype)
    if lowering == "per_thread":
        compiled = add_rows.compile(x, y, out, COL0=0, BN=1024, num_warps=2)
        families = [rule for rule, _ in _rules(compiled, "copy") + _rules(compiled,
                                                                          "pointwise")]
        assert families == ["vec", "vec", "vec"]


def test_a_region_starting_off_a_run_is_declined(lowering):
    n = 1000
    x, y = _data(3, n, "float32", 3), _data(3, n, "float32", 4)
    out, whole = guarded((3, n), "float32")
    add_rows[(3,)](x, y, out, COL0=2, BN=512, num_warps=2)
    expected = x[:, 2:514] + y[:, 2:514]
    assert torch.equal(out[:, 2:514], expected)
    assert torch.all(out[:, :2] == whole[0, -1]) and torch.all(out[:, 514:] == whole[0, -1])
    if lowering == "per_thread":
        compiled = add_rows.compile(x, y, out, COL0=2, BN=512, num_warps=2)
        loads = [r for r in compiled.dispatch_log if r.primitive == "copy"]
        assert [r.rule for r in loads] == ["scalar"] * 2
        assert "starts at index 2 of its tensor's last dim, not a multiple of 4" in \
            dict(loads[0].rejected)["vec"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [781, 1024])
def test_the_example_softmax_loads_and_stores_its_rows_in_runs(lowering, n, dtype):
    """The example's tile is the row itself: 781 columns give no layout of runs (the scalar
    family then), 1024 the blocked one, whose runs the load and the fused store move."""
    gen = torch.Generator().manual_seed(n)
    x = (-torch.rand(4, n, generator=gen, dtype=torch.float64) * 8).to(getattr(torch, dtype))
    out, whole = guarded((4, n), dtype)
    run_softmax(x, out, 2)
    assert_close(out, torch.softmax(x.double(), 1).to(x.dtype), dtype)
    assert_guard_intact(whole, (4, n), dtype)
    if lowering == "per_thread" and n == 1024:
        compiled = row_softmax.compile(x, out, BM=2, BN=n)
        first, *_, last = compiled.dispatch_log
        assert (first.primitive, first.rule) == ("copy", "vec")
        assert (last.primitive, last.rule) == ("pointwise", "vec")
