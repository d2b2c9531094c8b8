"""copy_async on the cuda target (tilejit/targets/cuda/rules/): ``cp.async`` chunks, commit
and wait groups in the PTX for sm_80 and sm_90a; ``immediate`` completing the barrier's
bytes with ``mbarrier.complete_tx`` (sm_90); the Hopper gemm families declined, saying why
(TMA: test_cuda_tma.py)."""
import sys
from pathlib import Path

import pytest
from support.gpu import needs_nvrtc

import tilejit as tj

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_async import staged_copy  # noqa: E402
from test_e2e_cp_async import double_buffered_gemm, staged  # noqa: E402

ARCHS = ("sm_80", "sm_90a")


def _spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype, device="cuda")


def _ptx_lines(compiled, word: str) -> list[str]:
    return [line.strip() for line in compiled.asm["ptx"].splitlines() if word in line]


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype, chunk", [(tj.float32, 16), (tj.float16, 16), (tj.float64, 16)])
def test_cp_async_groups_in_the_ptx(arch, dtype, chunk, fresh_cache):
    x = _spec(45, 70, dtype=dtype)
    compiled = staged.compile(x, x, BM=16, BN=32, target="cuda", arch=arch)
    copies = _ptx_lines(compiled, "cp.async.cg.shared.global")
    assert copies and all(f", {chunk}, " in line for line in copies), copies
    assert _ptx_lines(compiled, "cp.async.commit_group")
    assert _ptx_lines(compiled, "cp.async.wait_group 0")
    assert "mbarrier" not in compiled.asm["cuda"].split("// ---- end of prelude")[1]


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_double_buffered_gemm_waits_for_one_group_behind(arch, fresh_cache):
    a, b, c = _spec(50, 70, dtype=tj.float16), _spec(70, 37, dtype=tj.float16), _spec(50, 37)
    compiled = double_buffered_gemm.compile(a, b, c, BM=32, BN=16, BK=16, target="cuda",
                                            arch=arch)
    assert _ptx_lines(compiled, "cp.async.cg.shared.global")
    assert _ptx_lines(compiled, "cp.async.wait_group 1")
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@pytest.mark.parametrize("family", [None, "cp.async"])
def test_a_barrier_copy_completes_its_bytes_on_sm90(family, fresh_cache):
    x = _spec(45, 70)
    compiled = staged_copy.compile(x, x, EXTRA=0, FAMILY=family, BM=16, BN=32, target="cuda",
                                   arch="sm_90a")
    (done,) = _ptx_lines(compiled, "mbarrier.complete_tx")
    assert done.startswith("mbarrier.complete_tx.relaxed.cta.shared::cta.b64")
    rules = {r.primitive: r.rule for r in compiled.dispatch_log}
    assert rules["copy_async"] == (family or "immediate")
    assert bool(_ptx_lines(compiled, "cp.async.cg")) == (family == "cp.async")


@needs_nvrtc
def test_transaction_bytes_are_an_error_at_the_line_on_sm80(fresh_cache):
    """mbarrier transaction counts are sm_90's: the kernel's expect_tx is refused first."""
    x = _spec(45, 70)
    with pytest.raises(tj.CompilationError, match=r"need sm_90 or later; compiling for sm_80"):
        staged_copy.compile(x, x, EXTRA=0, FAMILY="cp.async", BM=16, BN=32, target="cuda",
                            arch="sm_80")


@pytest.mark.parametrize("family, reason", [
    ("wgmma", r"(?s)wgmma has no f64 inputs.*wgmma m64nNk16 takes M a multiple of 64"),
    ("tcgen05", r"(?s)tcgen05.mma accumulates C in tensor memory.*tcgen05 needs sm_100a; "
                r"compiling for sm_90a"),
])
def test_hopper_gemm_families_decline_with_the_contract_first(family, reason):
    from test_e2e_async import async_gemm
    a = _spec(16, 16, dtype=tj.float64)
    with pytest.raises(tj.DispatchError, match=reason):
        async_gemm.compile(a, a, a, FAMILY=family, A_REGS=False, C_SHARED=False, M=16, N=16,
                           K=16, SHAPE=None, target="cuda", arch="sm_90a")
