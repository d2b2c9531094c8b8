"""copy_async family ``cp.async`` with the kernel's own commit and wait groups
(``tj.cp_async_commit()``, ``tj.cp_async_wait(n)``): a double-buffered GEMM and a plain
staged copy against torch on ragged shapes. Per thread the copy is ``cp_async`` chunks
(passes/rules/copy_cp_async.py: misaligned chunks and the tensor's ragged end included);
team_once it is the immediate copy. Per thread the CPU lands a chunk only when a wait
retires its group (targets/cpu/emit_async.py), so a kernel that forgets to wait reads
what shared memory held before, as on a GPU."""
import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, make

import tilejit as tj


@tj.kernel
def double_buffered_gemm(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """Stage k + 1 streams into one half of the ring while the gemm reads stage k."""
    a_s = tj.alloc_shared((2, BM, BK), A.dtype)
    b_s = tj.alloc_shared((2, BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    steps = tj.cdiv(A.shape[1], BK)
    tj.copy_async(a_s[0], A[m0:m0 + BM, 0:BK], dispatch="cp.async")
    tj.copy_async(b_s[0], B[0:BK, n0:n0 + BN], dispatch="cp.async")
    tj.cp_async_commit()
    for k in range(steps):
        s = k % 2
        if k + 1 < steps:
            k1 = (k + 1) * BK
            tj.copy_async(a_s[1 - s], A[m0:m0 + BM, k1:k1 + BK], dispatch="cp.async")
            tj.copy_async(b_s[1 - s], B[k1:k1 + BK, n0:n0 + BN], dispatch="cp.async")
        tj.cp_async_commit()
        tj.cp_async_wait(1)          # stage k landed; stage k + 1 may be in flight
        tj.sync()
        tj.gemm(acc, a_s[s], b_s[s])
        tj.sync()
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


@pytest.mark.parametrize("name", ["float32", "float16"])
@pytest.mark.parametrize("m,n,k", [(50, 37, 70), (33, 45, 19)])
def test_double_buffered_cp_async_gemm(name, m, n, k):
    gen = torch.Generator().manual_seed(4)
    A, B = make((m, k), name, gen, -3, 3), make((k, n), name, gen, -3, 3)
    C = torch.zeros(m, n)
    grid = (tj.cdiv(m, 32), tj.cdiv(n, 16))
    double_buffered_gemm[grid](A, B, C, BM=32, BN=16, BK=16)
    torch.testing.assert_close(C.double(), A.double() @ B.double())
    log = double_buffered_gemm.compile(A, B, C, BM=32, BN=16, BK=16).dispatch_log
    assert {r.rule for r in log if r.primitive == "copy_async"} == {"cp.async"}


@tj.kernel
def staged(x, out, BM: tj.constexpr, BN: tj.constexpr, WAIT: tj.constexpr = True):
    tile = tj.alloc_shared((BM, BN), x.dtype)
    tj.fill(tile, 0)
    tj.sync()
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    tj.copy_async(tile, x[r:r + BM, c:c + BN], dispatch="cp.async")
    tj.cp_async_commit()
    if WAIT:
        tj.cp_async_wait(0)
    tj.sync()
    tj.copy(out[r:r + BM, c:c + BN], tile)


@pytest.mark.parametrize("name", ["float32", "float16", "int8", "float64", "bfloat16"])
def test_cp_async_ragged_tiles(name):
    """Rows of 70 elements: chunks at odd row starts are misaligned (copied element by
    element), the last tile column runs past the end (zero-filled, not stored back)."""
    shape = (45, 70)
    x = make(shape, name, torch.Generator().manual_seed(5))
    out, whole = guarded(shape, name)
    staged[(tj.cdiv(45, 16), tj.cdiv(70, 32))](x, out, BM=16, BN=32)
    assert torch.equal(out, x)
    assert_guard_intact(whole, shape, name)


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_a_missing_wait_reads_the_tile_before_the_copy_lands():
    x = torch.arange(1, 16 * 32 + 1, dtype=torch.float32).reshape(16, 32)
    out = torch.full_like(x, -1.0)
    staged[(1, 1)](x, out, BM=16, BN=32, WAIT=False, simt=True)
    assert torch.equal(out, torch.zeros_like(x))     # the fill, not x
    staged[(1, 1)](x, out, BM=16, BN=32, WAIT=True, simt=True)
    assert torch.equal(out, x)


@pytest.mark.team_once_only("compiles per thread itself (simt=True)")
def test_cp_async_chunks_per_thread_in_the_lowered_ir():
    x = torch.zeros(45, 70)
    compiled = staged.compile(x, x, BM=16, BN=32, simt=True)
    lowered = compiled.asm["lowered"]
    assert "cp_async_at(%tile" in lowered and "{bytes = 16}" in lowered
    assert "cp_async_commit" in lowered and "cp_async_wait {pending = 0}" in lowered
    (record,) = [r for r in compiled.dispatch_log if r.primitive == "copy_async"]
    assert record.rule == "cp.async" and tuple(record.shape) == (4,)


@pytest.mark.team_once_only("compiles per thread itself (simt=True)")
def test_cp_async_with_a_barrier_needs_one_thread():
    @tj.kernel
    def every_thread(x):
        bar = tj.alloc_barriers(1)
        tile = tj.alloc_shared((8, 8), x.dtype)
        tj.copy_async(tile, x[0:8, 0:8], barrier=bar[0], dispatch="cp.async")

    with pytest.raises(tj.DispatchError, match=r"runs on one thread of its team \(here 128\)"):
        every_thread.compile(torch.zeros(8, 8), simt=True)


def test_cp_async_wait_needs_a_compile_time_count():
    @tj.kernel
    def bad_wait(x):
        tj.cp_async_wait(x.shape[0])

    with pytest.raises(tj.CompilationError, match=r"needs a compile-time int >= 0") as info:
        bad_wait.compile(torch.zeros(8))
    assert info.value.line is not None and "cp_async_wait" in str(info.value)


@pytest.mark.team_once_only("compiles per thread itself (simt=True)")
def test_cp_async_says_why_each_chunk_size_fails():
    @tj.kernel
    def odd_rows(x):
        tile = tj.alloc_shared((8, 7), x.dtype)
        tj.copy_async(tile, x[0:8, 0:7], dispatch="cp.async")

    x = torch.zeros(8, 7, dtype=torch.float16)
    with pytest.raises(tj.DispatchError, match=r"(?s)16-byte chunks: dst's last dim of 7 is "
                       r"not a multiple of 8.*4-byte chunks: dst's last dim of 7 is not a "
                       r"multiple of 2") as info:
        odd_rows.compile(x, simt=True)
    assert info.value.line is not None
