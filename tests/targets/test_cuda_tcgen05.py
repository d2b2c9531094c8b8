"""The tcgen05 ops printed by the cuda target: inline PTX for sm_100a (no B200 is
available: these kernels are compiled, never run); NVRTC compiles one CTA's
alloc / mma / commit / ld / dealloc without spills, and the SASS (where nvdisasm is found)
holds UTCHMMA and LDTM; another arch is a located error. The kernel is
``support.tcgen05_kernels``'s textual per-thread IR."""
import sys
from pathlib import Path

import pytest
from support.gpu import needs_nvdisasm, needs_nvrtc, sass
from support.tcgen05_kernels import tcgen05_kernel

import tilejit as tj
from tilejit.errors import CompilationError
from tilejit.ir.ops_tcgen05 import InstructionDescriptor
from tilejit.ir.ops_wgmma import MatrixDescriptor
from tilejit.ir.parser import parse_kernel
from tilejit.ir.types import bf16, f16
from tilejit.ir.verifier import verify
from tilejit.targets.cuda.emit import print_cuda
from tilejit.targets.cuda.nvrtc import compile_cuda

A = MatrixDescriptor(0, 128, 256, version=1)
B = MatrixDescriptor(4096, 16, 1024, swizzle=128, version=1)


def kernel(n=16, **options):
    return verify(parse_kernel(tcgen05_kernel(n, A, B, **options)))


def asm_lines(source: str, word: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if word in line and "asm" in line]


@pytest.mark.parametrize("m, dtype, trans_b", [(128, "f16", False), (64, "bf16", True)])
def test_the_multiply_carries_the_instruction_descriptor(m, dtype, trans_b):
    source, _ = print_cuda(kernel(16, m=m, dtype=dtype, trans_b=trans_b), "sm_100a")
    (line,) = asm_lines(source, "tcgen05.mma")
    idesc = InstructionDescriptor(m, 16, {"f16": f16, "bf16": bf16}[dtype],
                                  {"f16": f16, "bf16": bf16}[dtype], trans_b=trans_b).encode()
    assert f"tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, {idesc:#x}, p;" in line
    assert "setp.ne.b32 p, %3, 0;" in line and line.endswith('"r"(0) : "memory");')


def test_the_descriptor_is_version_one_ored_with_the_shared_address():
    source, _ = print_cuda(kernel(), "sm_100a")
    (b_line,) = [line.strip() for line in source.splitlines()
                 if line.strip().startswith("const long long db0")]
    assert f"{MatrixDescriptor(0, 16, 1024, 128, version=1).encode():#x}ull" in b_line
    assert "((tj_smem_addr(&sb[0]) & 0x3FFFFu) >> 4)" in b_line


def test_alloc_commit_load_and_dealloc_lines():
    source, _ = print_cuda(kernel(), "sm_100a")
    (alloc,) = asm_lines(source, "tcgen05.alloc")
    assert "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" in alloc
    assert '"r"(tj_smem_addr(&slot[0]))' in alloc
    (commit,) = asm_lines(source, "tcgen05.commit")
    assert "mbarrier::arrive::one.shared::cluster.b64 [%0];" in commit
    (load,) = asm_lines(source, "tcgen05.ld")
    assert "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1," in load
    assert load.count('"=f"(') == 16
    (wait,) = asm_lines(source, "tcgen05.wait::ld")
    assert wait.count('"+f"(') == 16


def test_other_archs_are_a_located_error():
    with pytest.raises(CompilationError,
                       match=r"tcgen05_alloc \(tcgen05\) needs sm_100a; compiling for sm_90a") \
            as info:
        print_cuda(kernel(), "sm_90a")
    assert info.value.line == 5


@needs_nvrtc
@pytest.mark.parametrize("n, m", [(16, 128), (64, 64), (128, 128)])
def test_nvrtc_compiles_tcgen05_for_sm_100a_without_spills(n, m):
    source, entry = print_cuda(kernel(n, m=m), "sm_100a")
    program = compile_cuda(source, "sm_100a")
    ptx = [line.strip() for line in program.ptx.splitlines()]
    cols = max(32, n)
    for text in ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [",
                 "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;",
                 "tcgen05.mma.cta_group::1.kind::f16 [",
                 "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [",
                 f"tcgen05.ld.sync.aligned.32x32b.x{n}.b32 {{",
                 "tcgen05.wait::ld.sync.aligned;", "tcgen05.fence::before_thread_sync;",
                 "tcgen05.fence::after_thread_sync;", "tcgen05.dealloc.cta_group::1"):
        assert any(line.startswith(text) for line in ptx), text
    assert any(line.endswith(f"], {cols};") for line in ptx if "tcgen05.alloc" in line)
    usage = program.resources()[entry]
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0


@needs_nvrtc
@needs_nvdisasm
def test_the_sass_holds_utchmma_and_ldtm(tmp_path):
    """Blackwell's SASS: UTCHMMA (the f16-kind multiply, descriptors and TMEM operands),
    UTCBAR (the commit's mbarrier arrive), LDTM.x64 (the 32x32b load of 64 columns) and the
    allocator's UTCATOMSWS."""
    source, _ = print_cuda(kernel(64), "sm_100a")
    text = sass(compile_cuda(source, "sm_100a").cubin, tmp_path)
    for word in ("UTCHMMA gdesc[", "UTCBAR [", "LDTM.x64 ", "UTCATOMSWS.FIND_AND_SET"):
        assert word in text, word


# ----------------------------------------------------------------------- from the DSL
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_tcgen05 import options, tcgen05_gemm  # noqa: E402


@needs_nvrtc
@pytest.mark.parametrize("bn, k, swizzle", [(64, 64, 128), (128, 32, 32), (48, 32, 0)])
def test_the_dsl_gemm_compiles_for_sm_100a(bn, k, swizzle):
    """128 x BN x K f16 through gemm_async(dispatch="tcgen05", barrier=) for sm_100a: warp 0
    allocates the accumulator's columns (a power of two, at least 32) and frees them at the
    end, one tcgen05.mma per k-step of 16 (the first overwriting D), one commit, a
    tcgen05.ld per power of two of BN and one wait::ld; no spills."""
    a = tj.TensorSpec((128, k), tj.float16, device="cuda")
    b = tj.TensorSpec((bn, k), tj.float16, device="cuda")
    c = tj.TensorSpec((128, bn), tj.float32, device="cuda")
    compiled = tcgen05_gemm.compile(a, b, c, **options(bn, k, swizzle), target="cuda",
                                    arch="sm_100a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    cols = max(32, 1 << (bn - 1).bit_length())
    idesc = InstructionDescriptor(128, bn, f16, f16).encode()
    (alloc,) = [line for line in ptx if line.startswith("tcgen05.alloc")]
    assert alloc.startswith("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [")
    assert alloc.endswith(f"], {cols};")
    mma = [line for line in ptx if line.startswith("tcgen05.mma.cta_group::1.kind::f16 [")]
    assert len(mma) == k // 16 and all(line.endswith(f", {idesc:#x}, p;") for line in mma)
    assert len([line for line in ptx if line.startswith(
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64")]) == 1
    loads = [line for line in ptx if line.startswith("tcgen05.ld.sync.aligned.32x32b.x")]
    assert sum(int(line.split(".x")[1].split(".")[0]) for line in loads) == bn
    assert ptx.count("tcgen05.wait::ld.sync.aligned;") == 1
    assert any(line.startswith("tcgen05.dealloc.cta_group::1.sync.aligned.b32")
               and line.endswith(f", {cols};") for line in ptx)
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
def test_the_accumulator_stored_from_registers_compiles_to_tcgen05_st():
    """With ACCUM, C's tile goes into tensor memory by tcgen05.st 32x32b (one per power of
    two of BN), one wait::st, and every multiply accumulates; no spills."""
    a = tj.TensorSpec((128, 32), tj.float16, device="cuda")
    b = tj.TensorSpec((48, 32), tj.float16, device="cuda")
    c = tj.TensorSpec((128, 48), tj.float32, device="cuda")
    compiled = tcgen05_gemm.compile(a, b, c, **options(48, 32, 64, ACCUM=True),
                                    target="cuda", arch="sm_100a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    stores = [line for line in ptx if line.startswith("tcgen05.st.sync.aligned.32x32b.x")]
    assert sorted(int(line.split(".x")[1].split(".")[0]) for line in stores) == [16, 32]
    assert ptx.count("tcgen05.wait::st.sync.aligned;") == 1
    source = compiled.asm["cuda"]
    assert 'tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2' in source
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
def test_tma_loads_and_tcgen05_compile_together():
    """The e2e kernel's TMA variant for sm_100a: the loads are cp.async.bulk.tensor boxes
    completing on an mbarrier, then the multiplies; no spills."""
    a = tj.TensorSpec((256, 64), tj.float16, device="cuda")
    b = tj.TensorSpec((96, 64), tj.float16, device="cuda")
    c = tj.TensorSpec((256, 96), tj.float32, device="cuda")
    compiled = tcgen05_gemm.compile(a, b, c, **options(32, 64, 128, TMA=True),
                                    target="cuda", arch="sm_100a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert len([line for line in ptx if line.startswith("cp.async.bulk.tensor.2d")]) == 2
    assert len([line for line in ptx if line.startswith("tcgen05.mma.cta_group::1")]) == 4
    assert compiled.metadata["spill_bytes"] == 0
