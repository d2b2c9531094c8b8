"""The wgmma ops printed by the cuda target: inline PTX with the accumulators tied to every
one of them; NVRTC compiles a warpgroup's m64nNk16 for sm_90a (PTX holds wgmma.mma_async,
SASS -- where nvdisasm is found -- HGMMA) without spills; another arch is a located error.
The kernel is ``support.wgmma_kernels``'s textual per-thread IR; the DSL's gemms, f16 and
fp8 (m64nNk32, e4m3 / e5m2: QGMMA in SASS), come from ``test_e2e_wgmma``."""
import re
import sys
from pathlib import Path

import pytest
from support.gpu import needs_nvdisasm, needs_nvrtc, sass
from support.wgmma_kernels import wgmma_kernel

import tilejit as tj
from tilejit.errors import CompilationError
from tilejit.ir.ops_wgmma import MatrixDescriptor
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.layout import smem_layout
from tilejit.targets.cuda.emit import print_cuda
from tilejit.targets.cuda.nvrtc import compile_cuda

A = MatrixDescriptor(0, 128, 256)
B = MatrixDescriptor(2048, 128, 256, swizzle=128)


def kernel(n=16, dtype="f16", trans_b=False):
    return verify(parse_kernel(wgmma_kernel(n, A, B, dtype=dtype, trans_b=trans_b)))


def asm_lines(source: str, word: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if word in line and "asm" in line]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_multiply_is_one_asm_with_the_accumulators_tied(dtype):
    source, _ = print_cuda(kernel(16, dtype, trans_b=True), "sm_90a")
    (line,) = asm_lines(source, "wgmma.mma_async")
    assert (f"wgmma.mma_async.sync.aligned.m64n16k16.f32.{dtype}.{dtype} "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 1;") in line
    assert "setp.ne.b32 p, %10, 0;" in line and line.endswith('"r"(1) : "memory");')
    assert line.count('"+f"(') == 8 and '"l"(da0), "l"(db0)' in line


def test_fence_commit_and_wait_tie_the_accumulators_too():
    source, _ = print_cuda(kernel(), "sm_90a")
    for text in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
                 "wgmma.wait_group.sync.aligned 0;"):
        (line,) = asm_lines(source, text)
        assert line.count('"+f"(') == 8 and line.endswith(':: "memory");')


def test_the_descriptor_ors_the_fields_with_the_shared_address():
    source, _ = print_cuda(kernel(), "sm_90a")
    (a_line,) = [line.strip() for line in source.splitlines() if line.strip().startswith(
        "const long long da0")]
    assert f"{MatrixDescriptor(0, 128, 256).encode():#x}ull" in a_line
    assert "((tj_smem_addr(&sa[0]) & 0x3FFFFu) >> 4)" in a_line   
    (b_line,) = [line.strip() for line in source.splitlines() if line.strip().startswith(
        "const long long db0")]
    assert f"{MatrixDescriptor(0, 128, 256, swizzle=128).encode():#x}ull" in b_line


def test_other_archs_are_a_located_error():
    with pytest.raises(CompilationError,
                       match=r"wgmma_fence \(wgmma\) needs sm_90a; compiling for sm_90") as info:
        print_cuda(kernel(), "sm_90")
    assert info.value.line == 6


@needs_nvrtc
@pytest.mark.parametrize("n", [16, 64, 256])
def test_nvrtc_compiles_wgmma_without_spills(n):
    source, entry = print_cuda(kernel(n), "sm_90a")
    program = compile_cuda(source, "sm_90a")
    ptx = [line.strip() for line in program.ptx.splitlines()]
    assert any(line.startswith(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16")
               for line in ptx)
    for text in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
                 "wgmma.wait_group.sync.aligned 0;"):
        assert text in ptx
    usage = program.resources()[entry]
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0


@needs_nvrtc
@needs_nvdisasm
def test_the_sass_holds_hgmma(tmp_path):
    source, _ = print_cuda(kernel(64), "sm_90a")
    assert "HGMMA.64x64x16.F32" in sass(compile_cuda(source, "sm_90a").cubin, tmp_path)


# ----------------------------------------------------------------------- from the DSL
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_wgmma import MODES, wgmma_gemm  # noqa: E402


@needs_nvrtc
@pytest.mark.parametrize("m, swizzle, tb", [(64, 128, True), (64, 64, False), (64, 0, True),
                                            (128, 128, True)])
def test_the_dsl_gemm_compiles_to_one_wgmma_per_k_step(m, swizzle, tb):
    """M x 64 x 64 f16 through gemm_async(dispatch="wgmma") for sm_90a: a
    wgmma.mma_async m64n64k16 per k-step and 64 rows, one fence, commit and wait, no
    spills."""
    a = tj.TensorSpec((m, 64), tj.float16, device="cuda")
    b = tj.TensorSpec((64, 64), tj.float16, device="cuda")
    c = tj.TensorSpec((m, 64), tj.float32, device="cuda")
    compiled = wgmma_gemm.compile(a, b, c, N=64, K=64, TB=tb, M=m,
                                  LA=smem_layout((m, 64), "float16", MODES[swizzle]),
                                  LB=smem_layout((64, 64), "float16", MODES[swizzle]),
                                  target="cuda", arch="sm_90a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    trans_b = 0 if tb else 1
    mma = [line for line in ptx if line.startswith("wgmma.mma_async.sync.aligned.m64n64k16")]
    assert len(mma) == 4 * m // 64
    assert all(line.endswith(f"p, 1, 1, 0, {trans_b};") for line in mma)
    for text in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
                 "wgmma.wait_group.sync.aligned 0;"):
        assert ptx.count(text) == 1
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
def test_a_ring_stage_compiles_with_its_descriptor_start_at_run_time():
    from test_e2e_wgmma import wgmma_ring
    a = tj.TensorSpec((64, 192), tj.float16, device="cuda")
    b = tj.TensorSpec((32, 192), tj.float16, device="cuda")
    c = tj.TensorSpec((64, 32), tj.float32, device="cuda")
    compiled = wgmma_ring.compile(a, b, c, N=32, KT=64, S=3,
                                  LA=smem_layout((3, 64, 64), "float16", MODES[128]),
                                  LB=smem_layout((3, 32, 64), "float16", MODES[128]),
                                  target="cuda", arch="sm_90a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    # a k-step of 16 per wgmma, 4 per stage of 64 (ptxas may unroll the 3 stages)
    assert len([line for line in ptx if line.startswith("wgmma.mma_async")]) in (4, 12)
    assert compiled.metadata["spill_bytes"] == 0
    descs = [line.strip() for line in compiled.asm["cuda"].splitlines()
             if "tj_smem_addr(&a[" in line]
    # each k-step's start: the stage's run-time offset plus a constant, never a literal
    assert len(descs) == 4 and all(re.search(r"tj_smem_addr\(&a\[\w+\]\) & 0x3FFFFu", line)
                                   and not re.search(r"&a\[\d+\]", line) for line in descs)


def _fp8_gemm(a_type, b_type, swizzle):
    """64 x 40 x 192 fp8 through gemm_async(dispatch="wgmma") for sm_90a, B as [N, K]."""
    a = tj.TensorSpec((64, 192), getattr(tj, a_type), device="cuda")
    b = tj.TensorSpec((40, 192), getattr(tj, b_type), device="cuda")
    c = tj.TensorSpec((64, 40), tj.float32, device="cuda")
    return wgmma_gemm.compile(a, b, c, N=40, K=192, TB=True,
                              LA=smem_layout((64, 192), a_type, MODES[swizzle]),
                              LB=smem_layout((40, 192), b_type, MODES[swizzle]),
                              target="cuda", arch="sm_90a")


@needs_nvrtc
@pytest.mark.parametrize("a_type, b_type, swizzle", [
    ("float8_e4m3", "float8_e4m3", 32), ("float8_e4m3", "float8_e5m2", 0),
    ("float8_e5m2", "float8_e4m3", 64)])
def test_the_fp8_gemm_compiles_to_k32_wgmma_without_transposes(a_type, b_type, swizzle):
    """64 x 40 x 192 fp8 (B as [N, K]: K-major, as fp8 must be) for sm_90a: a
    wgmma.mma_async m64n40k32 per k-step of 32, named by both operand types, with no
    transpose immediates (the fp8 form has none); no spills."""
    compiled = _fp8_gemm(a_type, b_type, swizzle)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    mma = [line for line in ptx if line.startswith("wgmma.mma_async")]
    assert len(mma) == 192 // 32
    assert all(line.startswith(f"wgmma.mma_async.sync.aligned.m64n40k32.f32.{a_type[-4:]}."
                               f"{b_type[-4:]} ") and line.endswith("p, 1, 1;") for line in mma)
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@needs_nvdisasm
def test_the_fp8_sass_holds_qgmma(tmp_path):
    compiled = _fp8_gemm("float8_e4m3", "float8_e5m2", 64)
    assert "QGMMA.64x40x32.F32.E4M3.E5M2" in sass(compile_cuda(compiled.asm["cuda"],
                                                               "sm_90a").cubin, tmp_path)
