"""wgmma on the CPU's per-thread units against torch: A (64 x K) and B (K x N) are placed in
shared memory by ``layout.smem_layout`` -- every swizzle, K-major and MN-major -- the
descriptors come from ``describe_operand`` reading the layout's addresses, and each k-step
(16 k's; 32 for fp8) issues one m64nNk16 (m64nNk32) from descriptors that start at the
step's first elements. The
CPU decodes the descriptors as the hardware does, so a wrong field is a wrong answer."""
import contextlib

import numpy as np
import pytest
import torch
from support.wgmma_kernels import wgmma_kernel

import tilejit as tj
import tilejit.targets.cpu as cpu
from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.addressing import Addressing, ArrayArith
from tilejit.ir.ops_wgmma import MatrixDescriptor, describe_operand, wgmma_accumulators
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.layout.hw_nvidia import wgmma_acc_layout

MODES = {0: SwizzleMode.NONE, 32: SwizzleMode.B32, 64: SwizzleMode.B64, 128: SwizzleMode.B128}
B_START = 1 << 15   # B's buffer: 1024-byte aligned, past A's
# torch dtype -> (layout dtype name, IR type)
TYPES = {torch.float16: ("float16", "f16"), torch.bfloat16: ("bfloat16", "bf16"),
         torch.float8_e4m3fn: ("float8_e4m3", "f8e4m3"),
         torch.float8_e5m2: ("float8_e5m2", "f8e5m2")}


def placed(matrix: torch.Tensor, swizzle: int, mn_major: bool):
    """(flat storage, element offset of each (mn, k)) of an (MN, K) operand laid out by
    smem_layout: stored (MN, K) with K contiguous, or (K, MN) with MN contiguous."""
    stored = matrix.T if mn_major else matrix
    layout = smem_layout(tuple(stored.shape), TYPES[matrix.dtype][0], MODES[swizzle])
    addressing = Addressing.from_layout(layout, tuple(stored.shape))
    grid = np.meshgrid(*(np.arange(s) for s in stored.shape), indexing="ij")
    offsets = np.asarray(addressing.element_offset(ArrayArith, grid, tuple(stored.shape)))
    flat = torch.zeros(addressing.span, dtype=matrix.dtype)
    flat[torch.from_numpy(offsets.reshape(-1))] = stored.reshape(-1)
    return flat, offsets.T if mn_major else offsets


def run(n, k, a_swizzle, b_swizzle, b_mn_major, dtype=torch.float16, a_mn_major=False,
        corrupt=None):
    gen = torch.Generator().manual_seed(n + k + a_swizzle + b_swizzle)
    a = torch.randn(64, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    (x, a_off), (y, b_off) = placed(a, a_swizzle, a_mn_major), placed(b.T, b_swizzle, b_mn_major)
    fields, steps, itemsize = [], [], a.element_size()
    k_step = 32 // itemsize   # a k-step is 32 bytes: k16, k32 for fp8
    for offsets, start in ((a_off, 0), (b_off, B_START)):
        found = describe_operand((offsets[:, :k_step] * itemsize).tolist(), itemsize)
        assert found is not None and found[1] != (offsets is a_off and a_mn_major
                                                  or offsets is b_off and b_mn_major)
        descriptor = found[0]
        fields.append(MatrixDescriptor(start, descriptor.lbo, descriptor.sbo,
                                       descriptor.swizzle))
    steps = [(int(a_off[0, j]), int(b_off[0, j])) for j in range(0, k, k_step)]
    if corrupt:
        fields[1] = MatrixDescriptor(**{**fields[1].__dict__, **corrupt})
    text = wgmma_kernel(n, *fields, dtype=TYPES[dtype][1],
                        a_elements=len(x), b_elements=len(y), steps=steps,
                        trans_a=a_mn_major, trans_b=b_mn_major)
    d = torch.zeros(128 * wgmma_accumulators(n))
    module = cpu.load(cpu.compile(verify(parse_kernel(text))))
    module.launch((1,), [x, y, d])
    # thread t's accumulator i holds D at the place wgmma_acc_layout gives it
    layout, result = wgmma_acc_layout(n, warp_axis="tid_in_wg"), torch.zeros(64, n)
    for flat in range(64 * n):
        place = layout.apply(flat)
        result.view(-1)[flat] = d[place["tid_in_wg"] * (n // 2) + place["m"]]
    return result, a.double() @ b.double(), fields[1]


@pytest.mark.parametrize("n, k, a_swizzle, b_swizzle, b_mn_major", [
    (64, 64, 128, 128, False),
    (64, 64, 128, 128, True),
    (32, 32, 64, 64, False),
    (64, 32, 64, 64, True),
    (16, 16, 32, 32, False),
    (32, 16, 32, 32, True),
    (24, 32, 0, 0, False),
    (16, 32, 0, 0, True),
    (256, 16, 0, 32, False),
])
def test_wgmma_matches_torch(n, k, a_swizzle, b_swizzle, b_mn_major):
    got, expected, _ = run(n, k, a_swizzle, b_swizzle, b_mn_major)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_bf16_and_a_read_mn_major():
    got, expected, _ = run(64, 32, 128, 0, False, torch.bfloat16, a_mn_major=True)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("corrupt", [{"sbo": 512}, {"swizzle": 64}])
def test_a_wrong_descriptor_is_a_wrong_answer(corrupt):
    got, expected, _ = run(64, 64, 128, 128, False, corrupt=corrupt)
    assert not torch.allclose(got.double(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype, n, k, swizzle", [
    (torch.float8_e4m3fn, 40, 96, 0), (torch.float8_e5m2, 24, 128, 128),
    (torch.float8_e4m3fn, 56, 64, 64)])
def test_fp8_k32_matches_torch(dtype, n, k, swizzle):
    """fp8 K-major (both operands): m64nNk32 per 32 k's, descriptors decoded with 1-byte
    elements (a core matrix row is 16 of them)."""
    got, expected, _ = run(n, k, swizzle, swizzle, False, dtype)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("corrupt", [{"lbo": 128}, {"sbo": 256}])
def test_a_wrong_fp8_stride_is_a_wrong_answer(corrupt):
    """Unswizzled fp8 B [40, 96] in smem_layout's core-matrix form: a 16-byte slab of K
    (16 fp8 k's) holds all 40 rows, so LBO -- to the next core matrix along K -- is the
    slab's 40 x 16 bytes and SBO -- to the next 8 rows -- is one core matrix, 128 bytes;
    either one wrong reads other bytes."""
    got, expected, fields = run(40, 96, 0, 0, False, torch.float8_e4m3fn)
    assert (fields.lbo, fields.sbo) == (40 * 16, 128)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)
    got, expected, _ = run(40, 96, 0, 0, False, torch.float8_e4m3fn, corrupt=corrupt)
    assert not torch.allclose(got.double(), expected, rtol=1e-3, atol=1e-3)


def test_a_partial_warpgroup_is_refused():
    text = wgmma_kernel(16, MatrixDescriptor(0, 128, 256, 0),
                        MatrixDescriptor(B_START, 128, 256, 0))
    text = text.replace('{distribution = "per_thread",', '{num_warps = 2, distribution = '
                        '"per_thread",')
    with pytest.raises(CompilationError, match="needs every thread of its warpgroup"):
        cpu.compile(verify(parse_kernel(text)))


# ------------------------------------------------------ reads that complete at the wait
_OVERWRITE = ["  sync loc(10:4)", "  %zh = const {value = 0.0} : f16 loc(11:4)",
              "  store_at(%sa, %zh, %t) loc(11:4)"]   # every thread zeroes its element of A


def _overwritten_kernel(groups: int, overwrite_after: str, dtype: str = "f16") -> str:
    """Two k-steps (two multiplies) in one group or one group each, then the waits; after
    the wait ``overwrite_after`` names ("commit": none yet; "commit, fenced": none yet, and
    a barrier after the stores too) a barrier, and each of A's first 128 elements is
    overwritten by its thread."""
    text = wgmma_kernel(16, MatrixDescriptor(0, 128, 256), MatrixDescriptor(B_START, 128, 256),
                        a_elements=1024, b_elements=512, steps=((0, 0), (64, 256)),
                        dtype=dtype)
    count, lines, overwrite = 8, text.splitlines(), [line.replace(": f16", f": {dtype}")
                                                     for line in _OVERWRITE]

    def values(prefix):
        return ", ".join(f"%{prefix}{i}" for i in range(count))
    types = ", ".join(["f32"] * count)
    out = []
    for line in lines:
        if groups == 2 and line.startswith(f"  {values('m1_')} = "):
            out.append(f"  {values('g')} = wgmma_commit_group({values('m0_')}) : {types} "
                       "loc(7:4)")
            line = line.replace(f"({', '.join(['%da1', '%db1', values('m0_')])})",
                                f"({', '.join(['%da1', '%db1', values('g')])})")
        if line.startswith(f"  {values('w')} = wgmma_wait_group"):
            if overwrite_after.startswith("commit"):
                out += overwrite
            if overwrite_after == "commit, fenced":
                out.append(_OVERWRITE[0])
            if groups == 2:   # wait(1) retires the first group, wait(0) the second
                out.append(line.replace(values("w"), values("v"), 1)
                           .replace("pending = 0", "pending = 1"))
                if overwrite_after == "wait(1)":
                    out += overwrite
                line = line.replace(values("c"), values("v"))
            out.append(line)
            if overwrite_after == "wait(0)":
                out += overwrite
            continue
        out.append(line)
    return "\n".join(out)


def _launch_overwritten(groups: int, overwrite_after: str, dtype=torch.float16):
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(1024, generator=gen).to(dtype), torch.randn(512, generator=gen).to(dtype)
    name = {torch.float16: "f16", torch.float8_e4m3fn: "f8e4m3"}[dtype]
    kernel = verify(parse_kernel(_overwritten_kernel(groups, overwrite_after, name)))
    cpu.load(cpu.compile(kernel)).launch((1,), [x, y, torch.zeros(128 * 8)])


@pytest.mark.parametrize("groups, overwrite_after", [(1, "wait(0)"), (2, "wait(0)")])
def test_operands_overwritten_after_the_last_wait_do_not_race(groups, overwrite_after):
    _launch_overwritten(groups, overwrite_after)


# the store (line 11) came after the multiply's issue (line 6), before its wait
_WRITTEN_IN_FLIGHT = (r"data race on shared buffer 'sa' element \d+ .*: thread \d+ wrote it at "
                      r"line 11 while the wgmma that thread \d+ issued at line 6 could still "
                      r"read it")


@pytest.mark.parametrize("groups, overwrite_after", [(1, "commit"), (2, "commit"),
                                                     (2, "wait(1)"), (1, "commit, fenced"),
                                                     (2, "commit, fenced")])
def test_operands_overwritten_before_the_wait_retiring_their_multiply_race(groups,
                                                                           overwrite_after):
    """Released before the wait: the tensor cores may still read A. With two groups,
    wait(1) retires the first only: the second's reads are still to come. Barriers on
    both sides of the stores order them after the issue, not after the wait: still a
    race, as is a thread's store to an element its own multiply reads."""
    with pytest.raises(tj.LaunchError, match=_WRITTEN_IN_FLIGHT):
        _launch_overwritten(groups, overwrite_after)


@pytest.mark.parametrize("overwrite_after", ["commit", "wait(0)"])
def test_fp8_operand_reads_complete_at_the_wait_too(overwrite_after):
    """An m64nNk32 fp8 multiply's queued reads (1-byte elements, 32 k's) are recorded at
    the wait that retires it: a store before then is a race, one after it is not."""
    expected = (pytest.raises(tj.LaunchError, match=_WRITTEN_IN_FLIGHT)
                if overwrite_after == "commit" else contextlib.nullcontext())
    with expected:
        _launch_overwritten(1, overwrite_after, torch.float8_e4m3fn)
