"""Registers, spills and shared memory of the wgmma test gemm compiled for sm_90a (no GPU
needed: NVRTC's CUBIN says): ``PYTHONPATH=. python benchmarks/bench_wgmma_compile.py``."""
import sys
from pathlib import Path

import tilejit as tj
from tilejit.layout import smem_layout

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "e2e"))
from test_e2e_wgmma import MODES, wgmma_gemm  # noqa: E402

for m, swizzle, tb in ((64, 128, True), (128, 128, True), (128, 128, False), (128, 0, True)):
    a = tj.TensorSpec((m, 64), tj.float16, device="cuda")
    b = tj.TensorSpec((64, 64), tj.float16, device="cuda")
    c = tj.TensorSpec((m, 64), tj.float32, device="cuda")
    compiled = wgmma_gemm.compile(a, b, c, N=64, K=64, TB=tb, M=m,
                                  LA=smem_layout((m, 64), "float16", MODES[swizzle]),
                                  LB=smem_layout((64, 64), "float16", MODES[swizzle]),
                                  target="cuda", arch="sm_90a")
    mma = sum(line.strip().startswith("wgmma.mma_async") for line in
              compiled.asm["ptx"].splitlines())
    facts = {key: compiled.metadata.get(key) for key in ("registers", "spill_bytes",
                                                         "shared_bytes")}
    print(f"{m}x64x64 swizzle={swizzle} B {'K' if tb else 'MN'}-major: {facts}, "
          f"{mma} wgmma.mma_async")
