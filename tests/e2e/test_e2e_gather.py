"""Gather and scatter on the CPU (tj.gather, tj.scatter, tj.copy(dst, table[idx, :]) and
tj.copy(out[idx, :], src)) against torch and numpy's reference semantics
(tilejit.passes.reference), on random shapes that are not powers of two. Out-of-range
indices are masked: a gather reads `other` (0 by default), a scatter writes nothing; the
last of duplicate scatter indices wins."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from e2e_helpers import assert_guard_intact, guarded, make, torch_dtype
from hypothesis import given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.passes import reference

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None)
INDEX_DTYPES = ["int32", "int64", "int16", "uint8"]


# ------------------------------------------------------------------------ showcase
@tj.kernel
def embedding(table, ids, out, n, BLOCK: tj.constexpr, D: tj.constexpr):
    """out[i, :] = table[ids[i], :]: one row of the table per id, BLOCK ids per CTA."""
    base = tj.cta_id(0) * BLOCK
    idx = tj.fragment((BLOCK,), ids.dtype)
    tj.copy(idx, ids[base:base + BLOCK], mask=base + tj.arange(0, BLOCK) < n, other=-1)
    rows = tj.fragment((BLOCK, D), table.dtype)
    tj.copy(rows, table[idx, :])        # ids outside the table (and -1 past n) give rows of 0
    tj.copy(out[base:base + BLOCK, 0:D], rows)


@SETTINGS
@given(vocab=st.integers(1, 60), d=st.integers(1, 37), n=st.integers(1, 50),
       block=st.integers(1, 17), dtype=st.sampled_from(["float32", "float16", "int32"]),
       index_dtype=st.sampled_from(["int32", "int64"]), seed=st.integers(0, 2**16))
def test_embedding_lookup_matches_torch(vocab, d, n, block, dtype, index_dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    table = make((vocab, d), dtype, gen)
    ids = torch.randint(0, vocab, (n,), generator=gen).to(torch_dtype(index_dtype))
    out, whole = guarded((n, d), dtype)
    embedding[(tj.cdiv(n, block),)](table, ids, out, n, BLOCK=block, D=d)
    expected = F.embedding(ids.long(), table.double()).to(torch_dtype(dtype))
    assert torch.equal(out, expected)
    assert_guard_intact(whole, (n, d), dtype)


def test_embedding_rows_of_out_of_range_ids_are_zero():
    table = torch.arange(1, 13, dtype=torch.float32).reshape(4, 3)
    ids = torch.tensor([3, -1, 4, 0, 1000, 2], dtype=torch.int32)
    out = torch.full((6, 3), 7.0)
    embedding[(2,)](table, ids, out, 6, BLOCK=4, D=3)
    expected = torch.zeros(6, 3)
    for i, k in enumerate(ids.tolist()):
        if 0 <= k < 4:
            expected[i] = table[k]
    assert torch.equal(out, expected)


# ----------------------------------------------------------------------- tj.gather
@tj.kernel
def gather_tile(x, index, out, AXIS: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr,
                IM: tj.constexpr, IN: tj.constexpr):
    t = tj.fragment((BM, BN), x.dtype)
    tj.copy(t, x[0:BM, 0:BN])
    i = tj.fragment((IM, IN), index.dtype)
    tj.copy(i, index[0:IM, 0:IN])
    tj.copy(out[0:IM, 0:IN], tj.gather(t, i, AXIS))


@SETTINGS
@given(bm=st.integers(1, 12), bn=st.integers(1, 12), axis=st.integers(0, 1),
       shrink=st.tuples(st.integers(0, 3), st.integers(0, 3)), grow=st.integers(1, 9),
       out_of_range=st.booleans(), index_dtype=st.sampled_from(INDEX_DTYPES),
       seed=st.integers(0, 2**16))
def test_gather_matches_torch_gather(bm, bn, axis, shrink, grow, out_of_range, index_dtype,
                                     seed):
    """torch.gather's shapes: index as large as src on the other dim or smaller, any size
    on the gathered dim; with out-of-range indices the reference (0 there) is the oracle."""
    gen = torch.Generator().manual_seed(seed)
    x = make((bm, bn), "float32", gen)
    shape = [max(1, bm - shrink[0]), max(1, bn - shrink[1])]
    shape[axis] = grow
    extent = (bm, bn)[axis]
    low, high = (-3, extent + 3) if out_of_range else (0, extent)
    if index_dtype == "uint8":
        low = 0
    index = torch.randint(low, high, shape, generator=gen).to(torch_dtype(index_dtype))
    out = torch.full(shape, 5.0)
    gather_tile[(1,)](x, index, out, AXIS=axis, BM=bm, BN=bn, IM=shape[0], IN=shape[1])
    if out_of_range:
        expected = reference.gather(np.zeros(shape, np.float32), x.numpy(), index.numpy(), axis)
        np.testing.assert_array_equal(out.numpy(), expected)
    else:
        assert torch.equal(out, torch.gather(x, axis, index.long()))


@tj.kernel
def gather_columns(x, cols, out, n_rows, BM: tj.constexpr, K: tj.constexpr, N: tj.constexpr):
    """out[r, k] = x[r, cols[k]] (other=-1 outside x), straight from the tensor: the
    statement form with a (1, K) index broadcast over the rows; the region of x is N
    columns wide, which may run past x's end (those columns are outside too)."""
    r = tj.cta_id(0) * BM
    c = tj.fragment((K,), cols.dtype)
    tj.copy(c, cols[0:K])
    tj.gather(out[r:r + BM, 0:K], x[r:r + BM, 0:N], c[None, :], 1, other=-1)


@SETTINGS
@given(m=st.integers(1, 40), n=st.integers(1, 20), k=st.integers(1, 9), bm=st.integers(1, 13),
       wider=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_gather_statement_form_on_tensor_regions(m, n, k, bm, wider, seed):
    gen = torch.Generator().manual_seed(seed)
    x = make((m, n), "float32", gen)
    cols = torch.randint(-2, n + wider + 2, (k,), generator=gen, dtype=torch.int32)
    out, whole = guarded((m, k), "float32")
    gather_columns[(tj.cdiv(m, bm),)](x, cols, out, m, BM=bm, K=k, N=n + wider)
    inside = (cols >= 0) & (cols < n)
    expected = torch.where(inside[None, :], x[:, cols.clamp(0, n - 1).long()], -1.0)
    assert torch.equal(out, expected)
    assert_guard_intact(whole, (m, k), "float32")


# ---------------------------------------------------------------------- tj.scatter
@tj.kernel
def scatter_tile(src, index, out, AXIS: tj.constexpr, OM: tj.constexpr, ON: tj.constexpr,
                 IM: tj.constexpr, IN: tj.constexpr):
    s = tj.fragment((IM, IN), src.dtype)
    tj.copy(s, src[0:IM, 0:IN])
    i = tj.fragment((IM, IN), index.dtype)
    tj.copy(i, index[0:IM, 0:IN])
    d = tj.full((OM, ON), -7, out.dtype)
    tj.scatter(d, i, s, AXIS)
    tj.copy(out[0:OM, 0:ON], d)


@SETTINGS
@given(om=st.integers(1, 12), on=st.integers(1, 12), axis=st.integers(0, 1),
       grow=st.integers(1, 9), unique=st.booleans(), index_dtype=st.sampled_from(INDEX_DTYPES),
       dtype=st.sampled_from(["float32", "int32", "float16"]), seed=st.integers(0, 2**16))
def test_scatter_matches_torch_scatter(om, on, axis, grow, unique, index_dtype, dtype, seed):
    """Unique in-range indices: torch's scatter_. Duplicates and out-of-range indices: the
    reference, in which the last write in row-major order wins and out-of-range ones skip."""
    gen = torch.Generator().manual_seed(seed)
    extent = (om, on)[axis]
    shape = [om, on]
    if unique:   # each line along the axis a permutation's prefix: no duplicates
        shape[axis] = min(grow, extent)
        keys = torch.rand((om, on), generator=gen).argsort(dim=axis)
        index = keys.narrow(axis, 0, shape[axis])
    else:
        shape[axis] = grow
        index = torch.randint(-2 if index_dtype != "uint8" else 0, extent + 2, shape,
                              generator=gen)
    index = index.to(torch_dtype(index_dtype))
    src = make(tuple(shape), dtype, gen)
    out = torch.zeros((om, on), dtype=torch_dtype(dtype))
    scatter_tile[(1,)](src, index, out, AXIS=axis, OM=om, ON=on, IM=shape[0], IN=shape[1])
    start = torch.full((om, on), -7, dtype=torch_dtype(dtype))
    if unique:
        assert torch.equal(out, start.scatter(axis, index.long(), src))
    else:
        expected = reference.scatter(start.numpy(), index.numpy(), src.numpy(), axis)
        np.testing.assert_array_equal(out.numpy(), expected)


def test_scatter_duplicates_last_write_wins_in_element_order():
    src = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    index = torch.tensor([[0, 0, 2], [0, 2, 2]], dtype=torch.int32)
    out = torch.zeros(1, 3)
    scatter_tile[(1,)](src, index, out, AXIS=1, OM=1, ON=3, IM=1, IN=3)   # row 0 only
    assert out.tolist() == [[2.0, -7.0, 3.0]]
    out = torch.zeros(2, 3)
    scatter_tile[(1,)](src, index, out, AXIS=1, OM=2, ON=3, IM=2, IN=3)
    assert out.tolist() == [[2.0, -7.0, 3.0], [4.0, -7.0, 6.0]]


@tj.kernel
def scatter_rows(src, ids, out, n, BLOCK: tj.constexpr, D: tj.constexpr):
    """out[ids[i], :] = src[i, :] straight into the tensor (rows past out's end skipped)."""
    base = tj.cta_id(0) * BLOCK
    idx = tj.fragment((BLOCK,), ids.dtype)
    tj.copy(idx, ids[base:base + BLOCK], mask=base + tj.arange(0, BLOCK) < n, other=-1)
    rows = tj.fragment((BLOCK, D), src.dtype)
    tj.copy(rows, src[base:base + BLOCK, 0:D])
    tj.copy(out[idx, :], rows)


@tj.kernel
def scatter_rows_from_tensor(src, ids, out, n, BLOCK: tj.constexpr, D: tj.constexpr):
    """The same with tj.scatter reading src's region straight from the tensor: its rows
    past src's end read 0, and their ids (-1) write nothing."""
    base = tj.cta_id(0) * BLOCK
    idx = tj.fragment((BLOCK,), ids.dtype)
    tj.copy(idx, ids[base:base + BLOCK], mask=base + tj.arange(0, BLOCK) < n, other=-1)
    tj.scatter(out, idx[:, None], src[base:base + BLOCK, 0:D], 0)


@SETTINGS
@given(rows=st.integers(1, 40), d=st.integers(1, 19), n=st.integers(1, 40),
       block=st.integers(1, 11), direct=st.booleans(), seed=st.integers(0, 2**16))
def test_row_scatter_into_a_tensor_matches_index_copy(rows, d, n, block, direct, seed):
    gen = torch.Generator().manual_seed(seed)
    n = min(n, rows)
    ids = torch.randperm(rows + 3, generator=gen)[:n].to(torch.int32)  # some past the end
    src = make((n, d), "float32", gen)
    out, whole = guarded((rows, d), "float32")
    kernel = scatter_rows_from_tensor if direct else scatter_rows
    kernel[(tj.cdiv(n, block),)](src, ids, out, n, BLOCK=block, D=d)
    expected = torch.full((rows, d), 7.0)
    keep = ids < rows
    expected[ids[keep].long()] = src[keep]
    assert torch.equal(out, expected)
    assert_guard_intact(whole, (rows, d), "float32")


# ----------------------------------------------------------------- dispatch records
def test_dispatch_log_names_the_indexed_families():
    spec = tj.TensorSpec
    compiled = embedding.compile(spec((50, 8), tj.float32), spec((9,), tj.int32),
                                 spec((9, 8), tj.float32), 9, BLOCK=4, D=8)
    families = {r.primitive: r.rule for r in compiled.dispatch_log}
    assert families["gather"] == "scalar"
    compiled = scatter_rows_from_tensor.compile(spec((9, 8), tj.float32), spec((9,), tj.int32),
                                                spec((50, 8), tj.float32), 9, BLOCK=4, D=8)
    assert {r.primitive: r.rule for r in compiled.dispatch_log}["scatter"] == "serial"


@tj.kernel
def gather_with_tensor_index(x, index, out):
    tj.gather(out[0:4, 0:4], x[0:4, 0:4], index[0:4, 0:4], 0)


def test_an_index_running_past_its_tensor_is_a_dispatch_error():
    """Masking an index read past its tensor's end would have to pick a position: the
    rule asks for the index in a fragment, loaded with mask= and other=."""
    x = torch.zeros(4, 4)
    with pytest.raises(tj.DispatchError, match="index may run past the end of its tensor"):
        gather_with_tensor_index[(1,)](x, torch.zeros(4, 4, dtype=torch.int32), x.clone())
