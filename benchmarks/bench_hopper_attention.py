"""kernels.hopper_attention against torch.nn.functional.scaled_dot_product_attention (its
flash backend) at sequence lengths 4096 and 16384 (issue 14, "Checks on a GPU": goal
>= 1.0x), bf16, head dims 64 and 128, causal and not.

    OUT=/some/dir python benchmarks/bench_hopper_attention.py [--repeat 10] [--seqs 4096]

Needs an NVIDIA Hopper GPU (sm_90a); without one it says so and exits with status 2.
B * H shrinks as S grows (16 heads at 4k, 4 at 16k, batch 1) so the whole run stays short.
Each case is checked against sdpa first (a wrong case is recorded, not timed); times are
CUDA-event medians after warm-up. The results go to $OUT/bench_hopper_attention.json (or the
working directory) and a table to stdout. No figure of this script has been measured yet.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from tilejit.kernels import hopper_attention
from cuda_timing import median_ms

HEADS = {4096: 16, 16384: 4}     # batch 1: about the same work per sequence length step


def flash_sdpa(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bench_case(seq, dim, causal, repeat):
    heads = HEADS[seq]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, dim, device="cuda", dtype=torch.bfloat16,
                           generator=gen) for _ in range(3))
    row = dict(B=1, H=heads, S=seq, D=dim, causal=causal)
    start = time.perf_counter()
    out = hopper_attention(q, k, v, causal=causal)     # the first launch compiles
    torch.cuda.synchronize()
    row["first_launch_s"] = time.perf_counter() - start
    expected = flash_sdpa(q, k, v, causal)
    row["max_abs_error"] = (out.float() - expected.float()).abs().max().item()
    if not row["max_abs_error"] < 2e-2:
        row["status"] = "wrong result"
        return row
    flops = 4 * heads * seq * seq * dim / (2 if causal else 1)
    row["tilejit_ms"] = median_ms(lambda: hopper_attention(q, k, v, causal=causal), repeat)
    row["sdpa_flash_ms"] = median_ms(lambda: flash_sdpa(q, k, v, causal), repeat)
    row["tilejit_tflops"] = flops / row["tilejit_ms"] / 1e9
    row["sdpa_flash_tflops"] = flops / row["sdpa_flash_ms"] / 1e9
    row["speedup_vs_sdpa"] = row["sdpa_flash_ms"] / row["tilejit_ms"]
    row["status"] = "ok"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--seqs", nargs="*", type=int, choices=sorted(HEADS),
                        default=sorted(HEADS))
    parser.add_argument("--dims", nargs="*", type=int, choices=(64, 128), default=[64, 128])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_hopper_attention: no CUDA GPU (torch.cuda.is_available() is False); "
              "this benchmark needs an sm_90a GPU (H100/H200). Nothing measured.",
              file=sys.stderr)
        return 2
    capability = torch.cuda.get_device_capability()
    if capability[0] != 9:
        print(f"bench_hopper_attention: the GPU is sm_{capability[0]}{capability[1]}; the "
              f"kernel's wgmma and TMA need sm_90a (Hopper). Nothing measured.",
              file=sys.stderr)
        return 2
    rows = []
    print(f"{'S':>6} {'D':>4} {'causal':>6}  {'tilejit ms':>10} {'sdpa ms':>9} "
          f"{'TFLOP/s':>8} {'speed-up':>8}")
    for seq in args.seqs:
        for dim in args.dims:
            for causal in (False, True):
                row = bench_case(seq, dim, causal, args.repeat)
                rows.append(row)
                print(f"{seq:6d} {dim:4d} {str(causal):>6}  " + (
                    f"{row['tilejit_ms']:10.3f} {row['sdpa_flash_ms']:9.3f} "
                    f"{row['tilejit_tflops']:8.1f} {row['speedup_vs_sdpa']:7.2f}x"
                    if row["status"] == "ok" else
                    f"{row['status']} (max abs error {row['max_abs_error']:.3g})"), flush=True)
    summary = dict(device=torch.cuda.get_device_name(), rows=rows,
                   wrong=[f"S={r['S']} D={r['D']} causal={r['causal']}" for r in rows
                          if r["status"] != "ok"])
    path = Path(os.environ.get("OUT", ".")) / "bench_hopper_attention.json"
    path.write_text(json.dumps(summary, indent=2))
    print(f"written to {path}")
    return 0 if not summary["wrong"] else 1


if __name__ == "__main__":
    sys.exit(main())
