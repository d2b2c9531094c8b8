"""dtypes: f16 / bf16 / fp8 storage and conversions against torch, f64 rounding, integer
semantics (Python floor division and modulo, no traps), saturating float->int casts."""
import numpy as np
import pytest
import torch
from cpu_kernels import KernelBuilder, vector

from tilejit.ir.types import (ScalarType, bf16, f8e4m3, f8e5m2, f16, f32, f64, i1, i8, i32,
                              i64, u8, u32)

NARROW = [f16, bf16, f8e4m3, f8e5m2]


def pointwise(name: str, out_type: ScalarType, in_types, body) -> KernelBuilder:
    """out[i] = body(kb, *inputs[i]) for i in range(len(out))."""
    params = {f"x{k}": vector(t) for k, t in enumerate(in_types)}
    with KernelBuilder(name, **params, out=vector(out_type)) as kb:
        with kb.loop(kb.c(0, i64), kb.buffer_dim(kb.p["out"], 0)) as (i,):
            values = [kb.load(kb.p[f"x{k}"], [i]) for k in range(len(in_types))]
            kb.store(kb.p["out"], body(kb, *values), [i])
    return kb


def binary(name: str):
    return lambda kb, x, y: kb.op(name, x, y)


def interesting_f32(count=4001) -> torch.Tensor:
    rng = np.random.default_rng(1)
    special = [0.0, -0.0, 1.0, -1.5, 448.0, 464.0, 465.0, 479.0, 480.0, 57344.0, 61440.0,
               65504.0, 65520.0, 1e5, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17, 2.0**-24, 1e-30,
               3.3895314e38, float("inf"), float("-inf"), float("nan")]
    scales = 2.0 ** rng.integers(-30, 20, count)
    values = np.concatenate([special, rng.standard_normal(count) * scales]).astype(np.float32)
    return torch.from_numpy(values)


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_round_trip_through_narrow_float_matches_torch(t):
    x = interesting_f32()
    out = torch.empty_like(x)
    pointwise("round_trip", f32, [f32], lambda kb, v: kb.cast(kb.cast(v, t), f32)).run(1, [x, out])
    expected = x.to(t.torch_dtype()).to(torch.float32)
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_narrow_storage_arithmetic_rounds_per_op(t):
    """z = x * y + x, each op rounded to t (like hardware with native t arithmetic)."""
    torch_type = t.torch_dtype()
    x = (torch.randn(1003) * 4).to(torch_type)
    y = (torch.randn(1003) * 4).to(torch_type)
    z = torch.empty(1003, dtype=torch_type)
    kb = pointwise("narrow_math", t, [t, t], lambda kb, a, b: kb.op("add", kb.op("mul", a, b), a))
    kb.run(1, [x, y, z])
    product = (x.float() * y.float()).to(torch_type)
    expected = (product.float() + x.float()).to(torch_type)
    torch.testing.assert_close(z.float(), expected.float(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("t", [f16, bf16], ids=str)
def test_narrow_float_scalars_and_compares(t):
    """max / abs / cmp widen to f32; the result type stays narrow."""
    torch_type = t.torch_dtype()
    x = torch.tensor([-3.0, 0.5, 7.25, -0.0, 100.0]).to(torch_type)
    out = torch.empty_like(x)

    def body(kb, v):
        clipped = kb.op("max", kb.unary("abs", v), kb.c(1.0, t))
        return kb.select(kb.cmp("gt", v, kb.c(50.0, t)), kb.c(-1.0, t), clipped)
    pointwise("narrow_ops", t, [t], body).run(1, [x, out])
    expected = torch.where(x > 50, torch.tensor(-1.0, dtype=torch_type), x.abs().clamp(min=1))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_f64_to_f16_rounds_once():
    """1 + 2**-11 + 2**-40 is just above a half-way point: going through f32 would round it
    to the tie and then down; a single rounding goes up."""
    x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40, 65519.99, -2.0**-25 - 2**-60,
                  1e300, 3.0000000001], np.float64)
    out = np.zeros(len(x), np.float16)
    pointwise("f64_to_f16", f16, [f64], lambda kb, v: kb.cast(v, f16)).run(1, [x, out])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x.astype(np.float16))


def test_integer_floor_division_and_modulo_follow_python():
    a = np.array([7, -7, 7, -7, 0, 5, -2**31, 13], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, -1, 1], np.int32)
    floordiv, mod = np.zeros_like(a), np.zeros_like(a)
    pointwise("floordiv", i32, [i32, i32], binary("floordiv")).run(1, [a, b, floordiv])
    pointwise("mod", i32, [i32, i32], binary("mod")).run(1, [a, b, mod])
    np.testing.assert_array_equal(floordiv[:5], [3, -4, -4, 3, 0])
    np.testing.assert_array_equal(mod[:5], [1, 1, -1, -1, 0])
    assert floordiv[5] == 0 and mod[5] == 0  # x // 0 and x % 0 give 0 (numpy), not a trap
    assert floordiv[6] == -2**31 and mod[6] == 0  # MIN // -1 wraps instead of trapping


def test_casts_saturate_and_wrap():
    x = np.array([300.7, -5.5, float("nan"), 1e10, 2.5], np.float32)
    to_u8, to_i8 = np.zeros(5, np.uint8), np.zeros(5, np.int8)
    pointwise("to_u8", u8, [f32], lambda kb, v: kb.cast(v, u8)).run(1, [x, to_u8])
    pointwise("to_i8", i8, [f32], lambda kb, v: kb.cast(v, i8)).run(1, [x, to_i8])
    np.testing.assert_array_equal(to_u8, [255, 0, 0, 255, 2])
    np.testing.assert_array_equal(to_i8, [127, -5, 0, 127, 2])
    wrapped = np.zeros(3, np.uint8)
    source = np.array([256 + 7, -1, 42], np.int32)
    pointwise("wrap", u8, [i32], lambda kb, v: kb.cast(v, u8)).run(1, [source, wrapped])
    np.testing.assert_array_equal(wrapped, [7, 255, 42])


def test_bool_buffers_and_unsigned_compare():
    x = np.array([0, 1, 200, 255], np.uint8)
    out = np.zeros(4, np.bool_)
    pointwise("gt", i1, [u8], lambda kb, v: kb.cmp("gt", v, kb.c(100, u8))).run(1, [x, out])
    np.testing.assert_array_equal(out, [False, False, True, True])


def test_unsigned_arithmetic():
    a = np.array([3_000_000_000, 7, 4_294_967_295, 12], np.uint32)
    b = np.array([7, 3_000_000_000, 2, 5], np.uint32)
    out = np.zeros(4, np.uint32)

    def body(kb, x, y):  # (x // y) + (x >> 1) + max(x, y) % 1000
        shifted = kb.op("shr", x, kb.c(1, u32))
        return kb.op("add", kb.op("add", kb.op("floordiv", x, y), shifted),
                     kb.op("mod", kb.op("max", x, y), kb.c(1000, u32)))
    pointwise("unsigned", u32, [u32, u32], body).run(1, [a, b, out])
    a64, b64 = a.astype(np.uint64), b.astype(np.uint64)
    expected = (a64 // b64 + (a64 >> 1) + np.maximum(a64, b64) % 1000) % 2**32
    np.testing.assert_array_equal(out, expected.astype(np.uint32))


def test_float_floor_division_and_modulo_follow_python():
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.25], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.1], np.float32)
    floordiv, mod = np.zeros_like(a), np.zeros_like(a)
    pointwise("ffloordiv", f32, [f32, f32], binary("floordiv")).run(1, [a, b, floordiv])
    pointwise("fmod", f32, [f32, f32], binary("mod")).run(1, [a, b, mod])
    np.testing.assert_array_equal(floordiv, np.floor_divide(a, b))
    np.testing.assert_allclose(mod, np.mod(a, b), rtol=1e-6)
