"""kernels.hopper_gemm against torch.matmul (cuBLAS) on the GEMM shapes of the TIRx paper's
Figure 8 (issue 14, "Checks on a GPU"): M = 8192 tokens and the (N, K) of the QKV, O,
gate/up and down projections of four models, bf16.

    OUT=/some/dir python benchmarks/bench_hopper_gemm.py [--repeat 20] [--shapes llama-3.1-8b]

Needs an NVIDIA Hopper GPU (sm_90a); without one it says so and exits with status 2.
Each shape is checked against torch.matmul first (a failing shape is recorded, not timed);
times are CUDA-event medians after warm-up. The results go to $OUT/bench_hopper_gemm.json
(or the working directory) and a table to stdout; the geometric mean of the speed-ups is
issue 14's figure (goal >= 0.9x cuBLAS). No figure of this script has been measured yet.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from tilejit.kernels import hopper_gemm

# (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim) of
# each model's Hugging Face config.json, checked field by field on 2026-12-03 against copies
# of those configs (head_dim where the config omits it: hidden_size / num_attention_heads).
# Gemma-2-27B's head_dim is 128 although 32 x 128 != 4608. gate and up are separate GEMMs of
# N = intermediate (not fused).
MODELS = {
    "llama-3.1-8b": (4096, 14336, 32, 8, 128),
    "llama-3.1-70b": (8192, 28672, 64, 8, 128),
    "qwen3-32b": (5120, 25600, 64, 8, 128),
    "gemma-2-27b": (4608, 36864, 32, 16, 128),
}
M = 8192


def projections(hidden, intermediate, heads, kv_heads, head_dim):
    """The (name, N, K) of a decoder layer's four projection GEMMs (x @ W with W [K, N])."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return [("qkv", q + 2 * kv, hidden), ("o", hidden, q),
            ("gate_up", intermediate, hidden), ("down", hidden, intermediate)]


def median_ms(fn, repeat):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_shape(model, name, n, k, repeat):
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
    row = dict(model=model, projection=name, M=M, N=n, K=k)
    start = time.perf_counter()
    hopper_gemm(a, b, out)                        # the first launch compiles (or hits the cache)
    torch.cuda.synchronize()
    row["first_launch_s"] = time.perf_counter() - start
    expected = torch.matmul(a, b)
    error = ((out.float() - expected.float()).abs().max() / expected.float().abs().max()).item()
    row["max_rel_error"] = error
    if not error < 1e-2:
        row["status"] = "wrong result"
        return row
    row["tilejit_ms"] = median_ms(lambda: hopper_gemm(a, b, out), repeat)
    row["cublas_ms"] = median_ms(lambda: torch.matmul(a, b, out=expected), repeat)
    row["tilejit_tflops"] = 2 * M * n * k / row["tilejit_ms"] / 1e9
    row["speedup_vs_cublas"] = row["cublas_ms"] / row["tilejit_ms"]
    row["status"] = "ok"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", choices=sorted(MODELS), default=sorted(MODELS))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_hopper_gemm: no CUDA GPU (torch.cuda.is_available() is False); this "
              "benchmark needs an sm_90a GPU (H100/H200). Nothing measured.", file=sys.stderr)
        return 2
    capability = torch.cuda.get_device_capability()
    if capability[0] != 9:
        print(f"bench_hopper_gemm: the GPU is sm_{capability[0]}{capability[1]}; the kernel's "
              f"wgmma and TMA need sm_90a (Hopper). Nothing measured.", file=sys.stderr)
        return 2
    rows = []
    for model in args.shapes:
        for name, n, k in projections(*MODELS[model]):
            row = bench_shape(model, name, n, k, args.repeat)
            rows.append(row)
            print(f"{model:14s} {name:8s} N={n:6d} K={k:6d}  " + (
                f"{row['tilejit_ms']:.3f} ms vs cuBLAS {row['cublas_ms']:.3f} ms  "
                f"{row['speedup_vs_cublas']:.2f}x" if row["status"] == "ok" else row["status"]))
    speedups = [r["speedup_vs_cublas"] for r in rows if r["status"] == "ok"]
    geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
    summary = dict(device=torch.cuda.get_device_name(), rows=rows,
                   geomean_speedup_vs_cublas=geomean,
                   wrong=[f"{r['model']}/{r['projection']}" for r in rows
                          if r["status"] != "ok"])
    path = Path(os.environ.get("OUT", ".")) / "bench_hopper_gemm.json"
    path.write_text(json.dumps(summary, indent=2))
    print(f"geomean vs cuBLAS: {geomean}; written to {path}")
    return 0 if not summary["wrong"] else 1


if __name__ == "__main__":
    sys.exit(main())
