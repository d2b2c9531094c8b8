"""wgmma with A from registers printed by the cuda target: ``wgmma.mma_async`` with the
thread's four A registers ``{a0, a1, a2, a3}`` in place of A's descriptor and no
transpose-A immediate; NVRTC compiles the DSL's register-A GEMM and the attention chain
for sm_90a without spills, and the chain's P never goes through shared memory (SASS:
HGMMA reading A from registers, where nvdisasm is found)."""
import re
import sys
from pathlib import Path

import pytest
from support.gpu import needs_nvdisasm, needs_nvrtc, sass

import tilejit as tj
from tilejit.targets.cuda.nvrtc import compile_cuda

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_wgmma_register_a import _shared, attention_chain, register_a_gemm  # noqa: E402


def _gemm(m=64, n=64, k=64, dtype=tj.float16):
    a = tj.TensorSpec((m, k), dtype, device="cuda")
    b = tj.TensorSpec((k, n), dtype, device="cuda")
    c = tj.TensorSpec((m, n), tj.float32, device="cuda")
    return register_a_gemm.compile(a, b, c, M=m, N=n, K=k, LA=_shared((m, k)),
                                   LB=_shared((k, n)), target="cuda", arch="sm_90a")


def _chain(m=64, d=64, l=64):
    q, k, v = (tj.TensorSpec(shape, tj.float16, device="cuda")
               for shape in ((m, d), (l, d), (l, d)))
    o = tj.TensorSpec((m, d), tj.float32, device="cuda")
    return attention_chain.compile(q, k, v, o, M=m, D=d, L=l, LQ=_shared((m, d)),
                                   LK=_shared((l, d)), LV=_shared((l, d)),
                                   target="cuda", arch="sm_90a")


def _ptx(compiled) -> list[str]:
    return [line.strip() for line in compiled.asm["ptx"].splitlines()]


def test_the_printer_packs_a_into_four_registers():
    source = _gemm().asm["cuda"]
    (line, *_) = [line.strip() for line in source.splitlines()
                  if "wgmma.mma_async" in line and "asm" in line]
    # 32 accumulators %0..%31, A's registers %32..%35, B's descriptor %36, scale-d %37
    assert ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, " in line
            and "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;" in line)
    assert "setp.ne.b32 p, %37, 0;" in line and line.count('"r"(') == 5


@needs_nvrtc
@pytest.mark.parametrize("m, dtype, name", [(64, tj.float16, "f16"), (128, tj.bfloat16, "bf16")])
def test_the_register_a_gemm_compiles_without_spills(m, dtype, name):
    compiled = _gemm(m=m, dtype=dtype)
    mma = [line for line in _ptx(compiled) if line.startswith("wgmma.mma_async")]
    assert len(mma) == 4 * m // 64
    assert all(line.startswith(f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{name}.{name} ")
               and ", {%r" in line and line.endswith("p, 1, 1, 1;") for line in mma)
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
def test_the_chain_keeps_p_in_registers():
    """S = Q K^T reads both from shared memory (two descriptors); O = P V reads P from
    registers: the only shared stores are the three input copies, no round trip of P."""
    compiled = _chain()
    ptx = _ptx(compiled)
    mma = [line for line in ptx if line.startswith("wgmma.mma_async")]
    by_descriptors = [line for line in mma if ", {%r" not in line]
    from_registers = [line for line in mma if ", {%r" in line]
    assert len(by_descriptors) == 4 and len(from_registers) == 4
    assert all(line.endswith("p, 1, 1, 0, 0;") for line in by_descriptors)   # K as [L, D]
    # shared memory holds Q, K and V only (P would add 64 x 64 f16), nothing is loaded
    # back from it by a thread, and the cast S -> P moves no value between threads
    assert compiled.metadata["shared_bytes"] == 3 * 64 * 64 * 2
    assert not [line for line in ptx if line.startswith(("ld.shared", "shfl"))]
    cast_line = next(i for i, line in enumerate(Path(attention_chain.fn.__code__.co_filename)
                                                .read_text().splitlines(), 1)
                     if line.strip().startswith("p = tj.cast(s"))
    (cast,) = [r for r in compiled.metadata["dispatch_log"] if r["line"] == cast_line]
    assert cast["primitive"] == "pointwise" and cast["rule"] == "packed"
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@needs_nvdisasm
def test_the_sass_reads_a_from_registers(tmp_path):
    text = sass(compile_cuda(_gemm(n=32).asm["cuda"], "sm_90a").cubin, tmp_path)
    hgmma = [line for line in text.splitlines() if "HGMMA.64x32x16.F32" in line]
    # D, then A in registers, then B's descriptor (A from shared memory: D, gdesc, ...)
    assert len(hgmma) == 4 and all(re.search(r"HGMMA\.64x32x16\.F32 R\d+, R\d+, gdesc\[", line)
                                   for line in hgmma)


@needs_nvrtc
def test_a_register_a_group_left_in_flight_compiles():
    """wait=False: the multiply's commit, then the kernel's tj.wgmma_wait(0) -- one
    wait_group 0, after the register-A multiply -- and no spills."""
    from test_e2e_wgmma_register_a import register_a_in_flight
    a, b = (tj.TensorSpec(shape, tj.float16, device="cuda") for shape in ((64, 16), (16, 32)))
    c = tj.TensorSpec((64, 32), tj.float32, device="cuda")
    compiled = register_a_in_flight.compile(a, b, c, target="cuda", arch="sm_90a")
    ptx = _ptx(compiled)
    (mma,) = [i for i, line in enumerate(ptx) if line.startswith("wgmma.mma_async")]
    assert ", {%r" in ptx[mma]
    (wait,) = [i for i, line in enumerate(ptx) if line == "wgmma.wait_group.sync.aligned 0;"]
    assert mma < wait and compiled.metadata["spill_bytes"] == 0
