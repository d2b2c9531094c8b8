"""Every pointwise primitive, statement and expression forms, broadcasting and scalar
operands, per dtype; masked edge tiles; compared with numpy (tilejit.passes.reference)
for integers and with float64 torch rounded to the dtype for floats."""
import numpy as np
import pytest
import torch
from e2e_helpers import (
    FLOATS,
    INTS,
    assert_close,
    assert_guard_intact,
    guarded,
    is_float,
    make,
    torch_dtype,
)

import tilejit as tj
from tilejit.passes import reference

H, W, BM, BN = 37, 50, 16, 24          # 3 x 3 CTAs, the last row and column of tiles masked
GRID = (tj.cdiv(H, BM), tj.cdiv(W, BN))
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]


@tj.kernel
def binary_ops(x, y, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    a = tj.fragment((BM, BN), x.dtype)
    b = tj.fragment((BM, BN), y.dtype)
    tj.copy(a, x[r:r + BM, c:c + BN])
    tj.copy(b, y[r:r + BM, c:c + BN])
    d = tj.fragment((BM, BN), out.dtype)
    tj.add(d, a, b)
    tj.copy(out[0, r:r + BM, c:c + BN], d)
    tj.sub(d, a, b)
    tj.copy(out[1, r:r + BM, c:c + BN], d)
    tj.mul(d, a, b)
    tj.copy(out[2, r:r + BM, c:c + BN], d)
    tj.div(d, a, b)
    tj.copy(out[3, r:r + BM, c:c + BN], d)
    tj.maximum(d, a, b)
    tj.copy(out[4, r:r + BM, c:c + BN], d)
    tj.minimum(d, a, b)
    tj.copy(out[5, r:r + BM, c:c + BN], d)


@tj.kernel
def expression_ops(x, y, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    a = tj.fragment((BM, BN), x.dtype)
    b = tj.fragment((BM, BN), y.dtype)
    tj.copy(a, x[r:r + BM, c:c + BN])
    tj.copy(b, y[r:r + BM, c:c + BN])
    tj.copy(out[0, r:r + BM, c:c + BN], a + b)
    tj.copy(out[1, r:r + BM, c:c + BN], a - b)
    tj.copy(out[2, r:r + BM, c:c + BN], a * b)
    tj.copy(out[3, r:r + BM, c:c + BN], tj.maximum(a, b))
    tj.copy(out[4, r:r + BM, c:c + BN], tj.minimum(a, b))
    tj.copy(out[5, r:r + BM, c:c + BN], -a)
    tj.copy(out[6, r:r + BM, c:c + BN], tj.abs(a))
    tj.copy(out[7, r:r + BM, c:c + BN], tj.fma(a, b, a))


@tj.kernel
def unary_float_ops(x, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    a = tj.fragment((BM, BN), x.dtype)
    tj.copy(a, x[r:r + BM, c:c + BN])
    d = tj.fragment((BM, BN), out.dtype)
    tj.exp(d, a)
    tj.copy(out[0, r:r + BM, c:c + BN], d)
    tj.exp2(d, a)
    tj.copy(out[1, r:r + BM, c:c + BN], d)
    tj.log(d, a)
    tj.copy(out[2, r:r + BM, c:c + BN], d)
    tj.sqrt(d, a)
    tj.copy(out[3, r:r + BM, c:c + BN], d)
    tj.rsqrt(d, a)
    tj.copy(out[4, r:r + BM, c:c + BN], d)
    tj.neg(d, a)
    tj.copy(out[5, r:r + BM, c:c + BN], d)
    tj.abs(d, a)
    tj.copy(out[6, r:r + BM, c:c + BN], d)


@tj.kernel
def ternary_ops(x, y, z, out, s, BM: tj.constexpr, BN: tj.constexpr):
    """fma, select (cond from a comparison and from a bool tensor), fill with a literal and a
    run-time scalar, broadcasting a (BM, 1) column and a (1, BN) row, scalar operands."""
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    a = tj.fragment((BM, BN), x.dtype)
    b = tj.fragment((BM, BN), y.dtype)
    tj.copy(a, x[r:r + BM, c:c + BN])
    tj.copy(b, y[r:r + BM, c:c + BN])
    cond = tj.fragment((BM, BN), tj.bool)
    tj.copy(cond, z[r:r + BM, c:c + BN])
    d = tj.fragment((BM, BN), out.dtype)
    tj.fma(d, a, b, a)
    tj.copy(out[0, r:r + BM, c:c + BN], d)
    tj.select(d, a < b, a, b)
    tj.copy(out[1, r:r + BM, c:c + BN], d)
    tj.select(d, cond, a, 3)
    tj.copy(out[2, r:r + BM, c:c + BN], d)
    tj.fill(d, 5)
    tj.copy(out[3, r:r + BM, c:c + BN], d)
    tj.fill(d, s)
    tj.copy(out[4, r:r + BM, c:c + BN], d)
    col = tj.fragment((BM, 1), x.dtype)
    tj.copy(col, x[r:r + BM, 0:1])
    row = tj.fragment((1, BN), y.dtype)
    tj.copy(row, y[0:1, c:c + BN])
    tj.add(d, col, row)                              # (BM, 1) + (1, BN)
    tj.copy(out[5, r:r + BM, c:c + BN], d)
    tj.mul(d, a, col)                                # (BM, BN) * (BM, 1)
    tj.copy(out[6, r:r + BM, c:c + BN], d)
    tj.sub(d, a, 2)                                  # a Python scalar operand
    tj.copy(out[7, r:r + BM, c:c + BN], d)
    tj.maximum(d, a, s)                              # a run-time scalar operand
    tj.copy(out[8, r:r + BM, c:c + BN], d)


def _float_ref(op, *args, dtype):
    """float64 result rounded to ``dtype``; fma rounds its product first, like
    ``reference.pointwise`` (multiply, then add, each in the destination's dtype)."""
    a = [t.double() for t in args]
    if op == "fma":
        product = (a[0] * a[1]).to(torch_dtype(dtype)).double()
        return (product + a[2]).to(torch_dtype(dtype))
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "maximum": torch.maximum, "minimum": torch.minimum, "exp": torch.exp,
          "exp2": torch.exp2, "log": torch.log, "sqrt": torch.sqrt,
          "rsqrt": torch.rsqrt, "neg": torch.neg, "abs": torch.abs}[op]
    return fn(*a).to(torch_dtype(dtype))


def _int_ref(op, dtype, *args):
    dst = np.zeros(np.broadcast_shapes(*[np.shape(a) for a in args]), args[0].numpy().dtype)
    return torch.from_numpy(reference.pointwise(op, dst, *[a.numpy() for a in args]))


def _inputs(name, seed):
    gen = torch.Generator().manual_seed(seed)
    x = make((H, W), name, gen)
    y = make((H, W), name, gen, nonzero=True)
    return x, y


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_binary_statements(name):
    x, y = _inputs(name, 1)
    out, whole = guarded((len(BINARY), H, W), name)
    binary_ops[GRID](x, y, out, BM=BM, BN=BN)
    for i, op in enumerate(BINARY):
        expected = _float_ref(op, x, y, dtype=name) if is_float(name) else _int_ref(op, name, x, y)
        assert_close(out[i], expected, name)
    assert_guard_intact(whole, (len(BINARY), H, W), name)


def test_integer_wraparound_and_truncating_division():
    x = torch.tensor([[0, 3, 250, 7]], dtype=torch.uint8).repeat(H, 13)[:, :W]
    y = torch.tensor([[7, 2, 10, 3]], dtype=torch.uint8).repeat(H, 13)[:, :W]
    out = torch.zeros((len(BINARY), H, W), dtype=torch.uint8)
    binary_ops[GRID](x, y, out, BM=BM, BN=BN)
    assert out[0, 0, :4].tolist() == [7, 5, 4, 10]     # 250 + 10 wraps
    assert out[1, 0, :4].tolist() == [249, 1, 240, 4]  # 0 - 7 wraps
    xi = torch.tensor([[-7, 7, -7, 7]], dtype=torch.int32).repeat(H, 13)[:, :W]
    yi = torch.tensor([[2, -2, -2, 2]], dtype=torch.int32).repeat(H, 13)[:, :W]
    outi = torch.zeros((len(BINARY), H, W), dtype=torch.int32)
    binary_ops[GRID](xi, yi, outi, BM=BM, BN=BN)
    assert outi[3, 0, :4].tolist() == [-3, -3, 3, 3]   # C division: toward zero


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float8_e5m2", "int8",
                                  "int64", "uint8"])
def test_expressions(name):
    x, y = _inputs(name, 2)
    if name == "uint8":
        x, y = x // 2, y // 2                       # keep a * b + a inside uint8
    out, whole = guarded((8, H, W), name)
    expression_ops[GRID](x, y, out, BM=BM, BN=BN)
    ops = [("add", x, y), ("sub", x, y), ("mul", x, y), ("maximum", x, y),
           ("minimum", x, y), ("neg", x), ("abs", x), ("fma", x, y, x)]
    for i, (op, *args) in enumerate(ops):
        expected = (_float_ref(op, *args, dtype=name) if is_float(name)
                    else _int_ref(op, name, *args))
        assert_close(out[i], expected, name)
    assert_guard_intact(whole, (8, H, W), name)


def test_integer_true_division_expression_is_float():
    @tj.kernel
    def true_div(x, y, out, BLOCK: tj.constexpr):
        a = tj.fragment((BLOCK,), x.dtype)
        b = tj.fragment((BLOCK,), y.dtype)
        tj.copy(a, x[0:BLOCK])
        tj.copy(b, y[0:BLOCK])
        tj.copy(out[0:BLOCK], a / b)

    x = torch.tensor([7, -7, 1, 9], dtype=torch.int32)
    y = torch.tensor([2, 2, 3, -4], dtype=torch.int32)
    out = torch.zeros(4, dtype=torch.float32)
    true_div[(1,)](x, y, out, BLOCK=4)
    torch.testing.assert_close(out, x / y)


@pytest.mark.parametrize("name", FLOATS)
def test_unary_float_ops(name):
    gen = torch.Generator().manual_seed(3)
    x = (make((H, W), name, gen, 1, 8).double().abs() + 0.25).to(torch_dtype(name))
    out, whole = guarded((7, H, W), name)
    unary_float_ops[GRID](x, out, BM=BM, BN=BN)
    for i, op in enumerate(["exp", "exp2", "log", "sqrt", "rsqrt", "neg", "abs"]):
        assert_close(out[i], _float_ref(op, x, dtype=name), name)
    assert_guard_intact(whole, (7, H, W), name)


@pytest.mark.parametrize("name", ["float32", "float64", "bfloat16", "float8_e4m3", "int32",
                                  "int16", "uint8"])
def test_fma_select_fill_broadcast_scalars(name):
    x, y = _inputs(name, 4)
    gen = torch.Generator().manual_seed(44)
    z = make((H, W), "bool", gen)
    if name == "uint8":
        x, y = x // 2, y // 2
    out, whole = guarded((9, H, W), name)
    ternary_ops[GRID](x, y, z, out, 4, BM=BM, BN=BN)
    dt = torch_dtype(name)
    xd, yd = x.double(), y.double()
    expected = [_float_ref("fma", x, y, x, dtype=name).double() if is_float(name)
                else xd * yd + xd, torch.where(xd < yd, xd, yd), torch.where(z, xd, 3.0),
                torch.full((H, W), 5.0), torch.full((H, W), 4.0), xd[:, :1] + yd[:1, :],
                xd * xd[:, :1], xd - 2, torch.maximum(xd, torch.tensor(4.0))]
    if name == "uint8":
        expected[7] = (x.to(torch.int64) - 2) % 256
    for i, e in enumerate(expected):
        assert_close(out[i], e.to(dt), name)
    assert_guard_intact(whole, (9, H, W), name)


def test_comparisons_give_bool_fragments():
    @tj.kernel
    def compare(x, y, out, BLOCK: tj.constexpr):
        base = tj.cta_id(0) * BLOCK
        a = tj.fragment((BLOCK,), x.dtype)
        b = tj.fragment((BLOCK,), y.dtype)
        tj.copy(a, x[base:base + BLOCK])
        tj.copy(b, y[base:base + BLOCK])
        tj.copy(out[0, base:base + BLOCK], a == b)
        tj.copy(out[1, base:base + BLOCK], a != b)
        tj.copy(out[2, base:base + BLOCK], a < b)
        tj.copy(out[3, base:base + BLOCK], a <= b)
        tj.copy(out[4, base:base + BLOCK], a > b)
        tj.copy(out[5, base:base + BLOCK], a >= b)

    gen = torch.Generator().manual_seed(8)
    x = make((300,), "int16", gen, -3, 3)
    y = make((300,), "int16", gen, -3, 3)
    out, whole = guarded((6, 300), "bool")
    out.fill_(False)
    compare[(tj.cdiv(300, 64),)](x, y, out, BLOCK=64)
    for i, fn in enumerate([torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]):
        assert torch.equal(out[i], fn(x, y)), i
    assert_guard_intact(whole, (6, 300), "bool")
