"""Counter-based random numbers: tj.rand, tj.randn, tj.randint (issue 12, item 5).

The kernels' streams are compared bit for bit with ``philox4x32_10`` below, a plain Python
implementation of Philox 4x32-10 (Salmon et al., SC'11) checked against the Random123
known-answer vectors, and with ``tilejit.passes.reference`` (numpy). The mapping from
(seed, offset) to key and counter and from words to floats is docs/language.md's.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.passes import reference

SETTINGS = settings(max_examples=5, deadline=None, derandomize=True, database=None)
M32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """The four output words of Philox 4x32 with 10 rounds, in plain Python ints."""
    c, k = list(counter), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
    return c


def words(seed: int, offset: int, offset_bits: int = 32):
    """Key = the seed's two 32-bit halves; counter = (offset lo, offset hi for 64-bit
    offsets else 0, 0, 0)."""
    seed &= (1 << 64) - 1
    wide = offset & ((1 << 64) - 1)
    high = wide >> 32 if offset_bits == 64 else 0
    return philox4x32_10((wide & M32, high, 0, 0), (seed & M32, seed >> 32))


# Random123's kat_vectors for philox4x32 10: (counter, key, output)
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_the_test_generator_gives_random123s_known_answers(counter, key, expected):
    assert tuple(philox4x32_10(counter, key)) == expected


def test_the_numpy_reference_is_the_same_generator():
    offsets = np.array([0, 1, -1, 2**31 - 1, -2**31, 12345], np.int32)
    for seed in (0, 1, -1, 2**40 + 3, 0xDEADBEEF):
        got = reference.philox4x32(seed, offsets)
        assert got.dtype == np.uint32
        assert got.tolist() == [words(seed, int(o)) for o in offsets]
    wide = np.array([2**33 + 5, -7], np.int64)
    assert reference.philox4x32(9, wide).tolist() == [words(9, int(o), 64) for o in wide]


def uniform(word: int, bits: int = 24) -> float:
    return (word >> (32 - bits)) * 2.0 ** -bits


def normal(w0: int, w1: int) -> float:
    u1 = (w0 + 1) * 2.0 ** -32
    u2 = w1 * 2.0 ** -32
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2 * math.pi * u2)


# ---------------------------------------------------------------------------- kernels
@tj.kernel
def streams(off, out_int, out_uniform, out_normal, seed, BLOCK: tj.constexpr):
    base = tj.cta_id(0) * BLOCK
    o = tj.fragment((BLOCK,), off.dtype)
    tj.copy(o, off[base:base + BLOCK])
    tj.copy(out_int[base:base + BLOCK], tj.randint(seed, o))
    tj.copy(out_uniform[base:base + BLOCK], tj.rand(seed, o))
    tj.copy(out_normal[base:base + BLOCK], tj.randn(seed, o))


def run_streams(offsets: torch.Tensor, seed: int, block: int):
    n = offsets.numel()
    out = (torch.zeros(n, dtype=torch.int32), torch.zeros(n), torch.zeros(n))
    streams[(tj.cdiv(n, block),)](offsets, *out, seed, BLOCK=block)
    return out


@SETTINGS
@given(n=st.integers(1, 300), block=st.sampled_from([16, 48, 128]),
       seed=st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(2**31, 2**64 - 1)),
       start=st.integers(-2**31, 2**31 - 301))
def test_streams_match_the_generator_bit_for_bit(n, block, seed, start):
    if seed >= 2**63:
        seed -= 2**64                      # an i64 argument; the key takes its two halves
    offsets = torch.arange(start, start + n, dtype=torch.int32)
    offsets[::7] = torch.randint(-2**31, 2**31 - 1, offsets[::7].shape, dtype=torch.int32,
                                 generator=torch.Generator().manual_seed(n))
    got_int, got_uniform, got_normal = run_streams(offsets, seed, block)
    expected = [words(seed, o) for o in offsets.tolist()]
    assert [w & M32 for w in got_int.tolist()] == [w[0] for w in expected]
    assert got_uniform.tolist() == [uniform(w[0]) for w in expected]
    exact_normal = torch.tensor([normal(w[0], w[1]) for w in expected], dtype=torch.float64)
    # Box-Muller is evaluated in f64 and rounded once: the f32 rounding of the exact value
    assert torch.equal(got_normal, exact_normal.float())
    # and the numpy reference agrees, element for element
    dst = np.zeros(n, np.float32)
    np.testing.assert_array_equal(got_uniform.numpy(),
                                  reference.pointwise("rand", dst, seed, offsets.numpy()))
    np.testing.assert_array_equal(got_normal.numpy(),
                                  reference.pointwise("randn", dst, seed, offsets.numpy()))


def test_a_stream_does_not_depend_on_the_tiling():
    offsets = torch.arange(1000, dtype=torch.int32)
    by_16, by_128 = run_streams(offsets, 42, 16), run_streams(offsets, 42, 128)
    for a, b in zip(by_16, by_128):
        assert torch.equal(a, b)
    other_seed = run_streams(offsets, 43, 16)
    assert (other_seed[0] != by_16[0]).float().mean() > 0.99


def test_uniform_and_normal_statistics():
    offsets = torch.arange(200_000, dtype=torch.int32)
    _, uniform_values, normal_values = run_streams(offsets, 2024, 512)
    assert 0.0 <= uniform_values.min() and uniform_values.max() < 1.0
    assert abs(uniform_values.mean().item() - 0.5) < 0.005
    assert abs(uniform_values.var().item() - 1 / 12) < 0.002
    assert abs(normal_values.mean().item()) < 0.01
    assert abs(normal_values.std().item() - 1.0) < 0.01
    assert torch.isfinite(normal_values).all()
    counts = torch.histc(uniform_values, bins=10, min=0, max=1)
    assert (abs(counts / len(offsets) - 0.1) < 0.005).all()


@tj.kernel
def statement_forms(off, out16, out64, out8, seed, N: tj.constexpr):
    o = tj.fragment((N,), off.dtype)
    tj.copy(o, off[0:N])
    h = tj.fragment((N,), tj.float16)
    tj.rand(h, seed, o)                       # 11 random bits: exact in f16, always < 1
    tj.copy(out16[0:N], h)
    d = tj.fragment((N,), tj.float64)
    tj.rand(d, seed, o)                       # 32 random bits
    tj.copy(out64[0:N], d)
    b = tj.fragment((N,), tj.int8)
    tj.randint(b, seed, o)                    # the low 8 bits of the word
    tj.copy(out8[0:N], b)


@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64, torch.int16])
def test_statement_forms_and_other_dtypes(offset_dtype):
    n = 37
    offsets = torch.arange(-5, n - 5, dtype=torch.int64) * (2**33 + 1) \
        if offset_dtype == torch.int64 else torch.arange(-5, n - 5)
    offsets = offsets.to(offset_dtype)
    out16, out64, out8 = torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.float64), \
        torch.zeros(n, dtype=torch.int8)
    statement_forms[(1,)](offsets, out16, out64, out8, 7, N=n)
    bits = 64 if offset_dtype == torch.int64 else 32
    expected = [words(7, o, bits)[0] for o in offsets.tolist()]
    assert out16.double().tolist() == [uniform(w, 11) for w in expected]
    assert out64.tolist() == [uniform(w, 32) for w in expected]
    assert out8.tolist() == [np.uint32(w).astype(np.int8).item() for w in expected]
    assert out16.max() < 1 and out64.max() < 1


# --------------------------------------------------------------------------- dropout
@tj.kernel
def dropout(x, off, out, p, seed, BLOCK: tj.constexpr):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    o = tj.fragment((BLOCK,), off.dtype)
    tj.copy(a, x[base:base + BLOCK])
    tj.copy(o, off[base:base + BLOCK])
    keep = tj.rand(seed, o) > p               # drop with probability p
    tj.copy(out[base:base + BLOCK], tj.where(keep, a / (1 - p), 0.0))


def numpy_dropout(x: np.ndarray, offsets: np.ndarray, p: float, seed: int) -> np.ndarray:
    words0 = np.array([words(seed, int(o))[0] for o in offsets], np.uint64)
    r = (words0 >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)
    scale = np.float32(1) - np.float32(p)
    return np.where(r > np.float32(p), x / scale, np.float32(0)).astype(np.float32)


@SETTINGS
@given(n=st.integers(1, 2000), p=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
       seed=st.integers(0, 2**31 - 1))
def test_dropout_matches_numpy_bit_for_bit(n, p, seed):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    offsets = torch.arange(n, dtype=torch.int32)
    out = torch.full((n,), math.nan)
    dropout[(tj.cdiv(n, 256),)](x, offsets, out, p, seed, BLOCK=256)
    expected = numpy_dropout(x.numpy(), offsets.numpy(), p, seed)
    np.testing.assert_array_equal(out.numpy(), expected)
    if n >= 1000:
        assert abs((out == 0).float().mean().item() - p) < 0.05


# ---------------------------------------------------------------------------- errors
@tj.kernel
def float_offsets(x, out, N: tj.constexpr):
    a = tj.fragment((N,), tj.float32)
    tj.copy(a, x[0:N])
    tj.copy(out[0:N], tj.rand(3, a))


@tj.kernel
def tile_seed(x, out, N: tj.constexpr):
    a = tj.fragment((N,), tj.int32)
    tj.copy(a, x[0:N])
    tj.copy(out[0:N], tj.rand(a, a))


@tj.kernel
def tile_seed_statement(x, out, N: tj.constexpr):
    a = tj.fragment((N,), tj.int32)
    d = tj.fragment((N,), tj.float32)
    tj.copy(a, x[0:N])
    tj.rand(d, a, a)
    tj.copy(out[0:N], d)


@tj.kernel
def float_seed(x, out, N: tj.constexpr):
    a = tj.fragment((N,), tj.int32)
    tj.copy(a, x[0:N])
    tj.copy(out[0:N], tj.randn(0.5, a))


@tj.kernel
def randint_into_float(x, out, N: tj.constexpr):
    a = tj.fragment((N,), tj.int32)
    d = tj.fragment((N,), tj.float32)
    tj.copy(a, x[0:N])
    tj.randint(d, 1, a)
    tj.copy(out[0:N], d)


@pytest.mark.parametrize("kernel, dtype, message", [
    (float_offsets, torch.float32, r"offsets must be an integer tile"),
    (tile_seed, torch.int32, r"the seed must be a scalar"),
    (tile_seed_statement, torch.int32, r"the seed must be a scalar"),
    (float_seed, torch.int32, r"the seed must be an integer"),
    (randint_into_float, torch.int32, r"tj.randint needs an integer destination"),
])
def test_random_errors_point_at_the_users_line(kernel, dtype, message):
    with pytest.raises(tj.CompilationError, match=message) as err:
        kernel[(1,)](torch.zeros(4, dtype=dtype), torch.zeros(4), N=4)
    assert "tj.rand" in err.value.loc.excerpt() or "tj.randint" in err.value.loc.excerpt()
