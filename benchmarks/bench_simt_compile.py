"""Cold compile time of the examples, team_once (the CPU's own lowering) beside per-thread
(SIMT) mode, in one run.

Each compile ignores every cache (``TILEJIT_ALWAYS_COMPILE``): frontend, passes, LLVM and
object code. One compile of each kind warms the process up first (imports, LLVM
initialisation); the figure is the median of ``--repeat`` compiles. Issue 11, item 6 asks
that per-thread mode cost at most 1.5x team_once.

    python benchmarks/bench_simt_compile.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from tilejit.examples import layer_norm, matmul, row_softmax, vector_add
from tilejit.knobs import knobs

GOAL = 1.5


def cases():
    """(name, kernel, args, constexprs) with the shapes the examples' run_* helpers pick."""
    x1, m = torch.empty(1 << 20), torch.empty(4096, 1024)
    w = torch.empty(1024)
    a, b, c = torch.empty(512, 512), torch.empty(512, 512), torch.empty(512, 512)
    return [
        ("vector_add", vector_add, (x1, x1, x1), {"BLOCK": 1024}),
        ("row_softmax", row_softmax, (m, m), {"BM": 1, "BN": 1024}),
        ("layer_norm", layer_norm, (m, w, w, m, 1e-5), {"N": 1024, "BM": 1, "BLOCK": 1024}),
        ("matmul", matmul, (a, b, c), {"BM": 128, "BN": 128, "BK": 128}),
    ]


def compile_seconds(kernel, args, constexprs, simt: bool, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        kernel.compile(*args, simt=simt, **constexprs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    knobs.always_compile = True
    for name, kernel, targs, constexprs in cases()[:1]:   # warm-up
        compile_seconds(kernel, targs, constexprs, False, 1)
        compile_seconds(kernel, targs, constexprs, True, 1)
    print(f"{'example':<12} {'team_once ms':>13} {'per-thread ms':>14} {'ratio':>6}")
    worst = 0.0
    for name, kernel, targs, constexprs in cases():
        once = compile_seconds(kernel, targs, constexprs, False, args.repeat)
        simt = compile_seconds(kernel, targs, constexprs, True, args.repeat)
        worst = max(worst, simt / once)
        print(f"{name:<12} {once * 1e3:13.1f} {simt * 1e3:14.1f} {simt / once:6.2f}")
    verdict = "met" if worst <= GOAL else "NOT met"
    print(f"worst ratio {worst:.2f} (goal <= {GOAL}: {verdict})")


if __name__ == "__main__":
    main()
