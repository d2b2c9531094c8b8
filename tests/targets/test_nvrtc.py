"""NVRTC compilation (no GPU needed) and resource readout from CUBINs and ptxas logs."""
import subprocess
import sys

import pytest

from tilejit.errors import CompilationError
from tilejit.targets.cuda.nvrtc import (arch_for_capability, compile_cuda, cuda_include_dirs,
                                        nvrtc_unavailable_reason, nvrtc_version, parse_arch,
                                        resource_usage, supported_archs)

_REASON = nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_REASON is not None, reason=f"needs NVRTC (cuda-python): {_REASON}")

AXPB = r"""
extern "C" __global__ void axpb(float* out, const float* a, const float* b, float x, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? a[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = tile[threadIdx.x] * x + b[i];
}
"""

PARAMS = r"""
struct Pair { double a, b; };
extern "C" __global__ void params(float* p, float f, int i, double d, char c, Pair s) {
  if (i) p[0] = f + d + c + s.a;
}
extern "C" __global__ void frame(double* o, int n) {
  double big[64];
  for (int j = 0; j < 64; j++) big[j] = j * n;
  o[threadIdx.x] = big[n & 63];
}
extern "C" __global__ void plain(float* o) { o[threadIdx.x] = 1.0f; }
"""


def _archs(*wanted):
    if _REASON is not None:
        return list(wanted)
    return [a for a in wanted if parse_arch(a)[1] in supported_archs()]


# --- no NVRTC needed ---------------------------------------------------------------------------

def test_parse_arch():
    assert parse_arch("sm_90a") == ("sm", 90, "a")
    assert parse_arch("sm_80") == ("sm", 80, "")
    assert parse_arch("compute_100a") == ("compute", 100, "a")
    for bad in ("sm90", "sm_9", "gfx90a", "sm_90x", ""):
        with pytest.raises(CompilationError, match="bad CUDA arch"):
            parse_arch(bad)


def test_arch_for_capability():
    assert arch_for_capability(9, 0) == "sm_90a"
    assert arch_for_capability(10, 0) == "sm_100a"
    assert arch_for_capability(8, 0) == "sm_80"
    assert arch_for_capability(9, 0, arch_specific=False) == "sm_90"


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_90a'
ptxas info    : Function properties for helper
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Function properties for k2
ptxas         .     512 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 38 registers, used 0 barriers, 512 bytes cumulative stack size
ptxas info    : Compiling entry function 'axpb' for 'sm_80'
ptxas info    : Function properties for axpb
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
"""


def test_resource_usage_from_log():
    r = resource_usage(PTXAS_LOG)
    assert set(r) == {"k2", "axpb"}
    assert (r["k2"].registers, r["k2"].shared_bytes, r["k2"].barriers) == (38, 0, 0)
    # The device function's properties must not leak into the entry's.
    assert (r["k2"].stack_frame_bytes, r["k2"].spill_store_bytes, r["k2"].spill_load_bytes) == (512, 4, 12)
    assert (r["axpb"].registers, r["axpb"].shared_bytes, r["axpb"].barriers) == (12, 1024, 1)
    assert r["axpb"].stack_frame_bytes == 0 and r["axpb"].param_sizes is None


def test_resource_usage_rejects_non_cubin():
    with pytest.raises(CompilationError, match="ELF"):
        resource_usage(b"not an elf at all, just some bytes" * 4)
    elf_not_cuda = bytearray(b"\x7fELF\x02\x01" + bytes(58))
    elf_not_cuda[18] = 62  # EM_X86_64
    with pytest.raises(CompilationError, match="EM_CUDA"):
        resource_usage(bytes(elf_not_cuda))


def test_import_needs_no_cuda_python():
    code = ("import sys, tilejit, tilejit.targets.cuda; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('cuda', 'torch')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- NVRTC ---------------------------------------------------------------------------------

@needs_nvrtc
def test_ptx_and_cubin_for_sm90a():
    prog = compile_cuda(AXPB, "sm_90a", name="axpb.cu")
    assert ".target sm_90a" in prog.ptx
    assert ".entry axpb(" in prog.ptx
    assert prog.entries == ["axpb"]
    assert prog.cubin is not None and prog.cubin[:4] == b"\x7fELF"
    assert int.from_bytes(prog.cubin[18:20], "little") == 190  # EM_CUDA
    assert "--gpu-architecture=sm_90a" in prog.options


@needs_nvrtc
def test_minimal_leaves_out_what_printed_kernels_never_use():
    prog = compile_cuda(AXPB, "sm_90a", minimal=True)
    assert ("--minimal" in prog.options) == (nvrtc_version() >= (12, 4))
    assert prog.entries == ["axpb"]
    assert "--minimal" not in compile_cuda(AXPB, "sm_90a").options


@needs_nvrtc
def test_ptx_only_for_compute_arch():
    prog = compile_cuda(AXPB, "compute_90a")
    assert ".target sm_90a" in prog.ptx and prog.cubin is None


@needs_nvrtc
def test_syntax_error_raises_with_nvrtc_log():
    bad = 'extern "C" __global__ void k(float* p) {\n  p[0] = 1.0f\n}\n'
    with pytest.raises(CompilationError) as ei:
        compile_cuda(bad, "sm_90a", name="bad.cu")
    msg = str(ei.value)
    assert "NVRTC failed to compile bad.cu for sm_90a" in msg
    assert 'bad.cu(3): error: expected a ";"' in msg


@needs_nvrtc
def test_unsupported_arch():
    with pytest.raises(CompilationError, match="cannot target sm_11"):
        compile_cuda(AXPB, "sm_11")


@needs_nvrtc
def test_name_expressions_give_mangled_names():
    src = "template <int N> __global__ void scale(float* p) { p[threadIdx.x] *= N; }"
    prog = compile_cuda(src, "sm_80", name_expressions=["scale<3>"])
    assert prog.lowered_names == {"scale<3>": "_Z5scaleILi3EEvPf"}
    assert prog.entries == ["_Z5scaleILi3EEvPf"]


@needs_nvrtc
@pytest.mark.skipif(_REASON is None and not cuda_include_dirs(), reason="no CUDA headers found")
def test_cuda_headers_resolve():
    src = ('#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'
           'extern "C" __global__ void h(__half* o, __nv_bfloat16* p) {'
           ' o[0] = __float2half(1.0f); p[0] = __float2bfloat16(2.0f); }')
    prog = compile_cuda(src, "sm_90a")
    assert prog.entries == ["h"]
    with pytest.raises(CompilationError, match="cuda_fp16.h"):
        compile_cuda(src, "sm_90a", include_dirs=())


@needs_nvrtc
@pytest.mark.parametrize("arch", _archs("sm_80", "sm_90a", "sm_100a"))
def test_cubin_resources_match_ptxas_log(arch):
    prog = compile_cuda(AXPB + PARAMS, arch)
    from_cubin, from_log = resource_usage(prog.cubin), resource_usage(prog.log)
    assert set(from_cubin) == set(from_log) == {"axpb", "params", "frame", "plain"}
    for k in from_cubin:
        c, lg = from_cubin[k], from_log[k]
        assert (c.registers, c.shared_bytes, c.stack_frame_bytes, c.barriers) == \
            (lg.registers, lg.shared_bytes, lg.stack_frame_bytes, lg.barriers), k
    assert from_cubin["axpb"].shared_bytes == 1024 and from_cubin["axpb"].barriers == 1
    assert from_cubin["plain"].shared_bytes == 0
    assert from_cubin["frame"].stack_frame_bytes == 512
    assert from_cubin["axpb"].param_sizes == (8, 8, 8, 4, 4)
    assert from_cubin["params"].param_sizes == (8, 4, 4, 8, 1, 16)
    merged = prog.resources()["frame"]  # CUBIN numbers plus the log's spill counts
    assert merged.stack_frame_bytes == 512 and merged.spill_store_bytes is not None
