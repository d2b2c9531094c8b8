"""copy and cast through the public API: every dtype pair the CPU converts, staged through
registers or shared memory or straight global -> global, with masked edge tiles (loads
past the end read 0, stores past the end are skipped: the bytes after the tensor stay)."""
import numpy as np
import pytest
import torch
from e2e_helpers import (
    ALL,
    assert_close,
    assert_guard_intact,
    guarded,
    make,
    torch_dtype,
)

import tilejit as tj


@tj.kernel
def copy2d(x, out, BM: tj.constexpr, BN: tj.constexpr, STAGE: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    if STAGE == "fragment":
        a = tj.fragment((BM, BN), x.dtype)
        tj.copy(a, x[r:r + BM, c:c + BN])
        tj.copy(out[r:r + BM, c:c + BN], a)
    elif STAGE == "shared":
        s = tj.alloc_shared((BM, BN), x.dtype)
        tj.copy(s, x[r:r + BM, c:c + BN])
        tj.sync()
        tj.copy(out[r:r + BM, c:c + BN], s)
    else:
        tj.copy(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN])


@tj.kernel
def cast_forms(x, out1, out2, BLOCK: tj.constexpr):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[base:base + BLOCK])
    b = tj.fragment((BLOCK,), out1.dtype)
    tj.cast(b, a)                                   # statement form
    tj.copy(out1[base:base + BLOCK], b)
    tj.copy(out2[base:base + BLOCK], tj.cast(a, out2.dtype))   # expression form


def _convertible(src: str, dst: str) -> tuple[int, int]:
    """A value range whose conversion src -> dst is defined (no overflow, no negatives
    into unsigned)."""
    return (0 if "uint8" in (src, dst) else -8), 8


PAIRS = sorted({(s, "float32") for s in ALL} | {("float32", d) for d in ALL}
               | {("int32", d) for d in ALL} | {("bool", "int8"), ("float16", "bfloat16"),
                                                ("bfloat16", "float8_e5m2"),
                                                ("float8_e4m3", "float8_e5m2"),
                                                ("int64", "uint8"), ("float64", "int64")})


@pytest.mark.parametrize("src,dst", PAIRS)
def test_copy_converts_with_masked_edges(src, dst):
    gen = torch.Generator().manual_seed(len(src) * 31 + len(dst))
    shape = (70, 45)
    low, high = _convertible(src, dst)
    x = make(shape, src, gen, low, high)
    out, whole = guarded(shape, dst)
    copy2d[(tj.cdiv(70, 32), tj.cdiv(45, 16))](x, out, BM=32, BN=16, STAGE="fragment")
    expected = x.to(torch.float64).to(torch_dtype(dst)) if src != "bool" else x.to(torch_dtype(dst))
    assert_close(out, expected, dst)
    assert_guard_intact(whole, shape, dst)


@pytest.mark.parametrize("stage", ["fragment", "shared", "global"])
@pytest.mark.parametrize("name", ["float32", "bfloat16", "int16", "uint8"])
def test_copy_stages_non_power_of_two(stage, name):
    gen = torch.Generator().manual_seed(5)
    shape = (96, 80)
    x = make(shape, name, gen)
    out, whole = guarded(shape, name)
    copy2d[(tj.cdiv(96, 40), tj.cdiv(80, 24))](x, out, BM=40, BN=24, STAGE=stage)
    assert torch.equal(out, x)
    assert_guard_intact(whole, shape, name)


def test_copy_numpy_arrays_and_strided_views():
    x = np.arange(96 * 80, dtype=np.float32).reshape(96, 80)
    out = np.zeros((96, 80), np.float32)
    copy2d[(3, 4)](x, out, BM=32, BN=20, STAGE="shared")
    np.testing.assert_array_equal(out, x)
    # a transposed (non-unit innermost stride) source and a row-strided destination
    t = torch.arange(50 * 30, dtype=torch.float64).reshape(50, 30)
    src = t.t()                                   # (30, 50), strides (1, 30)
    out, whole = guarded((30, 50), "float64", pad=5)
    copy2d[(2, 2)](src, out, BM=16, BN=32, STAGE="global")
    assert torch.equal(out, src)
    assert_guard_intact(whole, (30, 50), "float64")


@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float64", "int32"),
                                     ("bfloat16", "float32"), ("int8", "float8_e4m3"),
                                     ("float32", "bool"), ("uint8", "int64")])
def test_cast_statement_and_expression(src, dst):
    gen = torch.Generator().manual_seed(9)
    n = 1000                                       # rows of 1000: a 104-element tail tile
    low, high = _convertible(src, dst)
    x = make((n,), src, gen, low, high)
    out1, whole1 = guarded((n,), dst)
    out2, whole2 = guarded((n,), dst)
    cast_forms[(tj.cdiv(n, 128),)](x, out1, out2, BLOCK=128)
    expected = x.to(torch.float64).to(torch_dtype(dst))
    assert_close(out1, expected, dst)
    assert_close(out2, expected, dst)
    assert_guard_intact(whole1, (n,), dst)
    assert_guard_intact(whole2, (n,), dst)


def test_float_to_int_truncates_toward_zero():
    x = torch.tensor([-2.75, -2.5, -0.5, 0.5, 1.5, 2.75, 7.99], dtype=torch.float32)
    out = torch.zeros(7, dtype=torch.int32)
    cast_forms[(1,)](x, out, torch.zeros(7, dtype=torch.int8), BLOCK=8)
    assert out.tolist() == [-2, -2, 0, 0, 1, 2, 7]


@tj.kernel
def copy_from(x, out, start):
    t = tj.fragment((8,), tj.float32)
    tj.copy(t, x[start:start + 8])
    tj.copy(out[start:start + 8], t)


@pytest.mark.parametrize("start, copied", [(4, range(4, 12)), (14, range(14, 16)),
                                           (-3, ()), (-10**8, ()), (10**9, ())])
def test_tiles_past_either_end_never_touch_memory_outside(start, copied):
    """Past the end: the in-bounds part is copied. Starting before the tensor: the tile is
    wholly out of bounds (nothing read or written before the first element)."""
    x_base, out_base = torch.arange(32.0), torch.full((32,), -1.0)
    x, out = x_base[8:24], out_base[8:24]
    copy_from[(1,)](x, out, start)
    expected = torch.full((32,), -1.0)
    for i in copied:
        expected[8 + i] = x[i]
    assert torch.equal(out_base, expected)
