"""The nki target: the TIRx paper's GEMM dispatched exactly (§5.3), the lines of NKI that
matter, the module run on the numpy reference of the NKI subset against numpy, and what
the target refuses, at the user's line."""
import importlib
import re

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.errors import CompilationError, DispatchError
from tilejit.kernels import nki_gemm
from tilejit.layout import TileLayout

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")

@tj.kernel
def psum_gemm(at, b, c, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr):
    """C = A @ B with A given transposed (K on the partitions, no transpose on the way
    in), accumulated in a PSUM tile the kernel allocates, drained through SBUF."""
    with tj.thread():
        A = tj.alloc_shared((K, M), tj.float32)
        B = tj.alloc_shared((K, N), tj.float32)
        acc = tj.alloc_psum((M, N), tj.float32)
        C = tj.alloc_shared((M, N), tj.float32)
        tj.copy(A, at[0:K, 0:M])
        tj.copy(B, b[0:K, 0:N])
        tj.gemm(acc, A, B, transpose_a=True, accum=False)
        tj.copy(C, acc)
        tj.copy(c[0:M, 0:N], C)


@tj.kernel
def lane_ids(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        if tj.lane_id() == 0:
            tj.copy(out[0:128, 0:64], t)


@tj.kernel
def barrier(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        tj.sync()
        tj.copy(out[0:128, 0:64], t)


@tj.kernel
def shuffled(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        if tj.shuffle(tj.cta_id(0), 1, "xor") == 0:
            tj.copy(out[0:128, 0:64], t)


@tj.kernel
def elected(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        if tj.elect_sync():
            tj.copy(out[0:128, 0:64], t)


@tj.kernel
def scan(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        s = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        tj.copy(s, tj.cumsum(t, axis=1))
        tj.copy(out[0:128, 0:64], s)


def spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype)


@pytest.fixture(scope="module")
def paper():
    return nki_gemm.compile(spec(512, 1024), spec(1024, 256), spec(512, 256), target="nki")


def lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()]


def after(source: list[str], statement: str, count: int) -> list[str]:
    """The ``count`` lines printed for the kernel line holding ``statement``."""
    start = next(i for i, line in enumerate(source)
                 if line.startswith("# line ") and line.endswith(f": {statement}"))
    return source[start + 1:start + 1 + count]


def test_the_papers_gemm_dispatches_swapped_128_cubed_with_outer_loops_4_2_8(paper):
    gemm = next(r for r in paper.dispatch_log if r.primitive == "gemm")
    assert (gemm.rule, gemm.shape, gemm.fallback) == ("nc_matmul", (128, 128, 128), False)
    assert gemm.note == "swapped: B stationary, A moving; outer loops M 4, N 2, K 8"
    assert [(r.primitive, r.rule) for r in paper.dispatch_log] == [
        ("copy", "dma"), ("copy", "dma"), ("gemm", "nc_matmul"), ("copy", "dma")]


def test_the_papers_gemm_prints_its_loops_matmul_and_psum_drain(paper):
    source = lines(paper.asm["nki"])
    assert after(source, "tj.gemm(C, A, B, accum=False)", 6) == [
        "for n in nl.affine_range(2):",
        "for m in nl.affine_range(4):",
        "acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)",
        "for k in nl.sequential_range(8):",
        "nisa.nc_matmul(dst=acc, stationary=B[0:128, k, n, 0:128], "
        "moving=A[0:128, m, k, 0:128])",
        "nisa.tensor_copy(dst=C[0:128, m, n, 0:128], src=acc)",
    ]
    # the P/F tensors: the partition iter first, then F by descending stride
    assert "A = nl.ndarray((128, 4, 8, 128), dtype=nl.float32, buffer=nl.sbuf)" in source
    assert "C = nl.ndarray((128, 4, 2, 128), dtype=nl.float32, buffer=nl.sbuf)" in source
    # the kernel takes its inputs and returns its output, allocated in shared HBM
    assert "def nki_gemm(a, b):" in source and source[-1] == "return c"
    assert "c = nl.ndarray((512, 256), dtype=nl.float32, buffer=nl.shared_hbm)" in source


def test_a_tile_with_k_on_the_partitions_crosses_the_tensor_engines_transpose(paper):
    source = lines(paper.asm["nki"])
    assert after(source, "tj.copy(A, a[0:512, 0:1024])", 7) == [
        "for i0 in nl.affine_range(4):",
        "for i1 in nl.affine_range(8):",
        "staged = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)",
        "nisa.dma_copy(dst=staged, src=a[i0 * 128:i0 * 128 + 128, i1 * 128:i1 * 128 + 128])",
        "transposed = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)",
        "nisa.nc_transpose(dst=transposed, data=staged)",
        "nisa.tensor_copy(dst=A[0:128, i0, i1, 0:128], src=transposed)",
    ]
    assert after(source, "tj.copy(B, b[0:1024, 0:256])", 3)[2] == (
        "nisa.dma_copy(dst=B[0:128, i0, i1, 0:128], "
        "src=b[i0 * 128:i0 * 128 + 128, i1 * 128:i1 * 128 + 128])")


@pytest.mark.parametrize("seed", [0, 1])
def test_the_papers_gemm_runs_on_the_reference_as_numpy_computes_it(paper, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((512, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 256), dtype=np.float32)
    c = reference.run(paper.asm["nki"], "nki_gemm", a, b, seed=seed, strict_reads=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)


def test_bf16_operands_accumulate_in_f32():
    compiled = nki_gemm.compile(spec(512, 1024, dtype=tj.bfloat16),
                                spec(1024, 256, dtype=tj.bfloat16),
                                spec(512, 256), DT=tj.bfloat16, target="nki")
    a = torch.randn(512, 1024).bfloat16()
    b = torch.randn(1024, 256).bfloat16()
    c = reference.run(compiled.asm["nki"], "nki_gemm", a.float().numpy(), b.float().numpy())
    expected = (a.float() @ b.float()).numpy()
    np.testing.assert_allclose(c, expected, rtol=2e-2, atol=2e-1)


def test_the_same_kernel_runs_on_the_cpu():
    a, b = torch.randn(512, 1024), torch.randn(1024, 256)
    c = torch.zeros(512, 256)
    nki_gemm[(1,)](a, b, c, num_warps=1)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)


def test_a_gemm_into_psum_accumulates_in_place_and_drains_through_sbuf():
    compiled = psum_gemm.compile(spec(128, 96), spec(128, 320), spec(96, 320),
                                          M=96, N=320, K=128, target="nki")
    gemm = next(r for r in compiled.dispatch_log if r.primitive == "gemm")
    assert (gemm.rule, gemm.shape) == ("nc_matmul", (96, 320, 128))
    assert gemm.note == "A stationary, B moving; outer loops M 1, N 1, K 1"
    source = lines(compiled.asm["nki"])
    assert "acc = nl.ndarray((96, 320), dtype=nl.float32, buffer=nl.psum)" in source
    assert "nisa.nc_matmul(dst=acc, stationary=A, moving=B, accumulate=False)" in source
    assert "nisa.tensor_copy(dst=C, src=acc)" in source
    rng = np.random.default_rng(2)
    at = rng.standard_normal((128, 96), dtype=np.float32)
    b = rng.standard_normal((128, 320), dtype=np.float32)
    c = reference.run(compiled.asm["nki"], "psum_gemm", at, b, strict_reads=True)
    np.testing.assert_allclose(c, at.T @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n, chunk", [(768, 256), (600, 8)])
def test_matmuls_into_a_psum_tile_each_write_inside_one_bank(n, chunk):
    """A matmul's dst lies in one 2 KiB bank (512 f32): N = 768 in chunks of 384 would
    straddle banks 0 and 1 with its second chunk, so the rule takes 256; N = 600 has no
    aligned chunk above 8 (the tile's banks hold 512 and 88 columns)."""
    compiled = psum_gemm.compile(spec(128, 96), spec(128, n), spec(96, n), M=96, N=n, K=128,
                                 target="nki")
    gemm = next(r for r in compiled.dispatch_log if r.primitive == "gemm")
    assert gemm.shape == (96, chunk, 128)
    assert (f"nisa.nc_matmul(dst=acc[0:96, n * {chunk}:n * {chunk} + {chunk}], stationary=A, "
            f"moving=B[0:128, n * {chunk}:n * {chunk} + {chunk}], accumulate=False)"
            in lines(compiled.asm["nki"]))
    rng = np.random.default_rng(n)
    at = rng.standard_normal((128, 96), dtype=np.float32)
    b = rng.standard_normal((128, n), dtype=np.float32)
    c = reference.run(compiled.asm["nki"], "psum_gemm", at, b, strict_reads=True)
    np.testing.assert_allclose(c, at.T @ b, rtol=1e-4, atol=1e-3)


def test_a_psum_tile_of_two_banks_is_p_by_bank_by_f_and_each_matmul_writes_one_bank():
    compiled = psum_gemm.compile(spec(128, 96), spec(128, 1024), spec(96, 1024), M=96,
                                 N=1024, K=128, target="nki")
    gemm = next(r for r in compiled.dispatch_log if r.primitive == "gemm")
    assert (gemm.shape, gemm.note) == ((96, 512, 128),
                                       "A stationary, B moving; outer loops M 1, N 2, K 1")
    source = lines(compiled.asm["nki"])
    assert "acc = nl.ndarray((96, 2, 512), dtype=nl.float32, buffer=nl.psum)" in source
    # B's N [1024] is cut as the PSUM tile's [2 banks, 512]: the bank loop steps 512 columns
    assert after(source, "tj.gemm(acc, A, B, transpose_a=True, accum=False)", 2) == [
        "for n in nl.affine_range(2):",
        "nisa.nc_matmul(dst=acc[0:96, n, 0:512], stationary=A, "
        "moving=B[0:128, n * 512:n * 512 + 512], accumulate=False)"]
    assert after(source, "tj.copy(C, acc)", 2) == [
        "for i1 in nl.affine_range(2):",
        "nisa.tensor_copy(dst=C[0:96, i1 * 512:i1 * 512 + 512], src=acc[0:96, i1, 0:512])"]
    from tilejit.ir.parser import parse_kernel
    from tilejit.ir.verifier import verify
    kernel = parse_kernel(compiled.asm["lowered"])   # the view (96, 2, 512) of acc, as text
    verify(kernel)
    assert str(kernel) == compiled.asm["lowered"]
    rng = np.random.default_rng(3)
    at = rng.standard_normal((128, 96), dtype=np.float32)
    b = rng.standard_normal((128, 1024), dtype=np.float32)
    c = reference.run(compiled.asm["nki"], "psum_gemm", at, b, strict_reads=True)
    np.testing.assert_allclose(c, at.T @ b, rtol=1e-4, atol=1e-3)


@tj.kernel
def banked_sbuf(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, 1024), tj.float32,
                            layout=TileLayout.parse("(128,2,512):(1@P,1@Bank,1@F)"))
        tj.copy(t, x[0:128, 0:1024])
        tj.copy(out[0:128, 0:1024], t)


def test_an_sbuf_tile_on_banks_is_declined_saying_banks_are_psums():
    with pytest.raises(DispatchError, match=r"Bank: PSUM tiles only") as info:
        banked_sbuf.compile(spec(128, 1024), spec(128, 1024), target="nki")
    _located(info.value, "tj.copy(t, x[0:128, 0:1024])")


def _located(err, text: str) -> None:
    """The error points at the kernel line holding ``text``."""
    assert err.loc is not None and err.loc.file == __file__
    assert text in open(err.loc.file).read().splitlines()[err.loc.line - 1]


def test_a_primitive_no_nki_family_takes_is_a_dispatch_error_with_the_reasons():
    with pytest.raises(DispatchError) as info:
        scan.compile(spec(128, 64), spec(128, 64), target="nki")
    message = str(info.value)
    assert "cannot run per-element loops" in message   # no generic element loop
    _located(info.value, "tj.cumsum")


def test_a_thread_id_is_refused_at_its_line():
    with pytest.raises(CompilationError, match="NKI programs have no threads") as info:
        lane_ids.compile(spec(128, 64), spec(128, 64), target="nki")
    _located(info.value, "tj.lane_id()")


def test_a_barrier_is_refused_at_its_line():
    with pytest.raises(CompilationError, match="NKI has no barriers") as info:
        barrier.compile(spec(128, 64), spec(128, 64), target="nki")
    _located(info.value, "tj.sync()")


@pytest.mark.parametrize("kernel, message, text", [
    (shuffled, "warp_shuffle cannot run on the nki target: NKI has no warps", "tj.shuffle("),
    (elected, "elect_sync cannot run on the nki target: NKI has no warps", "tj.elect_sync()")])
def test_a_warp_op_is_refused_at_its_line(kernel, message, text):
    with pytest.raises(CompilationError, match=message) as info:
        kernel.compile(spec(128, 64), spec(128, 64), target="nki")
    _located(info.value, text)


def test_launching_for_nki_says_where_the_module_runs(paper):
    with pytest.raises(tj.LaunchError, match="launches nothing here"):
        paper.launch((1, 1, 1), [])
    assert re.search(r"^@nki\.jit$", paper.asm["nki"], re.M)


def test_every_emitted_module_passes_the_nki_subset_lint(paper):
    nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")
    psum = psum_gemm.compile(spec(128, 96), spec(128, 320), spec(96, 320), M=96, N=320,
                             K=128, target="nki")
    for compiled in (paper, psum):
        assert nki_lint.lint(compiled.asm["nki"]) == []


def test_the_lowered_ir_with_nki_instructions_prints_parses_and_verifies(paper):
    from tilejit.ir.parser import parse_kernel
    from tilejit.ir.verifier import verify
    text = paper.asm["lowered"]
    assert "nki.matmul(" in text and "independent = true" in text
    kernel = parse_kernel(text)
    verify(kernel)
    assert str(kernel) == text


def test_the_verifier_holds_an_instruction_to_the_hardware_limits():
    from tilejit.ir.parser import parse_kernel
    from tilejit.ir.verifier import verify
    importlib.import_module("tilejit.targets.nki.ops")   # the nki.* ops join the catalogue
    text = """kernel @bad() {num_warps = 1} loc("/k.py":1:0) {
  %acc = alloc {scope = psum, dtype = f32, shape = [128, 640]} :
         buffer<psum, f32, [128, 640]> loc(2:4)
  %a = alloc {scope = shared, dtype = f32, shape = [128, 128]} :
       buffer<shared, f32, [128, 128]> loc(3:4)
  %b = alloc {scope = shared, dtype = f32, shape = [128, 640]} :
       buffer<shared, f32, [128, 640]> loc(4:4)
  nki.matmul(%acc, %a, %b) loc(5:4)
}"""
    with pytest.raises(CompilationError, match=r"free sizes 128 \(stationary, at most 128\) "
                                               r"and 640 \(moving, at most 512\)"):
        verify(parse_kernel(text))


STRADDLE = """kernel @bad() {num_warps = 1} loc("/k.py":1:0) {
  %acc = alloc {scope = psum, dtype = f32, shape = [128, 768]} :
         buffer<psum, f32, [128, 768]> loc(2:4)
  %a = alloc {scope = shared, dtype = f32, shape = [128, 128]} :
       buffer<shared, f32, [128, 128]> loc(3:4)
  %b = alloc {scope = shared, dtype = f32, shape = [128, 384]} :
       buffer<shared, f32, [128, 384]> loc(4:4)
  %zero = const {value = 0} : i32 loc(5:4)
  %start = const {value = START} : i32 loc(5:4)
  %dst = region(%acc, %zero, %start) {sizes = [128, 384], keep = [true, true]} :
         region<buffer<psum, f32, [128, 768]>, [128, 384]> loc(5:4)
  nki.matmul(%dst, %a, %b) loc(5:4)
}"""


def test_the_verifier_refuses_a_matmul_writing_across_two_psum_banks():
    from tilejit.ir.parser import parse_kernel
    from tilejit.ir.verifier import verify
    importlib.import_module("tilejit.targets.nki.ops")
    verify(parse_kernel(STRADDLE.replace("START", "0")))    # elements 0..383: bank 0
    with pytest.raises(CompilationError, match=r"dst covers f32 elements 384\.\.767 of each "
                                               r"partition, across two 2048-byte PSUM banks"):
        verify(parse_kernel(STRADDLE.replace("START", "384")))


@tj.kernel
def ragged_exp(x, out, R: tj.constexpr, N: tj.constexpr):
    with tj.thread():
        t = tj.alloc_shared((128, N), tj.float32)
        for r in tj.static_range((R + 127) // 128):
            tj.copy(t, x[r * 128:r * 128 + 128, 0:N])
            tj.exp(t, t)
            tj.copy(out[r * 128:r * 128 + 128, 0:N], t)


def test_a_tile_past_the_tensors_end_is_a_shorter_static_slice():
    compiled = ragged_exp.compile(spec(200, 64), spec(200, 64), R=200, N=64, target="nki")
    source = lines(compiled.asm["nki"])
    assert "nisa.dma_copy(dst=t[0:72, 0:64], src=x[128:200, 0:64])" in source
    assert "nisa.dma_copy(dst=out[128:200, 0:64], src=t[0:72, 0:64])" in source
    x = np.random.default_rng(3).standard_normal((200, 64), dtype=np.float32)
    np.testing.assert_allclose(reference.run(compiled.asm["nki"], "ragged_exp", x), np.exp(x),
                               rtol=1e-6)
    out = torch.zeros(200, 64)
    ragged_exp[(1,)](torch.from_numpy(x), out, R=200, N=64, num_warps=1)   # the CPU masks
    torch.testing.assert_close(out, torch.from_numpy(np.exp(x)))


@tj.kernel
def exp_rows(x, out):
    with tj.thread():
        t = tj.alloc_shared((128, x.shape[1]), tj.float32)   # static: shapes are specialized
        tj.copy(t, x[0:128, 0:x.shape[1]])
        tj.exp(t, t)
        tj.copy(out[0:128, 0:x.shape[1]], t)


@pytest.mark.parametrize("n", [64, 96])
def test_each_tensor_shape_compiles_its_own_module(n):
    compiled = exp_rows.compile(spec(128, n), spec(128, n), target="nki")
    source = lines(compiled.asm["nki"])
    assert f"t = nl.ndarray((128, {n}), dtype=nl.float32, buffer=nl.sbuf)" in source
    assert f"out = nl.ndarray((128, {n}), dtype=nl.float32, buffer=nl.shared_hbm)" in source


@tj.kernel
def gemm_m_on_partitions(a, b, c):
    with tj.thread():
        A = tj.alloc_shared((128, 128), tj.float32)   # M on the partitions, K on F
        B = tj.alloc_shared((128, 128), tj.float32)
        C = tj.alloc_shared((128, 128), tj.float32)
        tj.copy(A, a[0:128, 0:128])
        tj.copy(B, b[0:128, 0:128])
        tj.gemm(C, A, B)
        tj.copy(c[0:128, 0:128], C)


def test_a_gemm_whose_k_is_not_on_the_partitions_is_declined_saying_so():
    with pytest.raises(DispatchError) as info:
        gemm_m_on_partitions.compile(spec(128, 128), spec(128, 128), spec(128, 128),
                                     target="nki")
    message = str(info.value)
    assert "nc_matmul | no digit of K lies on the partitions of both A and B" in message
    assert "fma" in message and "cannot run per-element loops" in message
    _located(info.value, "tj.gemm(C, A, B)")
