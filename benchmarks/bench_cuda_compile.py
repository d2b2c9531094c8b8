"""Cold compile time for sm_90a: tilejit's example GEMM beside Triton compiling a matmul of
its own for the same arch, in one run, on a machine without a GPU (issue 13: goal <= 0.5x
Triton's time).

tilejit: ``matmul.compile(..., target="cuda", arch="sm_90a")`` from TensorSpecs with every
cache ignored (frontend, passes, printing, NVRTC to PTX and CUBIN). Triton:
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` into a fresh cache
directory each time (TTIR, TTGIR, LLVM IR, PTX, ptxas to CUBIN). One compile of each warms
the process up first (imports, LLVM and NVRTC initialisation); the figure is the median of
``--repeat``. The two kernels are the same problem (C = A @ B, f32 accumulation, 64x64
tiles, K steps of 32, masked edges), written each in its own language; they are not the
same code. With ``--dtype float32`` (A and B in f32) tilejit's example runs the ``fma``
family over register-resident accumulators while Triton's ``tl.dot`` uses tf32 tensor
cores; with ``--dtype float16`` both use the tensor cores (tilejit's ``mma`` family).

Triton is not a tilejit dependency: install it only in the benchmark's environment, e.g.
``python -m venv --system-site-packages /tmp/tritonenv && /tmp/tritonenv/bin/pip install
triton`` and run this file with that interpreter. Without Triton only tilejit's time prints.

    python benchmarks/bench_cuda_compile.py [--repeat 5] [--dtype float16]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

import tilejit as tj
from tilejit.examples import matmul
from tilejit.knobs import knobs

GOAL = 0.5
BM, BN, BK = 64, 64, 32


def tilejit_seconds(repeat: int, dtype: str) -> float:
    operand = tj.TensorSpec((1024, 1024), getattr(torch, dtype), device="cuda")
    out = tj.TensorSpec((1024, 1024), torch.float32, device="cuda")
    knobs.always_compile = True
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        matmul.compile(operand, operand, out, BM=BM, BN=BN, BK=BK, target="cuda",
                       arch="sm_90a")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def triton_matmul():
    """Triton's kernel: the same problem, written for this benchmark."""
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
           TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
        rows = tl.program_id(0) * TM + tl.arange(0, TM)
        cols = tl.program_id(1) * TN + tl.arange(0, TN)
        ks = tl.arange(0, TK)
        acc = tl.zeros((TM, TN), dtype=tl.float32)
        for k in range(0, K, TK):
            a_tile = tl.load(a + rows[:, None] * sam + (k + ks)[None, :] * sak,
                             mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
            b_tile = tl.load(b + (k + ks)[:, None] * sbk + cols[None, :] * sbn,
                             mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a_tile, b_tile)
        tl.store(c + rows[:, None] * scm + cols[None, :] * scn, acc,
                 mask=(rows[:, None] < M) & (cols[None, :] < N))
    return mm


def triton_seconds(repeat: int, dtype: str) -> float | None:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        return None
    kernel = triton_matmul()
    operand = {"float32": "*fp32", "float16": "*fp16"}[dtype]
    signature = {"a": operand, "b": operand, "c": "*fp32",
                 **{name: "i32" for name in ("M", "N", "K", "sam", "sak", "sbk", "sbn",
                                             "scm", "scn")},
                 **{name: "constexpr" for name in ("TM", "TN", "TK")}}
    times = []
    for _ in range(repeat):
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-triton-")
        source = ASTSource(kernel, signature, constexprs={"TM": BM, "TN": BN, "TK": BK})
        start = time.perf_counter()
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                        help="A and B's dtype (C accumulates in f32)")
    args = parser.parse_args()
    tilejit_seconds(1, args.dtype)       # warm-up
    triton_seconds(1, args.dtype)
    ours = tilejit_seconds(args.repeat, args.dtype)
    theirs = triton_seconds(args.repeat, args.dtype)
    print(f"{args.dtype} operands")
    print(f"tilejit matmul -> sm_90a cubin: {ours * 1e3:8.1f} ms (median of {args.repeat})")
    if theirs is None:
        print("triton is not installed here: no comparison (see the module docstring)")
        return
    ratio = ours / theirs
    verdict = "met" if ratio <= GOAL else "NOT met"
    print(f"triton  matmul -> sm_90a cubin: {theirs * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"ratio {ratio:.2f} (goal <= {GOAL}: {verdict})")


if __name__ == "__main__":
    main()
