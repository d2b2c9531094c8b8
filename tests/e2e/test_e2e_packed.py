"""Packed f16/bf16 pairs (family ``packed``): per thread, a pointwise op on registers whose
layout gives each thread two adjacent elements in one 32-bit register computes both with
one ``packed_binary`` / ``packed_cast`` (a GPU's ``add.rn.f16x2`` ...). Both CPU lowerings
against torch, bit for bit (each lane is the scalar op: same rounding, NaN-propagating
max/min); per thread the dispatch log names ``packed``, or why it was declined. The cuda
target prints the packed PTX for sm_80 and sm_90a."""
import pytest
import torch
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.layout import TileLayout

# 6 rows (no power of two) of 8: lanes 0..23 hold one pair each, lanes 24..31 none.
PAIRS = TileLayout.parse("(6,4,2):(4@laneid,1@laneid,1@m)")
# 12 x 12 over 2 warps: rows on lanes and warps, columns on two lane groups, each thread
# holding 3 pairs of its half row (registers 0..5).
THREE_PAIRS = TileLayout.parse("(6,2,2,3,2):(1@laneid,1@warpid,6@laneid,2@m,1@m)")
# A thread's two elements of a row lie 4 apart: no pair.
APART = TileLayout.parse("(6,2,4):(4@laneid,1@m,1@laneid)")
# Pairs of adjacent elements, but the second pair of a thread starts at register 3: it
# would straddle two 32-bit registers.
ODD_REGISTERS = TileLayout.parse("(6,2,2,2):(4@laneid,3@m,2@laneid,1@m)")

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
       "minimum": torch.minimum, "neg": lambda x, y: -x, "abs": lambda x, y: torch.abs(x)}


@tj.kernel
def pair_math(x, y, out, BM: tj.constexpr, BN: tj.constexpr, L: tj.constexpr,
              OP: tj.constexpr):
    r = tj.cta_id(0) * BM
    a = tj.fragment((BM, BN), x.dtype, layout=L)
    b = tj.fragment((BM, BN), y.dtype, layout=L)
    tj.copy(a, x[r:r + BM, 0:BN])
    tj.copy(b, y[r:r + BM, 0:BN])
    if OP == "add":
        tj.add(a, a, b)
    elif OP == "sub":
        tj.sub(a, a, b)
    elif OP == "mul":
        tj.mul(a, a, b)
    elif OP == "maximum":
        tj.maximum(a, a, b)
    elif OP == "minimum":
        tj.minimum(a, a, b)
    elif OP == "neg":
        tj.neg(a, a)
    elif OP == "abs":
        tj.abs(a, a)
    else:
        tj.fma(a, a, b, b)
    tj.copy(out[r:r + BM, 0:BN], a)


@tj.kernel
def pair_cast(x, out, BM: tj.constexpr, BN: tj.constexpr, L: tj.constexpr,
              COPY: tj.constexpr = False):
    """``tj.cast(h, a)``, or ``tj.copy(h, a)`` (a copy converts as well) when COPY."""
    r = tj.cta_id(0) * BM
    a = tj.fragment((BM, BN), x.dtype, layout=L)
    h = tj.fragment((BM, BN), out.dtype, layout=L)
    tj.copy(a, x[r:r + BM, 0:BN])
    if COPY:
        tj.copy(h, a)
    else:
        tj.cast(h, a)
    tj.copy(out[r:r + BM, 0:BN], h)


def pointwise(kernel, *args, **options):
    (record,) = [r for r in kernel.compile(*args, **options).dispatch_log
                 if r.primitive == "pointwise"]
    return record


def operands(dtype, rows, cols, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=gen) * 100).to(dtype)
    y = torch.randn(rows, cols, generator=gen).to(dtype)
    x[0, :4] = torch.tensor([float("nan"), 0.0, -0.0, 65504.0 if dtype == torch.float16
                             else 3e38])
    y[0, :4] = torch.tensor([1.0, float("nan"), 65504.0 if dtype == torch.float16 else 3e38,
                             -0.0])
    return x, y


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("layout, bm, bn, warps, rows", [(PAIRS, 6, 8, 1, 15),
                                                        (THREE_PAIRS, 12, 12, 2, 30)],
                         ids=["one-pair", "three-pairs"])
def test_pairs_give_the_scalar_ops_bits(lowering, dtype, op, layout, bm, bn, warps, rows):
    """Ragged row counts, NaN, signed zeros and overflow to inf included."""
    x, y = operands(dtype, rows, bn)
    out = torch.zeros_like(x)
    options = dict(BM=bm, BN=bn, L=layout, OP=op, num_warps=warps)
    grid = ((rows + bm - 1) // bm,)
    pair_math[grid](x, y, out, **options)
    expected = OPS[op](x, y)
    assert torch.equal(out.view(torch.int16)[~expected.isnan()],
                       expected.view(torch.int16)[~expected.isnan()])
    assert torch.equal(out.isnan(), expected.isnan())
    record = pointwise(pair_math, x, y, out, **options)
    assert (record.rule == "packed") == (lowering == "per_thread")
    if lowering == "per_thread":
        assert record.shape == (2,)


@pytest.mark.parametrize("copy", [False, True], ids=["cast", "copy"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_f32_pairs_round_to_nearest_even(lowering, dtype, copy):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(15, 8, generator=gen) * 1000
    x[0, :3] = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1e6])   # ties, overflow (f16)
    out = torch.zeros(15, 8, dtype=dtype)
    pair_cast[(3,)](x, out, BM=6, BN=8, L=PAIRS, COPY=copy)
    assert torch.equal(out, x.to(dtype))
    log = pair_cast.compile(x, out, BM=6, BN=8, L=PAIRS, COPY=copy).dispatch_log
    _, record, _ = log   # load, convert, store
    assert record.primitive == ("copy" if copy else "pointwise")
    assert (record.rule == "packed") == (lowering == "per_thread")


def declined(record) -> str:
    return dict(record.rejected)["packed"]


@pytest.mark.parametrize("layout, reason", [
    (APART, "dst's layout (6,2,4):(4@laneid,1@m,1@laneid) gives each thread single "
            "elements of the last dim, no pairs"),
    (ODD_REGISTERS, "starts pairs at odd registers: a pair would straddle two 32-bit "
                    "registers"),
], ids=["elements-apart", "odd-registers"])
def test_layouts_without_register_pairs_decline_with_their_reason(lowering, layout, reason):
    x, y = operands(torch.float16, 12, 8)
    out = torch.zeros_like(x)
    options = dict(BM=6, BN=8, L=layout, OP="add")
    pair_math[(2,)](x, y, out, **options)
    expected = x + y
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out[~out.isnan()], expected[~expected.isnan()])
    record = pointwise(pair_math, x, y, out, **options)
    if lowering == "per_thread":
        assert record.rule == "scalar" and reason in declined(record)


def test_fma_and_f32_decline_naming_why(lowering):
    x, y = operands(torch.float16, 6, 8)
    record = pointwise(pair_math, x, y, x.clone(), BM=6, BN=8, L=PAIRS, OP="fma")
    if lowering == "per_thread":
        assert record.rule == "scalar"
        assert "fma: the scalar fma rounds its product and its sum" in declined(record)
    x32 = x.float()
    record = pointwise(pair_math, x32, x32, x32.clone(), BM=6, BN=8, L=PAIRS, OP="add")
    if lowering == "per_thread":
        assert "add computes f32: pairs are f16 or bf16" in declined(record)


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, op, ptx", [
    (tj.float16, "add", {"sm_80": "add.rn.f16x2", "sm_90a": "add.rn.f16x2"}),
    (tj.float16, "mul", {"sm_80": "mul.rn.f16x2", "sm_90a": "mul.rn.f16x2"}),
    (tj.float16, "maximum", {"sm_80": "max.NaN.f16x2", "sm_90a": "max.NaN.f16x2"}),
    (tj.bfloat16, "add", {"sm_80": "fma.rn.bf16x2", "sm_90a": "add.rn.bf16x2"}),
    (tj.bfloat16, "sub", {"sm_80": "fma.rn.bf16x2", "sm_90a": "sub.rn.bf16x2"}),
    (tj.bfloat16, "minimum", {"sm_80": "min.NaN.bf16x2", "sm_90a": "min.NaN.bf16x2"}),
    (tj.float16, "neg", {"sm_80": "neg.f16x2", "sm_90a": "neg.f16x2"}),
    (tj.bfloat16, "abs", {"sm_80": "abs.bf16x2", "sm_90a": "abs.bf16x2"}),
])
def test_the_cuda_target_prints_one_packed_instruction_per_pair(arch, dtype, op, ptx,
                                                                 fresh_cache):
    x = tj.TensorSpec((24, 12), dtype, device="cuda")
    compiled = pair_math.compile(x, x, x, BM=12, BN=12, L=THREE_PAIRS, OP=op, num_warps=2,
                                 target="cuda", arch=arch)
    lines = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    packed = [line for line in lines if line.startswith(ptx[arch] + " ")]
    assert len(packed) == 3   # three pairs per thread
    assert not any(line.startswith(("add.f32", "add.rn.f32", "max.f32")) for line in lines)


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [tj.float16, tj.bfloat16], ids=str)
def test_the_cuda_target_rounds_f32_pairs_with_one_cvt(arch, dtype, fresh_cache):
    x = tj.TensorSpec((12, 8), tj.float32, device="cuda")
    out = tj.TensorSpec((12, 8), dtype, device="cuda")
    compiled = pair_cast.compile(x, out, BM=6, BN=8, L=PAIRS, target="cuda", arch=arch)
    lines = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert sum(line.startswith(f"cvt.rn.{dtype.name}x2.f32 ") for line in lines) == 1


@tj.kernel
def scale_pairs(x, out, s, BM: tj.constexpr, BN: tj.constexpr, L: tj.constexpr,
                D: tj.constexpr):
    r = tj.cta_id(0) * BM
    a = tj.fragment((BM, BN), x.dtype, layout=L)
    tj.copy(a, x[r:r + BM, 0:BN])
    tj.mul(a, a, s, dispatch=D)
    tj.copy(out[r:r + BM, 0:BN], a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_scalar_operand_is_converted_as_the_scalar_family_converts_it(lowering, dtype):
    x, _ = operands(dtype, 15, 8)
    packed, scalar = torch.zeros_like(x), torch.zeros_like(x)
    options = dict(BM=6, BN=8, L=PAIRS)
    scale_pairs[(3,)](x, packed, 0.1, D=None, **options)
    scale_pairs[(3,)](x, scalar, 0.1, D="scalar", **options)
    assert torch.equal(packed.view(torch.int16), scalar.view(torch.int16))
    log = scale_pairs.compile(x, packed, 0.1, D=None, **options).dispatch_log
    (record,) = [r for r in log if r.primitive == "pointwise"]
    assert (record.rule == "packed") == (lowering == "per_thread")


@tj.kernel
def chain(x, y, out, L: tj.constexpr, EXP: tj.constexpr = False):
    """A fused chain into a register tile: max(x * y + y, x), or exp(x * y) when EXP."""
    r = tj.cta_id(0) * 6
    a = tj.fragment((6, 8), x.dtype, layout=L)
    b = tj.fragment((6, 8), x.dtype, layout=L)
    h = tj.fragment((6, 8), x.dtype, layout=L)
    tj.copy(a, x[r:r + 6, 0:8])
    tj.copy(b, y[r:r + 6, 0:8])
    if EXP:
        tj.copy(h, tj.exp(a * b))
    else:
        tj.copy(h, tj.maximum(a * b + b, a))
    tj.copy(out[r:r + 6, 0:8], h)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_fused_chain_packs_step_by_step(lowering, dtype):
    """Each step rounds to the chain's type as the scalar family's steps do, so the result
    is torch's bit for bit."""
    x, y = operands(dtype, 15, 8)
    out = torch.zeros_like(x)
    chain[(3,)](x, y, out, L=PAIRS)
    expected = torch.maximum(x * y + y, x)
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out[~out.isnan()].view(torch.int16),
                       expected[~expected.isnan()].view(torch.int16))
    (record,) = [r for r in chain.compile(x, y, out, L=PAIRS).dispatch_log
                 if r.primitive == "pointwise"]
    assert (record.rule == "packed") == (lowering == "per_thread")


def test_a_chain_with_a_step_without_a_pair_form_names_it(lowering):
    x, y = operands(torch.float16, 6, 8)
    out = torch.zeros_like(x)
    chain[(1,)](x, y, out, L=PAIRS, EXP=True)
    torch.testing.assert_close(out, torch.exp(x * y), equal_nan=True)
    (record,) = [r for r in chain.compile(x, y, out, L=PAIRS, EXP=True).dispatch_log
                 if r.primitive == "pointwise"]
    if lowering == "per_thread":
        assert "step exp of the fused chain has no packed f16x2/bf16x2 form here" \
            in declined(record)


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
def test_the_cuda_target_prints_a_chain_as_packed_instructions(fresh_cache):
    x = tj.TensorSpec((12, 8), tj.float16, device="cuda")
    compiled = chain.compile(x, x, x, L=PAIRS, target="cuda", arch="sm_90a")
    lines = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    for instruction in ("mul.rn.f16x2", "add.rn.f16x2", "max.NaN.f16x2"):
        assert sum(line.startswith(instruction + " ") for line in lines) == 1
