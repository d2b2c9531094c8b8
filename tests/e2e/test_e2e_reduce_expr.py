"""Reductions and scans as expressions (docs/language.md "Reductions and scans"):
``tj.sum/max/min/argmax/argmin`` and ``tj.cumsum/cumprod/associative_scan`` on fragments,
shared buffers and global regions, per dtype, against torch (floats) and numpy (integer
scans, which wrap); a row softmax and an argmax kernel as a Triton user writes them; the
errors that teach the difference from the statement forms."""
import inspect

import numpy as np
import pytest
import torch
from e2e_helpers import make, torch_dtype
from hypothesis import given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.passes import reference

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)
DTYPES = ["float32", "float16", "bfloat16", "int32", "int8"]


@tj.kernel
def reduce_expr(x, out, OP: tj.constexpr, AXIS: tj.constexpr, KEEP: tj.constexpr,
                SOURCE: tj.constexpr, M: tj.constexpr, N: tj.constexpr, OUT: tj.constexpr):
    if SOURCE == "global":
        src = x[0:M, 0:N]
    elif SOURCE == "shared":
        src = tj.alloc_shared((M, N), x.dtype)
        tj.copy(src, x[0:M, 0:N])
    else:
        src = tj.fragment((M, N), x.dtype)
        tj.copy(src, x[0:M, 0:N])
    fn = getattr(tj, OP)
    result = fn(src, AXIS, keep_dims=KEEP)
    if len(OUT) == 1:
        tj.copy(out[0:OUT[0]], result)
    else:
        tj.copy(out[0:OUT[0], 0:OUT[1]], result)


def _result_dtype(op: str, dtype: str) -> str:
    if op.startswith("arg"):
        return "int32"
    if op == "sum" and dtype in ("float16", "bfloat16"):
        return "float32"
    if op == "sum" and dtype == "int8":
        return "int32"
    return dtype


def _torch_reduce(x: torch.Tensor, op: str, axis, keep: bool) -> torch.Tensor:
    if axis is None:
        whole = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[op](x.double())
        return whole.reshape((1, 1) if keep else (1,))
    if op.startswith("arg"):
        return getattr(torch, op)(x, dim=axis, keepdim=keep)
    return {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[op](
        x.double(), dim=axis, keepdim=keep)


@SETTINGS
@given(m=st.integers(1, 12), n=st.integers(1, 40),
       op=st.sampled_from(["sum", "max", "min", "argmax", "argmin"]),
       axis=st.sampled_from([0, 1, -1, None]), keep=st.booleans(),
       dtype=st.sampled_from(DTYPES), source=st.sampled_from(["fragment", "shared", "global"]),
       seed=st.integers(0, 2**16))
def test_reductions_match_torch(m, n, op, axis, keep, dtype, source, seed):
    if axis is None and op.startswith("arg"):
        axis = 1
    x = make((m, n), dtype, torch.Generator().manual_seed(seed))   # few values: many ties
    expected = _torch_reduce(x, op, axis, keep)
    out = torch.zeros(expected.shape, dtype=torch_dtype(_result_dtype(op, dtype)))
    reduce_expr[(1,)](x, out, OP=op, AXIS=axis, KEEP=keep, SOURCE=source, M=m, N=n,
                      OUT=tuple(expected.shape))
    # the inputs are multiples of 1/4 below 8 in magnitude: every sum is exact
    torch.testing.assert_close(out.double(), expected.double(), rtol=0, atol=0)


@tj.kernel
def scan_expr(x, out, OP: tj.constexpr, AXIS: tj.constexpr, SOURCE: tj.constexpr,
              M: tj.constexpr, N: tj.constexpr):
    if SOURCE == "global":
        src = x[0:M, 0:N]
    elif SOURCE == "shared":
        src = tj.alloc_shared((M, N), x.dtype)
        tj.copy(src, x[0:M, 0:N])
    else:
        src = tj.fragment((M, N), x.dtype)
        tj.copy(src, x[0:M, 0:N])
    if OP == "cumsum":
        result = tj.cumsum(src, axis=AXIS)
    elif OP == "cumprod":
        result = tj.cumprod(src, AXIS)
    else:
        result = tj.associative_scan(src, AXIS, getattr(tj, OP))
    tj.copy(out[0:M, 0:N], result)


_SCAN_OPS = {"cumsum": "sum", "cumprod": "prod", "maximum": "max", "minimum": "min",
             "add": "sum", "mul": "prod"}


@SETTINGS
@given(m=st.integers(1, 12), n=st.integers(1, 40), op=st.sampled_from(sorted(_SCAN_OPS)),
       axis=st.sampled_from([0, 1, -1]), dtype=st.sampled_from(DTYPES),
       source=st.sampled_from(["fragment", "shared", "global"]), seed=st.integers(0, 2**16))
def test_scans_match_torch_and_numpy(m, n, op, axis, dtype, source, seed):
    gen = torch.Generator().manual_seed(seed)
    if _SCAN_OPS[op] == "prod":   # powers of two (and -1): products stay exact
        choices = torch.tensor([-1.0, 0.5, 1.0, 2.0] if "float" in dtype else [-1, 1, 2, 1])
        x = choices[torch.randint(0, 4, (m, n), generator=gen)].to(torch_dtype(dtype))
    else:
        x = make((m, n), dtype, gen)
    result_dtype = "float32" if op in ("cumsum", "add") and dtype in ("float16", "bfloat16") \
        else "int32" if op in ("cumsum", "add") and dtype == "int8" else dtype
    out = torch.zeros((m, n), dtype=torch_dtype(result_dtype))
    scan_expr[(1,)](x, out, OP=op, AXIS=axis, SOURCE=source, M=m, N=n)
    if "float" in dtype:
        dim, wide = axis % 2, x.double()
        expected = {"sum": lambda: wide.cumsum(dim), "prod": lambda: wide.cumprod(dim),
                    "max": lambda: wide.cummax(dim).values,
                    "min": lambda: wide.cummin(dim).values}[_SCAN_OPS[op]]()
        torch.testing.assert_close(out.double(), expected.to(out.dtype).double(), rtol=0, atol=0)
    else:   # integer scans wrap in the result dtype, as numpy's with dtype= do
        expected = reference.scan(out.numpy(), x.numpy(), _SCAN_OPS[op], axis % 2)
        np.testing.assert_array_equal(out.numpy(), expected)


@tj.func
def bigger_magnitude(p, q):
    """Associative, not commutative: on equal magnitudes the earlier element wins."""
    return tj.select(tj.abs(q) > tj.abs(p), q, p)


@tj.func
def plus(p, q):
    return p + q


@tj.kernel
def custom_scan(x, out, COMBINE: tj.constexpr, AXIS: tj.constexpr, M: tj.constexpr,
                N: tj.constexpr):
    t = tj.fragment((M, N), x.dtype)
    tj.copy(t, x[0:M, 0:N])
    combine = bigger_magnitude if COMBINE == "bigger_magnitude" else plus
    tj.copy(out[0:M, 0:N], tj.associative_scan(t, AXIS, combine))


def _sequential_scan(x: torch.Tensor, axis: int, combine) -> torch.Tensor:
    lines = x.double().movedim(axis, -1).clone()
    for j in range(1, lines.shape[-1]):
        lines[..., j] = combine(lines[..., j - 1], lines[..., j])
    return lines.movedim(-1, axis)


@SETTINGS
@given(m=st.integers(1, 12), n=st.integers(1, 40), axis=st.sampled_from([0, 1, -1]),
       combine=st.sampled_from(["bigger_magnitude", "plus"]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_a_tj_func_combine_scans_like_a_sequential_loop(m, n, axis, combine, dtype, seed):
    """The combine sees the earlier elements first: ties of bigger_magnitude (x and -x)
    keep the earlier one, as the sequential loop does."""
    low, high = (-1, 1) if "float" in dtype else (-3, 3)   # float sums stay exact in bf16
    x = make((m, n), dtype, torch.Generator().manual_seed(seed), low=low, high=high)
    out = torch.zeros((m, n), dtype=torch_dtype(dtype))
    custom_scan[(1,)](x, out, COMBINE=combine, AXIS=axis, M=m, N=n)
    fn = {"plus": lambda p, q: p + q,
          "bigger_magnitude": lambda p, q: torch.where(q.abs() > p.abs(), q, p)}[combine]
    expected = _sequential_scan(x, axis % 2, fn)
    if dtype == "int8":   # sums wrap in int8 on both sides
        expected = expected.long().to(torch.int8)
    torch.testing.assert_close(out.double(), expected.to(out.dtype).double(), rtol=0, atol=0)


# ------------------------------------------------------------------------- showcases
@tj.kernel
def softmax_rows(x, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[r:r + BM, 0:BN], config={"fill": float("-inf")})  # no weight past the end
    m = tj.max(t, axis=1, keep_dims=True)
    e = tj.exp(t - m)
    tj.copy(out[r:r + BM, 0:BN], e / tj.sum(e, axis=1, keep_dims=True))


@pytest.mark.parametrize("rows,cols,BN", [(37, 51, 64), (5, 51, 51), (1, 3, 8)])
def test_row_softmax_written_with_max_and_sum_matches_torch(rows, cols, BN):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(2)) * 4
    out = torch.full((rows, cols), 7.0)
    softmax_rows[(tj.cdiv(rows, 4),)](x, out, BM=4, BN=BN)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


@tj.kernel
def row_argmax(x, out_max, out_min, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    tj.copy(out_max[r:r + BM], tj.argmax(x[r:r + BM, 0:BN], axis=1))   # straight from global
    t = tj.fragment((BM, BN), x.dtype)
    tj.copy(t, x[r:r + BM, 0:BN])
    tj.copy(out_min[r:r + BM], tj.argmin(t, axis=-1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_argmax_kernel_matches_torch_with_ties_and_nan(dtype):
    x = make((37, 45), dtype, torch.Generator().manual_seed(4), low=-2, high=2)   # ties
    if dtype != "int32":
        x[3, 7] = x[3, 30] = x[9, 0] = float("nan")    # NaN wins both, the first one
    out_max, out_min = (torch.full((37,), -1, dtype=torch.int32) for _ in range(2))
    row_argmax[(tj.cdiv(37, 8),)](x, out_max, out_min, BM=8, BN=45)
    assert torch.equal(out_max, torch.argmax(x, dim=1).int())
    assert torch.equal(out_min, torch.argmin(x, dim=1).int())
    if dtype != "int32":
        assert out_max[3] == out_min[3] == 7 and out_max[9] == 0


def test_a_sum_reaching_past_the_tensor_end_counts_only_the_elements_that_exist():
    @tj.kernel
    def partial_sums(x, out, BM: tj.constexpr, BN: tj.constexpr):
        r = tj.cta_id(0) * BM
        tj.copy(out[r:r + BM], tj.sum(x[r:r + BM, 0:BN], axis=1))
        tj.copy(out[r:r + BM], tj.max(x[r:r + BM, 0:BN], axis=1) + tj.sum(x[r:r + BM, 0:BN],
                                                                          axis=1))

    x = -torch.rand(10, 6, generator=torch.Generator().manual_seed(5)) - 1  # all negative
    out = torch.zeros(10)
    partial_sums[(3,)](x, out, BM=4, BN=8)
    torch.testing.assert_close(out, x.amax(1) + x.sum(1))


def test_whole_tile_reductions_give_a_one_element_fragment_that_broadcasts():
    @tj.kernel
    def centered(x, out, M: tj.constexpr, N: tj.constexpr):
        t = tj.fragment((M, N), x.dtype)
        tj.copy(t, x[0:M, 0:N])
        tj.copy(out[0:M, 0:N], t - tj.sum(t) / (M * N) + tj.max(t, keep_dims=True) * 0)

    x = torch.randn(7, 9, generator=torch.Generator().manual_seed(6))
    out = torch.zeros(7, 9)
    centered[(1,)](x, out, M=7, N=9)
    torch.testing.assert_close(out, x - x.mean())


def test_a_cpu_vector_reduction_declines_argmax_and_the_fallback_takes_it(lowering):
    x = torch.randn(4, 33)
    compiled = row_argmax.compile(x, torch.zeros(4, dtype=torch.int32),
                                  torch.zeros(4, dtype=torch.int32), BM=4, BN=33)
    records = [r for r in compiled.dispatch_log if r.primitive == "reduce"]
    # argmax; argmin (team_once: read in place and copied, targets/cpu/read_in_place.py)
    assert [r.rule for r in records] == ["tree"] * (3 if lowering == "team_once" else 2)
    reasons = dict(records[0].rejected)
    assert "op 'argmax' is not one of sum, max, min" in reasons["lanes"]


# --------------------------------------------------------------------------- errors
def forgot_dst(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(a, x[0:4, 0:8])
    tj.reduce(a, "max", axis=1)


def max_of_two_tiles(x, out):
    a = tj.fragment((4, 8), x.dtype)
    b = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.max(a, b))


def max_of_two_scalars(x, out):
    out[0, 0] = tj.max(x[0, 0], 2.0)


def sum_of_two_tiles(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.sum(a, a))


def argmax_without_axis(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:1, 0:1], tj.argmax(a, None))


def axis_out_of_range(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:1], tj.min(a, axis=2))


def keep_dims_not_a_bool(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:1], tj.sum(a, 1, keep_dims=1))


@tj.func
def scalar_combine(p, q):
    return 1.0


def combine_returning_a_scalar(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.associative_scan(a, 1, scalar_combine))


def lambda_combine(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.associative_scan(a, 1, lambda p, q: p + q))


def custom_combine_with_dispatch(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.associative_scan(a, 1, bigger_magnitude, dispatch="serial"))


def unknown_combine(x, out):
    a = tj.fragment((4, 8), x.dtype)
    tj.copy(out[0:4, 0:8], tj.associative_scan(a, 1, tj.exp))


def argmax_into_a_float_tile(x, out):
    a = tj.fragment((4, 8), x.dtype)
    d = tj.fragment((4,), x.dtype)
    tj.reduce(d, a, "argmax", 1)


ERRORS = [
    (forgot_dst, "tj.reduce(a, ", r"writes dst, which comes first.*expression form "
                                  r"tj\.max\(src, axis=1\)"),
    (max_of_two_tiles, "tj.max(a, b)", r"reduces one tile along an axis; for the elementwise "
                                       r"maximum of two tiles or values use tj\.maximum\(a, b\)"),
    (max_of_two_scalars, "tj.max(x[0, 0], 2.0)", r"use tj\.maximum\(a, b\)"),
    (sum_of_two_tiles, "tj.sum(a, a)", r"elementwise sum .* use a \+ b or tj\.add\(a, b\)"),
    (argmax_without_axis, "tj.argmax(a, None)", r"tj\.argmax needs an axis"),
    (axis_out_of_range, "tj.min(a, axis=2)", r"tj\.min: axis must be a compile-time int in "
                                             r"\[-2, 2\), got the compile-time int 2"),
    (keep_dims_not_a_bool, "keep_dims=1", r"tj\.sum: keep_dims= must be a compile-time bool"),
    (combine_returning_a_scalar, "associative_scan(a, 1, scalar_combine)",
     r"the combine scalar_combine must return a tile of its arguments' shape \(4, 7\), got "
     r"the compile-time float 1\.0"),
    (lambda_combine, "lambda p, q", r"lambda expressions"),
    (custom_combine_with_dispatch, "dispatch=", r"dispatch= and config= apply to the named "
                                                r"combines"),
    (unknown_combine, "associative_scan(a, 1, tj.exp)", r"the combine must be one of 'sum', "
                                                        r"'prod', 'max', 'min'"),
    (argmax_into_a_float_tile, "tj.reduce(d, a, ", r"argmax writes indices, so dst must be an "
                                                   r"integer tile, got tj\.float32"),
]


@pytest.mark.parametrize("fn,at,message", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_mistakes_are_located_compilation_errors_that_teach(fn, at, message):
    with pytest.raises(tj.CompilationError, match=message) as info:
        tj.kernel(fn).compile(torch.zeros(8, 8), torch.zeros(8, 8))
    err = info.value
    lines, start = inspect.getsourcelines(fn)
    assert err.file == inspect.getsourcefile(fn)
    assert err.line == start + next(i for i, line in enumerate(lines) if at in line), str(err)
    assert at in str(err) and "^" in str(err)
