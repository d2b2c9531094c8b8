"""kernels.hopper_gemm against torch.matmul (cuBLAS) on the GEMM shapes of the TIRx paper's
Figure 8 (issue 14, "Checks on a GPU"): M = 8192 tokens and the (N, K) of the QKV, O,
gate/up and down projections of four models, bf16; with ``--fp8``, kernels.fp8_gemm on the
same shapes (e4m3 operands, bf16 C) against ``torch._scaled_mm`` with per-tensor scales:
first per-tensor against per-tensor, then our block scales (1 x 128 / 128 x 128) against
the same per-tensor torch figure (torch's per-tensor call does less work: its ratio is a
lower bound of a like-for-like one), then per tensor with an e5m2 B (e4m3 A: the mix fp8
training multiplies gradients in; cuBLASLt takes no e5m2 by e5m2) on the first model's
shapes only (the rows check the operand kind, a kernel build of its own, not the schedule
the e4m3 rows time), where torch._scaled_mm takes that pair (else the summary's "e5m2"
says why not). Both run on B as _scaled_mm takes it, column-major [K, N]: ours through
``kernels.scaled_mm``, which reads it as its [N, K] row-major view (no copy). torch runs
with ``use_fast_accum=True``: like our
kernel, it keeps the whole K sum in the tensor cores' accumulator (the faster of its two
modes, so the ratio is not flattered). Where ``import triton`` works, bf16 rows also time
a Triton matmul written for this project (benchmarks/triton_peers.py, its tile config
autotuned per shape among configs for H100/H200), checked against torch.matmul first like
ours; the summary says "triton not importable" otherwise.

    OUT=/some/dir python benchmarks/bench_hopper_gemm.py [--repeat 20] [--shapes llama-3.1-8b]
    OUT=/some/dir python benchmarks/bench_hopper_gemm.py --fp8

Needs an NVIDIA Hopper GPU (sm_90a); without one it says so and exits with status 2.
Each shape is checked against torch.matmul first (a failing shape is recorded, not timed);
times are CUDA-event medians after warm-up. hopper_gemm picks its tile config by autotuning
per (M, N, K) bucket on the first launch; each row records the winner ("config"). The results go to $OUT/bench_hopper_gemm.json
($OUT/bench_fp8_gemm.json with --fp8; or the working directory; rewritten after each shape,
so a run stopped early keeps what it measured) and a table to stdout; the geometric mean of
the speed-ups is issue 14's figure (goal >= 0.9x cuBLAS and >= 1.0x Triton, >= 0.9x
torch._scaled_mm for fp8). No figure of this script has been measured yet.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from tilejit.kernels import hopper_gemm, scaled_mm
from tilejit.kernels.hopper_gemm import hopper_gemm_autotuner
from triton_peers import triton_importable, triton_matmul_launcher
from cuda_timing import median_ms

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
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_NAMES = {E4M3: "e4m3", E5M2: "e5m2"}


def projections(hidden, intermediate, heads, kv_heads, head_dim):
    """The (name, N, K) of a decoder layer's four projection GEMMs (x @ W with W [K, N])."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return [("qkv", q + 2 * kv, hidden), ("o", hidden, q),
            ("gate_up", intermediate, hidden), ("down", hidden, intermediate)]


def relative_error(out, expected):
    return ((out.float() - expected.float()).abs().max() / expected.float().abs().max()).item()


def bench_shape(model, name, n, k, repeat, triton_launch):
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
    row = dict(model=model, projection=name, M=M, N=n, K=k)
    start = time.perf_counter()
    hopper_gemm(a, b, out)      # the first launch of a shape bucket times every tile config
    torch.cuda.synchronize()    # (compiling each, or reusing the cache's timings)
    row["first_launch_s"] = time.perf_counter() - start
    row["config"] = str(hopper_gemm_autotuner.best_config)     # the bucket's winner
    expected = torch.matmul(a, b)
    error = relative_error(out, expected)
    row["max_rel_error"] = error
    if not error < 1e-2:
        row["status"] = "wrong result"
        return row
    row["tilejit_ms"] = median_ms(lambda: hopper_gemm(a, b, out), repeat)
    if triton_launch is not None:
        bench_triton(row, triton_launch, a, b, expected, repeat)
    row["cublas_ms"] = median_ms(lambda: torch.matmul(a, b, out=expected), repeat)
    row["tilejit_tflops"] = 2 * M * n * k / row["tilejit_ms"] / 1e9
    row["speedup_vs_cublas"] = row["cublas_ms"] / row["tilejit_ms"]
    row["status"] = "ok"
    return row


def bench_triton(row, launch, a, b, expected, repeat):
    """The Triton column of a bf16 row: its first launch autotunes the tile config; its
    result is checked against torch.matmul before it is timed. A Triton failure is recorded
    in the row (``triton_status``): the peer is not the kernel under test."""
    out = torch.empty_like(expected)
    try:
        launch(a, b, out)
        torch.cuda.synchronize()
    except Exception as error:      # a Triton compile or launch error, whatever its class
        row["triton_status"] = f"error: {type(error).__name__}: {error}"[:300]
        return
    row["triton_config"] = str(launch.kernel.best_config)
    row["triton_max_rel_error"] = relative_error(out, expected)
    if not row["triton_max_rel_error"] < 1e-2:
        row["triton_status"] = "wrong result"
        return
    row["triton_ms"] = median_ms(lambda: launch(a, b, out), repeat)
    row["speedup_vs_triton"] = row["triton_ms"] / row["tilejit_ms"]
    row["triton_status"] = "ok"


def scaled_mm_refusal(a_type, b_type):
    """None where torch._scaled_mm multiplies an ``a_type`` A by a ``b_type`` B on this GPU
    (tried on a 16 x 32 x 16 product), else its reason."""
    one = torch.ones((), device="cuda")
    a = torch.zeros(16, 32, device="cuda").to(a_type)
    b = torch.zeros(16, 32, device="cuda").to(b_type).T
    try:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except Exception as error:      # torch's checks raise RuntimeError, TypeError, ValueError
        return f"torch._scaled_mm refuses {a_type} x {b_type}: {error}"[:300]
    return None


def bench_fp8_shape(model, name, n, k, repeat, scaling, b_type=E4M3):
    """fp8_gemm (by ``scaled_mm``) with ``scaling`` ("tensor" or "block") against
    torch._scaled_mm per tensor, A e4m3 and B of ``b_type``, B column-major [K, N] for both;
    checked first against an f32 reference on 256 rows (the whole [M, K] in f32 would be
    large at K = 28672)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, k, device="cuda", generator=gen).to(E4M3)
    b = torch.randn(n, k, device="cuda", generator=gen).to(b_type).T   # [K, N] column-major
    one_a, one_b = (torch.tensor(s, device="cuda") for s in (0.5, 0.25))
    if scaling == "tensor":
        scale_a, scale_b = one_a, one_b
        factor_a = scale_a.expand(M, k)
        factor_b = scale_b.expand(k, n)
    else:
        blocks = math.ceil(k / 128)
        scale_a = torch.rand(M, blocks, device="cuda", generator=gen) + 0.5
        scale_b = torch.rand(math.ceil(n / 128), blocks, device="cuda", generator=gen) + 0.5
        factor_a = scale_a.repeat_interleave(128, 1)[:, :k]
        factor_b = scale_b.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k].T
    out = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
    row = dict(model=model, projection=name, scaling=scaling, M=M, N=n, K=k,
               b_type=FP8_NAMES[b_type])
    start = time.perf_counter()
    scaled_mm(a, b, scale_a, scale_b, out=out)     # the first launch compiles (or hits the cache)
    torch.cuda.synchronize()
    row["first_launch_s"] = time.perf_counter() - start
    rows = torch.arange(0, M, M // 256, device="cuda")
    expected = (a[rows].float() * factor_a[rows]) @ (b.float() * factor_b)
    error = ((out[rows].float() - expected).abs().max() / expected.abs().max()).item()
    row["max_rel_error"] = error
    if not error < 1e-2:
        row["status"] = "wrong result"
        return row
    torch_out = torch.empty_like(out)
    row["tilejit_ms"] = median_ms(lambda: scaled_mm(a, b, scale_a, scale_b, out=out), repeat)
    row["torch_ms"] = median_ms(lambda: torch._scaled_mm(
        a, b, scale_a=one_a, scale_b=one_b, out_dtype=torch.bfloat16, use_fast_accum=True,
        out=torch_out), repeat)
    row["tilejit_tflops"] = 2 * M * n * k / row["tilejit_ms"] / 1e9
    row["speedup_vs_torch"] = row["torch_ms"] / row["tilejit_ms"]
    row["status"] = "ok"
    return row


# (the rows' kind, their speed-up) -> the name of its geometric mean
GEOMEANS = {("bf16", "speedup_vs_cublas"): "geomean_speedup_vs_cublas",
            ("bf16", "speedup_vs_triton"): "geomean_speedup_vs_triton",
            ("tensor", "speedup_vs_torch"): "geomean_tensor_vs_scaled_mm",
            ("block", "speedup_vs_torch"): "geomean_block_vs_per_tensor_scaled_mm",
            ("tensor e5m2", "speedup_vs_torch"): "geomean_e5m2_tensor_vs_scaled_mm"}


def row_kind(row):
    """bf16, or an fp8 row's scaling, with " e5m2" where B is e5m2 (a figure of its own)."""
    return row.get("scaling", "bf16") + (" e5m2" if row.get("b_type") == "e5m2" else "")


def geomeans(rows):
    """Issue 14's figures: the geometric mean of each speed-up over the rows that have it."""
    groups = {}
    for row in rows:
        for (kind, ratio), name in GEOMEANS.items():
            if row["status"] == "ok" and row_kind(row) == kind and ratio in row:
                groups.setdefault(name, []).append(row[ratio])
    return {name: math.exp(sum(map(math.log, values)) / len(values))
            for name, values in groups.items()}


def row_text(row, ratio):
    reference = row.get("torch_ms", row.get("cublas_ms"))
    return (f"{row['model']:14s} {row['projection']:8s} {row_kind(row):11s} "
            f"N={row['N']:6d} K={row['K']:6d}  " +
            (f"{row['tilejit_ms']:.3f} ms vs {reference:.3f} ms  {row[ratio]:.2f}x"
             if row["status"] == "ok" else row["status"]) +
            (f"  [{row['config']}]" if "config" in row else "") +
            (f"  triton {row['triton_ms']:.3f} ms {row['speedup_vs_triton']:.2f}x"
             f" [{row['triton_config']}]" if row.get("triton_status") == "ok" else
             f"  triton {row['triton_status']}" if "triton_status" in row else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--fp8", action="store_true",
                        help="fp8_gemm (per-tensor and block scales) against torch._scaled_mm")
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
    name = "bench_fp8_gemm" if args.fp8 else "bench_hopper_gemm"
    path = Path(os.environ.get("OUT", ".")) / f"{name}.json"
    cases = [(model, *shape) for model in args.shapes for shape in projections(*MODELS[model])]
    ratio = "speedup_vs_torch" if args.fp8 else "speedup_vs_cublas"
    rows, summary = [], dict(device=torch.cuda.get_device_name())
    if args.fp8:
        first_model = [case for case in cases if case[0] == args.shapes[0]]
        cases = [case + (scaling, E4M3) for scaling in ("tensor", "block") for case in cases]
        refusal = scaled_mm_refusal(E4M3, E5M2)
        summary["e5m2"] = refusal or f"e4m3 x e5m2 per tensor on {args.shapes[0]}'s shapes"
        if refusal is None:
            cases += [case + ("tensor", E5M2) for case in first_model]
    triton_launch = None
    if not args.fp8:
        importable = triton_importable()
        summary["triton"] = "importable" if importable else "triton not importable"
        triton_launch = triton_matmul_launcher() if importable else None
    for case in cases:
        row = (bench_fp8_shape(*case[:4], args.repeat, *case[4:]) if args.fp8 else
               bench_shape(*case, args.repeat, triton_launch))
        rows.append(row)
        print(row_text(row, ratio))
        summary.update(rows=rows, wrong=[f"{r['model']}/{r['projection']}" for r in rows
                                         if r["status"] != "ok"], **geomeans(rows))
        path.write_text(json.dumps(summary, indent=2))
    if args.fp8:
        print(f"e5m2 rows: {summary['e5m2']}")
    print(f"geomeans: { {k: v for k, v in summary.items() if k.startswith('geomean')} }; "
          f"written to {path}")
    return 0 if not summary["wrong"] else 1


if __name__ == "__main__":
    sys.exit(main())
