"""``tj.range(..., pipeline=S)`` on the cuda target: the S-stage cp.async ring compiles for
sm_80 and sm_90a with S - 1 groups left in flight at each wait, the prologue's copies
unrolled beside the steady state's, CTA barriers around the slot's reader and no spills;
the tma ring for sm_90a waits on the slot's full mbarrier with the round's parity.
(The ring's results: tests/e2e/test_e2e_software_pipeline.py, on the CPU.)"""
import sys
from pathlib import Path

import pytest
from support.gpu import needs_nvrtc

import tilejit as tj

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_software_pipeline import pipelined_gemm, pipelined_tma_gemm  # noqa: E402


def _spec(*shape, dtype=tj.float16):
    return tj.TensorSpec(shape, dtype, device="cuda")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_ring_waits_for_all_but_s_minus_1_groups(arch, stages, fresh_cache):
    compiled = pipelined_gemm.compile(_spec(50, 70), _spec(70, 37), _spec(50, 37, dtype=tj.float32),
                                      BM=32, BN=16, BK=16, S=stages, target="cuda", arch=arch)
    lines = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    waits = {line for line in lines if "wait_group" in line}
    assert waits == {f"cp.async.wait_group {stages - 1};"}
    # a copy of A and one of B per prologue stage and in the steady state
    assert sum(line.startswith("cp.async.cg.shared.global") for line in lines) == 2 * stages
    assert sum(line.startswith("bar.sync") for line in lines) >= 2
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@pytest.mark.parametrize("stages", [2, 3])
def test_the_tma_ring_waits_on_full_barriers_by_parity(stages, fresh_cache):
    compiled = pipelined_tma_gemm.compile(_spec(50, 72), _spec(72, 40),
                                          _spec(50, 40, dtype=tj.float32), BM=32, BN=16, BK=16,
                                          S=stages, target="cuda", arch="sm_90a")
    lines = [line.strip() for line in compiled.asm["ptx"].splitlines()]

    def count(prefix):
        return sum(line.startswith(prefix) for line in lines)

    assert count("mbarrier.try_wait.parity.shared::cta.b64") == 1
    assert count("mbarrier.init") == stages                        # one full barrier a slot
    assert count("mbarrier.arrive.expect_tx") == stages            # S - 1 prologue issues + 1
    assert count("cp.async.bulk.tensor") == 2 * stages
    assert count("cp.async.wait_group") == 0
    assert compiled.metadata["spill_bytes"] == 0
