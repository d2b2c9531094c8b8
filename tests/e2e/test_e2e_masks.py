"""Index tiles (tj.arange), x[:, None] and masked copies (mask=, other=) on the CPU,
compared with torch and with numpy's reference semantics (tilejit.passes.reference), on
random shapes that are not powers of two."""
import math

import numpy as np
import pytest
import torch
from e2e_helpers import assert_close, assert_guard_intact, guarded, make, torch_dtype
from hypothesis import given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.passes import reference

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)


# ------------------------------------------------------------------------ showcases
@tj.kernel
def vector_add(x, y, out, n, BLOCK: tj.constexpr):
    pid = tj.program_id(0)
    offs = pid * BLOCK + tj.arange(0, BLOCK)
    mask = offs < n
    a = tj.fragment((BLOCK,), x.dtype)
    b = tj.fragment((BLOCK,), y.dtype)
    tj.copy(a, x[pid * BLOCK:(pid + 1) * BLOCK], mask=mask)
    tj.copy(b, y[pid * BLOCK:(pid + 1) * BLOCK], mask=mask)
    tj.copy(out[pid * BLOCK:(pid + 1) * BLOCK], a + b, mask=mask)


@SETTINGS
@given(n=st.integers(1, 700), extra=st.integers(0, 40), block=st.integers(1, 300),
       dtype=st.sampled_from(["float32", "int32", "float16"]), seed=st.integers(0, 2**16))
def test_vector_add_masked_by_offs_less_than_n(n, extra, block, dtype, seed):
    """The tensors are longer than n: only the mask keeps the kernel off their tail."""
    gen = torch.Generator().manual_seed(seed)
    x, y = make((n + extra,), dtype, gen), make((n + extra,), dtype, gen)
    out, whole = guarded((n,), dtype, pad=extra + 3)
    vector_add[(tj.cdiv(n, block),)](x, y, whole, n, BLOCK=block)
    assert_close(out, (x[:n].double() + y[:n].double()).to(torch_dtype(dtype)), dtype)
    assert_guard_intact(whole, (n,), dtype)


@tj.kernel
def row_softmax(x, out, n_cols, BLOCK: tj.constexpr):
    row = tj.cta_id(0)
    cols = tj.arange(0, BLOCK)
    t = tj.fragment((BLOCK,), tj.float32)
    # -inf, not 0: a masked-off element must not win the row max (every row here is
    # negative), and exp(-inf - max) = 0 leaves the sum alone.
    tj.copy(t, x[row, 0:BLOCK], mask=cols < n_cols, other=float("-inf"))
    top = tj.fragment((1,), tj.float32)
    tj.reduce(top, t, "max", 0)
    e = tj.exp(t - top)
    total = tj.fragment((1,), tj.float32)
    tj.reduce(total, e, "sum", 0)
    tj.copy(out[row, 0:BLOCK], e / total, mask=cols < n_cols)


def test_row_softmax_with_other_minus_inf_on_781_columns_in_a_1024_block():
    gen = torch.Generator().manual_seed(0)
    x = -1 - torch.rand((7, 900), generator=gen) * 5      # all negative: a 0 fill would win
    out = torch.full((7, 900), 7.0)
    row_softmax[(7,)](x, out, 781, BLOCK=1024)
    torch.testing.assert_close(out[:, :781], torch.softmax(x[:, :781], dim=1))
    assert torch.all(out[:, 781:] == 7.0)                   # masked off: not written


@SETTINGS
@given(rows=st.integers(1, 5), n_cols=st.integers(1, 300), block_extra=st.integers(0, 90),
       seed=st.integers(0, 2**16))
def test_row_softmax_any_row_length(rows, n_cols, block_extra, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, n_cols + 5), generator=gen) * 4 - 20
    out = torch.full((rows, n_cols + 5), 7.0)
    row_softmax[(rows,)](x, out, n_cols, BLOCK=n_cols + block_extra)
    torch.testing.assert_close(out[:, :n_cols], torch.softmax(x[:, :n_cols], dim=1))
    assert torch.all(out[:, n_cols:] == 7.0)


@tj.kernel
def causal_scores(s, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    rows = r + tj.arange(0, BM)
    cols = c + tj.arange(0, BN)
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, s[r:r + BM, c:c + BN], mask=rows[:, None] >= cols[None, :],
            other=float("-inf"))
    tj.copy(out[r:r + BM, c:c + BN], t)


@SETTINGS
@given(m=st.integers(1, 60), n=st.integers(1, 60), bm=st.integers(1, 23),
       bn=st.integers(1, 23), seed=st.integers(0, 2**16))
def test_causal_mask_from_two_aranges(m, n, bm, bn, seed):
    s = torch.randn((m, n), generator=torch.Generator().manual_seed(seed))
    out = torch.zeros((m, n))
    causal_scores[(tj.cdiv(m, bm), tj.cdiv(n, bn))](s, out, BM=bm, BN=bn)
    expected = s.masked_fill(~torch.ones(m, n, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(out, expected)


# -------------------------------------------------------------- masks of every kind
@tj.kernel
def masked_load_store(x, keep, out, other_out, BM: tj.constexpr, BN: tj.constexpr,
                      OTHER: tj.constexpr):
    """A load with a global bool mask tensor (other= where it is False or past its end), a
    store of the loaded tile under the same mask, and the whole loaded tile for checking."""
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    m = tj.fragment((BM, BN), tj.bool)
    tj.copy(m, keep[r:r + BM, c:c + BN])
    t = tj.fragment((BM, BN), out.dtype)
    tj.copy(t, x[r:r + BM, c:c + BN], mask=keep[r:r + BM, c:c + BN], other=OTHER)
    tj.copy(other_out[r:r + BM, c:c + BN], t)
    tj.copy(out[r:r + BM, c:c + BN], t, mask=m)


@SETTINGS
@given(m=st.integers(1, 40), n=st.integers(1, 40), bm=st.integers(1, 17),
       bn=st.integers(1, 17), dtype=st.sampled_from(["float32", "int16", "bfloat16", "bool"]),
       other=st.sampled_from([0, -3, 1]), seed=st.integers(0, 2**16))
def test_masked_load_and_store_match_numpy(m, n, bm, bn, dtype, other, seed):
    gen = torch.Generator().manual_seed(seed)
    x = make((m, n), dtype, gen)
    keep = torch.randint(0, 2, (m, n), generator=gen).bool()
    out, whole = guarded((m, n), dtype)
    before = out.clone()
    loaded = torch.zeros((m, n), dtype=torch_dtype(dtype))
    grid = (tj.cdiv(m, bm), tj.cdiv(n, bn))
    masked_load_store[grid](x, keep, whole, loaded, BM=bm, BN=bn, OTHER=other)
    as_np = {"bfloat16": torch.float32}.get(dtype)
    x_np = (x.to(as_np) if as_np else x).numpy()
    expect_loaded = reference.copy(np.zeros_like(x_np), x_np, mask=keep.numpy(), other=other)
    before_np = (before.to(as_np) if as_np else before).numpy()
    expect_out = reference.copy(before_np, x_np, mask=keep.numpy(), store=True)
    assert_close(loaded, torch.from_numpy(expect_loaded), dtype)
    assert_close(out, torch.from_numpy(expect_out), dtype)
    assert_guard_intact(whole, (m, n), dtype)


@tj.kernel
def broadcast_masks(x, out, n_rows, n_cols, BM: tj.constexpr, BN: tj.constexpr):
    """A row mask (BM, 1), a column mask (1, BN) and a scalar mask."""
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    rows = r + tj.arange(0, BM)
    cols = c + tj.arange(0, BN)
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[r:r + BM, c:c + BN], mask=(rows < n_rows)[:, None], other=-1.5)
    u = tj.fragment((BM, BN), tj.float32)
    tj.copy(u, t, mask=(cols < n_cols)[None, :], other=2.5)
    tj.copy(out[0, r:r + BM, c:c + BN], u)
    tj.copy(out[1, r:r + BM, c:c + BN], u, mask=tj.cta_id(1) == 0)


@SETTINGS
@given(m=st.integers(1, 30), n=st.integers(1, 30), bm=st.integers(1, 13),
       bn=st.integers(1, 13), n_rows=st.integers(0, 31), n_cols=st.integers(0, 31),
       seed=st.integers(0, 2**16))
def test_row_column_and_scalar_masks_broadcast(m, n, bm, bn, n_rows, n_cols, seed):
    x = torch.randn((m, n), generator=torch.Generator().manual_seed(seed))
    out = torch.full((2, m, n), 9.0)
    broadcast_masks[(tj.cdiv(m, bm), tj.cdiv(n, bn))](x, out, n_rows, n_cols, BM=bm, BN=bn)
    rows, cols = torch.arange(m)[:, None], torch.arange(n)[None, :]
    expected = torch.where(rows < n_rows, x, -1.5)
    expected = torch.where(cols < n_cols, expected, 2.5)
    torch.testing.assert_close(out[0], expected)
    first_column_of_ctas = (torch.arange(n) < bn)[None, :]
    torch.testing.assert_close(out[1], torch.where(first_column_of_ctas, expected, 9.0))


# ------------------------------------------------------ the fill past a tensor's end
@tj.kernel
def edge_fill(x, out, BLOCK: tj.constexpr, FILL: tj.constexpr):
    """Past the end of x a load reads other= (or config fill, its older spelling)."""
    t = tj.fragment((BLOCK,), tj.float32)
    tj.copy(t, x[0:BLOCK], other=float("-inf"))
    tj.copy(out[0, 0:BLOCK], t)
    tj.copy(t, x[0:BLOCK], config={"fill": FILL})
    tj.copy(out[1, 0:BLOCK], t)


def test_other_and_config_fill_both_fill_past_the_tensors_end():
    x = torch.arange(5, dtype=torch.float32)
    out = torch.zeros((2, 13))
    edge_fill[(1,)](x, out, BLOCK=13, FILL=4.5)
    torch.testing.assert_close(out[0], torch.cat([x, torch.full((8,), -math.inf)]))
    torch.testing.assert_close(out[1], torch.cat([x, torch.full((8,), 4.5)]))


@pytest.mark.team_once_only("checks a CPU team_once family's legality")
def test_masked_copies_decline_the_stream_family_with_a_reason():
    @tj.kernel
    def masked_global_copy(x, out, n, BLOCK: tj.constexpr):
        base = tj.cta_id(0) * BLOCK
        tj.copy(out[base:base + BLOCK], x[base:base + BLOCK],
                mask=base + tj.arange(0, BLOCK) < n)

    x, out = torch.arange(100, dtype=torch.float32), torch.zeros(100)
    masked_global_copy[(4,)](x, out, 77, BLOCK=32)
    torch.testing.assert_close(out, torch.where(torch.arange(100) < 77, x, 0.0))
    record = masked_global_copy.compile(x, out, 77, BLOCK=32).dispatch_log[-1]
    assert (record.primitive, record.rule) == ("copy", "vector")
    assert ("stream", "a masked copy stores element by element: the vector family does") \
        in [(rule, reason) for rule, reason in record.rejected]


@tj.kernel
def row_max_with_fill(x, out, n, OTHER: tj.constexpr, BLOCK: tj.constexpr):
    row = tj.cta_id(0)
    t = tj.fragment((1, BLOCK), tj.float32)
    tj.copy(t, x[row:row + 1, 0:BLOCK], other=OTHER)
    m = tj.max(t, axis=1)
    out[row] = m[0]


def test_a_non_finite_constexpr_fill(fresh_cache):
    x = -torch.rand(3, 5) - 1           # every element negative: a 0 fill would win the max
    out = torch.zeros(3)
    row_max_with_fill[(3,)](x, out, 5, OTHER=float("-inf"), BLOCK=8)
    torch.testing.assert_close(out, x.max(dim=1).values)
    row_max_with_fill.clear_memory_cache()   # the disk entry (its key holds -inf) loads back
    row_max_with_fill[(3,)](x, out, 5, OTHER=float("-inf"), BLOCK=8)
    torch.testing.assert_close(out, x.max(dim=1).values)
