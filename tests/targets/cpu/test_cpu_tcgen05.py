"""tcgen05 on the CPU's per-thread units against torch: A (M x K) and B (N x K) are placed in
shared memory by ``layout.smem_layout`` -- every swizzle, K-major and MN-major -- with
descriptors from ``describe_operand``; warp 0 allocates tensor memory, thread 0 issues
one tcgen05_mma per k-step of 16 and commits to an mbarrier, every thread waits and reads
its lane with tcgen05_ld 32x32b. The CPU decodes the instruction descriptor and the
version-1 shared descriptors as the hardware does, so a wrong field is a wrong answer;
the multiply completes at the commit, so reading TMEM without waiting is a race."""
import pytest
import torch
from support.tcgen05_kernels import tcgen05_kernel
from test_cpu_wgmma import TYPES, placed

import tilejit.targets.cpu as cpu
from tilejit.errors import LaunchError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.ops_wgmma import MatrixDescriptor, describe_operand

B_START = 1 << 15   # B's buffer: 1024-byte aligned, past A's


def run(m, n, k, a_swizzle, b_swizzle, b_mn_major, dtype=torch.float16, a_mn_major=False,
        corrupt=None, edit=lambda text: text, **options):
    gen = torch.Generator().manual_seed(m + n + k + a_swizzle + b_swizzle)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    (x, a_off), (y, b_off) = placed(a, a_swizzle, a_mn_major), placed(b.T, b_swizzle, b_mn_major)
    fields = []
    for offsets, start in ((a_off, 0), (b_off, B_START)):
        found = describe_operand((offsets[:, :16] * 2).tolist(), 2)
        assert found is not None
        fields.append(MatrixDescriptor(start, found[0].lbo, found[0].sbo, found[0].swizzle,
                                       version=1))
    if corrupt:
        fields[1] = MatrixDescriptor(**{**fields[1].__dict__, **corrupt})
    steps = [(int(a_off[0, j]), int(b_off[0, j])) for j in range(0, k, 16)]
    text = tcgen05_kernel(n, *fields, m=m, dtype=TYPES[dtype][1], a_elements=len(x),
                          b_elements=len(y), steps=steps, trans_a=a_mn_major,
                          trans_b=b_mn_major, **options)
    d = torch.zeros(128 * n)
    cpu.load(cpu.compile(verify(parse_kernel(edit(text))))).launch((1,), [x, y, d])
    lanes = d.view(128, n)
    # M = 128: row r on lane r; M = 64 (data path F): rows 16w..16w+15 on lanes 32w..
    rows = list(range(128)) if m == 128 else [32 * (r // 16) + r % 16 for r in range(64)]
    return lanes[rows], a.double() @ b.double()


@pytest.mark.parametrize("m, n, k, a_swizzle, b_swizzle, b_mn_major", [
    (128, 64, 64, 128, 128, False), (128, 32, 32, 64, 64, True), (64, 24, 32, 32, 32, False),
    (128, 16, 32, 0, 0, False), (64, 64, 16, 0, 128, True), (128, 256, 16, 32, 32, False)])
def test_tcgen05_matches_torch(m, n, k, a_swizzle, b_swizzle, b_mn_major):
    got, expected = run(m, n, k, a_swizzle, b_swizzle, b_mn_major)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_bf16_and_a_read_mn_major():
    got, expected = run(128, 48, 32, 128, 0, False, torch.bfloat16, a_mn_major=True)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("corrupt", [{"sbo": 512}, {"swizzle": 64}])
def test_a_wrong_descriptor_is_a_wrong_answer(corrupt):
    got, expected = run(128, 64, 64, 128, 128, False, corrupt=corrupt)
    assert not torch.allclose(got.double(), expected, rtol=1e-3, atol=1e-3)


def test_reading_tmem_before_waiting_on_the_barrier_is_a_race():
    """Without the mbarrier_wait, the threads' tcgen05_ld (line 13) and the multiply's
    writes of D, completed at thread 0's commit (the tcgen05_mma at line 10), are
    unordered."""
    with pytest.raises(LaunchError, match=r"data race on shared buffer 'tensor memory'.*"
                                          r"between lines 10 and 13"):
        run(128, 16, 16, 32, 32, False, wait=False)


def test_overwriting_an_operand_before_waiting_on_the_barrier_is_a_race():
    """Every thread zeroes its element of A (line 20) before waiting: thread 0's multiply
    still reads A until its commit completes it, unordered with those stores."""
    def overwrite(text):
        wait = "  mbarrier_wait(%bar, %zero, %zero) loc(12:4)"
        return text.replace(wait, "  %zh = const {value = 0.0} : f16 loc(20:4)\n"
                                  "  store_at(%sa, %zh, %t) loc(20:4)\n" + wait)
    with pytest.raises(LaunchError, match=r"data race on shared buffer 'sa'.*"
                                          r"between lines 10 and 20"):
        run(128, 16, 16, 32, 32, False, edit=overwrite)


def test_the_issuing_thread_overwriting_an_operand_before_its_commit_is_a_race():
    """Thread 0 zeroes A's first element (line 21) between its multiply and the commit that
    completes it: one thread, no barrier to miss, but the tensor core may read either
    value (the CPU, reading at the commit, would take the zero)."""
    def overwrite(text):
        commit = "    tcgen05_commit(%bar, %zero) loc(11:4)"
        return text.replace(commit, "    %zh = const {value = 0.0} : f16 loc(21:4)\n"
                                    "    store_at(%sa, %zh, %zero) loc(21:4)\n" + commit)
    with pytest.raises(LaunchError, match=r"data race on shared buffer 'sa' element 0 .*: "
                                          r"thread 0 wrote it at line 21 while the tcgen05 "
                                          r"multiply that thread 0 issued at line 10 could "
                                          r"still read it"):
        run(128, 16, 16, 32, 32, False, edit=overwrite)


RELINQUISH = "    tcgen05_relinquish_alloc_permit loc(5:4)"
DEALLOC = "    tcgen05_dealloc(%taddr) {cols = 32} loc(17:4)"


@pytest.mark.parametrize("cols, at, edit, message", [
    # two allocations of 512 columns: the second finds none free
    (512, (5, 8), (RELINQUISH, "    tcgen05_alloc(%slot) {cols = 32} loc(5:8)\n" + RELINQUISH),
     "tcgen05_alloc of 32 columns finds no free run: 512 of the 512 tensor-memory columns"),
    (32, (6, 8), (RELINQUISH, RELINQUISH + "\n    tcgen05_alloc(%slot) {cols = 32} loc(6:8)"),
     "tcgen05_alloc of 32 columns after the CTA relinquished its allocation permit"),
    (32, (18, 4), (DEALLOC, DEALLOC + "\n    tcgen05_dealloc(%taddr) {cols = 32} loc(18:4)"),
     "tcgen05_dealloc of 32 columns at column 0: they are not allocated"),
])
def test_tensor_memory_misuse_is_a_run_time_error_at_its_line(cols, at, edit, message):
    text = tcgen05_kernel(16, MatrixDescriptor(0, 128, 256, version=1),
                          MatrixDescriptor(B_START, 128, 256, version=1), cols=cols)
    assert edit[0] in text
    module = cpu.load(cpu.compile(verify(parse_kernel(text.replace(*edit)))))
    with pytest.raises(LaunchError, match=message) as info:
        module.launch((1,), [torch.zeros(4096).half(), torch.zeros(4096).half(),
                             torch.zeros(128 * 16)])
    assert (info.value.line, info.value.col) == at
