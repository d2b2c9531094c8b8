"""The bf16 / fp8 GEMM benchmark's CPU-side parts: its geomeans (the Triton column's among
them), its table rows, and its exit without a GPU (status 2 and a message)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import bench_hopper_gemm as bench  # noqa: E402  (a script's module: benchmarks/ on the path)


def bf16_row(cublas, triton=None, status="ok"):
    row = dict(model="m", projection="o", N=4096, K=4096, status=status, config="c",
               tilejit_ms=1.0, cublas_ms=cublas, speedup_vs_cublas=cublas)
    if triton is not None:
        row.update(triton_status="ok", triton_ms=triton, speedup_vs_triton=triton,
                   triton_config="t")
    return row


def test_geomeans_per_peer():
    rows = [bf16_row(0.5, 2.0), bf16_row(2.0, 8.0), bf16_row(9.0, 9.0, status="wrong result"),
            bf16_row(1.0)]      # a row without a Triton figure counts for cuBLAS only
    means = bench.geomeans(rows)
    assert means["geomean_speedup_vs_cublas"] == pytest.approx(1.0)
    assert means["geomean_speedup_vs_triton"] == pytest.approx(4.0)
    fp8 = dict(bf16_row(1.0), scaling="block", speedup_vs_torch=3.0, b_type="e4m3")
    e5m2 = dict(bf16_row(1.0), scaling="tensor", speedup_vs_torch=0.5, b_type="e5m2")
    tensor = dict(e5m2, b_type="e4m3", speedup_vs_torch=2.0)
    assert bench.geomeans([fp8, e5m2, tensor]) == {    # an e5m2 B row has its own figure
        "geomean_block_vs_per_tensor_scaled_mm": pytest.approx(3.0),
        "geomean_tensor_vs_scaled_mm": pytest.approx(2.0),
        "geomean_e5m2_tensor_vs_scaled_mm": pytest.approx(0.5)}
    assert " tensor e5m2 " in bench.row_text(dict(e5m2, torch_ms=0.5), "speedup_vs_torch")


def test_row_text_shows_the_triton_column():
    assert "triton 2.000 ms 2.00x [t]" in bench.row_text(bf16_row(1.0, 2.0), "speedup_vs_cublas")
    failed = dict(bf16_row(1.0), triton_status="wrong result")
    assert bench.row_text(failed, "speedup_vs_cublas").endswith("triton wrong result")
    assert "triton" not in bench.row_text(bf16_row(1.0), "speedup_vs_cublas")


@pytest.mark.skipif(bench.torch.cuda.is_available(), reason="checks the exit without a GPU")
@pytest.mark.parametrize("args", [[], ["--fp8"]])
def test_exits_2_without_a_gpu(args):
    env = dict(os.environ, PYTHONPATH=str(BENCHMARKS.parent))   # this checkout's tilejit
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_hopper_gemm.py"), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert "no CUDA GPU" in done.stderr and "Nothing measured" in done.stderr
    assert done.stdout == ""
