"""Bool tile arithmetic is numpy's (``add`` is or, ``mul`` is and; no ``sub`` or ``neg``), and
run-time shifts by the bit width or more have a defined result (issue 13)."""
import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.passes import reference

N = 4


@tj.kernel
def bool_ops(x, y, out):
    a = tj.fragment((N,), tj.bool)
    b = tj.fragment((N,), tj.bool)
    tj.copy(a, x[0:N])
    tj.copy(b, y[0:N])
    d = tj.fragment((N,), tj.bool)
    tj.add(d, a, b)
    tj.copy(out[0, 0:N], d)
    tj.mul(d, a, b)
    tj.copy(out[1, 0:N], d)
    tj.div(d, a, b)
    tj.copy(out[2, 0:N], d)
    tj.maximum(d, a, b)
    tj.copy(out[3, 0:N], d)
    tj.minimum(d, a, b)
    tj.copy(out[4, 0:N], d)
    tj.fma(d, a, b, a)
    tj.copy(out[5, 0:N], d)
    tj.copy(out[6, 0:N], a + b)
    tj.copy(out[7, 0:N], a * b)


def test_bool_tile_arithmetic_matches_numpy():
    x = torch.tensor([True, True, False, False])
    y = torch.tensor([True, False, True, False])
    out = torch.zeros((8, N), dtype=torch.bool)
    bool_ops[(1,)](x, y, out)
    a, b, dst = x.numpy(), y.numpy(), np.zeros(N, bool)
    expected = [reference.pointwise(op, dst, *srcs) for op, srcs in (
        ("add", (a, b)), ("mul", (a, b)), ("div", (a, b)), ("maximum", (a, b)),
        ("minimum", (a, b)), ("fma", (a, b, a)), ("add", (a, b)), ("mul", (a, b)))]
    np.testing.assert_array_equal(out.numpy(), np.stack(expected))
    np.testing.assert_array_equal(out[0].numpy(), [True, True, True, False])   # True + True


@tj.kernel
def bool_sub(x, out):
    a = tj.fragment((N,), tj.bool)
    tj.copy(a, x[0:N])
    tj.sub(out[0:N], a, a)


@tj.kernel
def bool_minus(x, out):
    a = tj.fragment((N,), tj.bool)
    tj.copy(a, x[0:N])
    tj.copy(out[0:N], a - a)


@tj.kernel
def bool_negate(x, out):
    a = tj.fragment((N,), tj.bool)
    tj.copy(a, x[0:N])
    tj.copy(out[0:N], -a)


@pytest.mark.parametrize("kernel", [bool_sub, bool_minus, bool_negate])
def test_bool_tile_subtraction_is_refused_like_numpy_and_torch(kernel):
    x = torch.ones(N, dtype=torch.bool)
    with pytest.raises(tj.CompilationError, match="not defined on bool tiles"):
        kernel[(1,)](x, torch.zeros(N, dtype=torch.bool))


@tj.kernel
def shifts(x, out):
    v = x[0]
    count = x[1]   # of the value's own dtype, so the shift is as wide as the value
    out[0] = v << count
    out[1] = v >> count


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int8])
@pytest.mark.parametrize("value", [1, -3, 100])
def test_shift_by_the_bit_width_or_more_shifts_every_bit_out(dtype, value):
    bits = torch.iinfo(dtype).bits
    signed = torch.iinfo(dtype).min < 0
    value = value if signed else value % 256
    for count in (0, 3, bits - 1, bits, bits + 8, 40, 100, 200):
        if count > torch.iinfo(dtype).max:
            continue
        x = torch.tensor([value, count], dtype=dtype)
        out = torch.zeros(2, dtype=dtype)
        shifts[(1,)](x, out)
        wrapped = (value << count) % (1 << bits) if count < bits else 0
        if signed and wrapped >= 1 << (bits - 1):
            wrapped -= 1 << bits
        right = value >> min(count, bits - 1) if signed else (value >> count if count < bits else 0)
        assert out.tolist() == [wrapped, right], (dtype, value, count)
