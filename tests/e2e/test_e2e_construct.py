"""Building and converting tiles on the CPU (tj.zeros, tj.full, x.to, tj.trans / x.T /
tj.permute, tj.broadcast_to, tj.expand_dims, tj.reshape) against torch and numpy, on random
shapes that are not powers of two, and on tiles with random layouts (thread axes, padding,
negative strides, replicas, swizzles: the strategy of test_e2e_layouts)."""
import importlib.util
import itertools

import numpy as np
import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, launched_or_refused, make, torch_dtype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_e2e_layouts import layouts

import tilejit as tj

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
_COUNTER = itertools.count()


# ------------------------------------------------------------------------ showcase
@tj.kernel
def transpose(x, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    t = tj.fragment((BM, BN), x.dtype)
    tj.copy(t, x[r:r + BM, c:c + BN])          # the tile past x's end reads 0...
    tj.copy(out[c:c + BN, r:r + BM], tj.trans(t))   # ...and is not written


@SETTINGS
@given(m=st.integers(1, 70), n=st.integers(1, 70), bm=st.integers(1, 24),
       bn=st.integers(1, 24), dtype=st.sampled_from(["float32", "float16", "int32", "int8"]),
       seed=st.integers(0, 2**16))
def test_transpose_kernel_matches_torch(m, n, bm, bn, dtype, seed):
    x = make((m, n), dtype, torch.Generator().manual_seed(seed))
    out, whole = guarded((n, m), dtype)
    transpose[(tj.cdiv(m, bm), tj.cdiv(n, bn))](x, out, BM=bm, BN=bn)
    assert torch.equal(out, x.T)
    assert_guard_intact(whole, (n, m), dtype)


@tj.kernel
def build_and_convert(x, row, out, n, BM: tj.constexpr, BN: tj.constexpr, K: tj.constexpr):
    t = tj.fragment((BM, BN), x.dtype)
    tj.copy(t, x[0:BM, 0:BN])
    r = tj.fragment((BN,), row.dtype)
    tj.copy(r, row[0:BN])
    acc = tj.zeros((BM, BN), tj.float32) + tj.full((BM, BN), n, tj.float32)
    rows = tj.expand_dims(tj.arange(0, BM), 1).to(tj.float32)
    acc = acc + tj.broadcast_to(r, (BM, BN)) * rows
    acc = acc + tj.reshape(tj.reshape(t, (BM * BN,)), (BM, BN))
    acc = acc + tj.broadcast_to(n.to(tj.float32), (BM, BN))
    column = tj.expand_dims(acc.T.to(out.dtype), 2)
    tj.copy(out[0:BN, 0:BM, 0:K], tj.broadcast_to(column, (BN, BM, K)))


@SETTINGS
@given(bm=st.integers(1, 13), bn=st.integers(1, 17), k=st.integers(1, 3), n=st.integers(-5, 5),
       dtype=st.sampled_from(["float32", "int32", "float16"]), seed=st.integers(0, 2**16))
def test_zeros_full_to_broadcast_expand_reshape_match_torch(bm, bn, k, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x, row = make((bm, bn), "float32", gen), make((bn,), "float32", gen)
    out = torch.zeros((bn, bm, k), dtype=torch_dtype(dtype))
    build_and_convert[(1,)](x, row, out, n, BM=bm, BN=bn, K=k)
    acc = n + row[None, :] * torch.arange(bm, dtype=torch.float32)[:, None] + x + float(n)
    expected = acc.T.to(torch_dtype(dtype))[:, :, None].expand(bn, bm, k)
    assert torch.equal(out, expected)


# ------------------------------------------------------------- laid-out tiles
_ALLOC = {"fragment": "tj.fragment", "shared": "tj.alloc_shared", "local": "tj.alloc_local"}


def _probe(folder, scope, layout, shape, statement):
    """A kernel that loads x into a ``shape`` tile laid out by ``layout`` and stores the
    3-D result of ``statement`` (on the tile ``t``) into out."""
    bm, bn = shape
    body = [f"t = {_ALLOC[scope]}({shape}, tj.float32, layout=L)",
            f"tj.copy(t, x[0:{bm}, 0:{bn}])", f"v = {statement}",
            "tj.copy(out[0:v.shape[0], 0:v.shape[1], 0:v.shape[2]], v)"]
    if scope == "local":
        body = ["with tj.thread():"] + ["    " + line for line in body]
    source = "\n".join([
        "import tilejit as tj", "from tilejit.layout.swizzle import parse_layout", "",
        f"L = {'None' if layout is None else f'parse_layout({str(layout)!r})'}", "", "",
        "@tj.kernel", "def probe(x, out):"] + ["    " + line for line in body]) + "\n"
    path = folder / f"construct_probe_{next(_COUNTER)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.probe, source


# statement on t (bm x bn) -> its numpy meaning, as 3-D results
STATEMENTS = {
    "tj.expand_dims(tj.trans(t), 0)": lambda a: a.T[None],
    "tj.expand_dims(t.T, 2)": lambda a: a.T[:, :, None],
    "tj.permute(tj.expand_dims(t, 1), 2, 0, 1)": lambda a: np.transpose(a[:, None], (2, 0, 1)),
    "tj.reshape(t, (t.shape[1], 1, t.shape[0]))": lambda a: a.reshape(a.shape[1], 1, a.shape[0]),
    "tj.expand_dims(tj.reshape(t, (t.shape[0] * t.shape[1],)), (0, 2))":
        lambda a: a.reshape(-1)[None, :, None],
    "tj.expand_dims(t, 0).to(tj.float16).to(tj.float32)": lambda a: a[None],
}


@st.composite
def laid_out(draw):
    scope = draw(st.sampled_from(["fragment", "shared", "local"]))
    shape = (draw(st.integers(1, 9)), draw(st.integers(1, 10)))
    return scope, shape, draw(layouts(shape, scope)), draw(st.sampled_from(sorted(STATEMENTS)))


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=laid_out(), seed=st.integers(0, 2**16))
def test_trans_permute_reshape_of_laid_out_tiles_match_numpy(tmp_path, case, seed, lowering):
    """A transpose reads the source at logical indices, and a reshape or new dim views the
    buffer with its own layout: right for any placement of the source tile."""
    scope, shape, layout, statement = case
    probe, source = _probe(tmp_path, scope, layout, shape, statement)
    x = (np.random.default_rng(seed).integers(-8, 8, shape) / 4).astype(np.float32)
    expected = STATEMENTS[statement](x)
    out = np.full(expected.shape, 123, np.float32)
    if launched_or_refused(lowering, tmp_path, lambda: probe[(1,)](
            x, out, num_warps=1 if scope == "local" else 4)):
        np.testing.assert_array_equal(out, expected, err_msg=source)
