"""packed_binary and packed_cast on the CPU: each thread computes the pair (x[2t], x[2t+1])
with one op; each lane must be the scalar op's bits (torch's f16/bf16 arithmetic, which
also computes in f32 and rounds once), NaN propagating through max/min, signed zeros,
overflow to inf and round-to-nearest-even ties included."""
import pytest
import torch
from cpu_kernels import KernelBuilder, vector

from tilejit.ir.types import bf16, f16, f32

THREADS = 64
SPECIAL = [float("nan"), 0.0, -0.0, 65504.0, -65504.0, 1.0, 2 ** -24, float("inf")]


def pair_kernel(dtype, op):
    with KernelBuilder("pairs", num_warps=THREADS // 32, x=vector(dtype), y=vector(dtype),
                       out=vector(dtype)) as kb:
        first = kb.op("mul", kb.global_thread_id(), kb.c(2))
        second = kb.op("add", first, kb.c(1))
        pairs = [[kb.load(kb.p[name], [i]) for i in (first, second)] for name in ("x", "y")]
        for value, i in zip(kb.packed_binary(op, *pairs), (first, second)):
            kb.store(kb.p["out"], value, [i])
    return kb


def unary_kernel(dtype, op):
    with KernelBuilder("pairs", num_warps=THREADS // 32, x=vector(dtype),
                       out=vector(dtype)) as kb:
        first = kb.op("mul", kb.global_thread_id(), kb.c(2))
        second = kb.op("add", first, kb.c(1))
        values = kb.packed_unary(op, [kb.load(kb.p["x"], [i]) for i in (first, second)])
        for value, i in zip(values, (first, second)):
            kb.store(kb.p["out"], value, [i])
    return kb


def cast_kernel(dtype):
    with KernelBuilder("rounds", num_warps=THREADS // 32, x=vector(f32),
                       out=vector(dtype)) as kb:
        first = kb.op("mul", kb.global_thread_id(), kb.c(2))
        second = kb.op("add", first, kb.c(1))
        values = kb.packed_cast(*(kb.load(kb.p["x"], [i]) for i in (first, second)), dtype)
        for value, i in zip(values, (first, second)):
            kb.store(kb.p["out"], value, [i])
    return kb


def operands(dtype):
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(2 * THREADS, generator=gen) * 300).to(dtype.torch_dtype())
    y = torch.randn(2 * THREADS, generator=gen).to(dtype.torch_dtype())
    x[:8], y[:8] = torch.tensor(SPECIAL), torch.tensor(SPECIAL[::-1])
    return x, y


@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
@pytest.mark.parametrize("op, reference", [("add", torch.add), ("sub", torch.sub),
                                           ("mul", torch.mul), ("max", torch.maximum),
                                           ("min", torch.minimum)])
def test_each_lane_of_a_pair_is_the_scalar_op(dtype, op, reference):
    x, y = operands(dtype)
    out = torch.zeros_like(x)
    pair_kernel(dtype, op).run(1, [x, y, out])
    expected = reference(x, y)
    nan = expected.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan].view(torch.int16), expected[~nan].view(torch.int16))


@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
@pytest.mark.parametrize("op, reference", [("neg", torch.neg), ("abs", torch.abs)])
def test_neg_and_abs_of_a_pair_change_the_sign_alone(dtype, op, reference):
    x, _ = operands(dtype)
    out = torch.zeros_like(x)
    unary_kernel(dtype, op).run(1, [x, out])
    expected = reference(x)
    nan = expected.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan].view(torch.int16), expected[~nan].view(torch.int16))


@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
def test_a_cast_pair_rounds_each_value_to_nearest_even(dtype):
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(2 * THREADS, generator=gen) * 1e4
    x[:4] = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1e6])   # ties; overflow
    out = torch.zeros(2 * THREADS, dtype=dtype.torch_dtype())
    cast_kernel(dtype).run(1, [x, out])
    assert torch.equal(out, x.to(dtype.torch_dtype()))
