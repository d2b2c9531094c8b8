"""Launch overhead on a cache hit, and time to first result in a second process.

    python benchmarks/bench_launch.py                   # both parts
    python benchmarks/bench_launch.py overhead          # µs per no-op launch, with the split
    python benchmarks/bench_launch.py first-result --sizes 256 1024

Overhead: no-op kernels on the CPU target, launched with ``kernel[grid](...)`` after the
first (compiling) launch. Each figure is the per-launch time of the fastest of several
batches (``timeit`` convention: the minimum is the least disturbed by other load). The split
replaces the backend launch with a no-op (the Python side: binding, argument facts, lookup) and
calls the backend's ``module.launch`` alone (argument packing and the native call).

First result: two fresh processes share an empty ``TILEJIT_CACHE_DIR``; the first compiles
the example GEMM, the second finds it on disk. "first result" is the time from after the
imports (torch, ``tilejit.examples``) to the first result; "steady" is a later launch of the
same kernel; their difference is what the first launch costs beyond running: in the second
process, importing the CPU target (llvmlite) and loading the binary. Python's bytecode cache
is on, as it is for users (kept in a temporary folder, ``PYTHONPYCACHEPREFIX``); without
it every import recompiles tilejit's sources and the second process takes ~35 ms longer.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import timeit

import tilejit as tj
from tilejit.runtime import arguments


@tj.kernel
def noop():
    pass


@tj.kernel
def noop_1t(x, n):
    pass


@tj.kernel
def noop_3t(x, y, out, n, BLOCK: tj.constexpr = 1024):
    pass


def per_call_us(fn, number: int = 20000, repeat: int = 15) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def overhead() -> None:
    import numpy
    import torch
    x, y, out = torch.empty(1024), torch.empty(1024), torch.empty(1024)
    arrays = [numpy.empty(1024, numpy.float32) for _ in range(3)]
    cases = [("no arguments", noop, (), {}),
             ("1 tensor + int", noop_1t, (x, 1024), {}),
             ("3 tensors + int + constexpr", noop_3t, (x, y, out, 1024), {"BLOCK": 1024}),
             ("3 numpy arrays + int + constexpr", tj.kernel(noop_3t.fn), (*arrays, 1024),
              {"BLOCK": 1024})]
    print("µs per launch; python = binding + argument facts + lookup (facts: through "
          "arguments.facts; the launcher inlines a torch tensor's, a little cheaper); "
          "native = the JIT'd code called through ctypes")
    print(f"{'no-op kernel':33s} {'total':>7s} {'python':>7s} {'(facts)':>7s} {'backend':>8s} "
          f"{'(native)':>8s}")
    for name, kernel, args, meta in cases:
        print(f"{name:33s}" + "".join(f" {us:7.2f}" for us in _split(kernel, args, meta)))


def _split(kernel, args: tuple, meta: dict) -> tuple[float, ...]:
    """(total, Python side, of which argument facts, backend, of which native call)."""
    kernel[(1,)](*args, **meta)   # compiles
    total = per_call_us(lambda: kernel[(1,)](*args, **meta))
    entry = next(iter(kernel._fast.values()))
    backend = entry.launch
    entry.launch = lambda grid, records: None
    python = per_call_us(lambda: kernel[(1,)](*args, **meta))
    entry.launch = backend
    facts = per_call_us(functools.partial(_facts, args))
    records = tuple(arguments.facts(type(a), arguments.facts_of)(a)[1] for a in args)
    backend_us = per_call_us(lambda: backend((1, 1, 1), records))
    return total, python, facts, backend_us, _native_us(entry.compiled, records)


def _facts(args: tuple) -> None:
    for arg in args:
        arguments.facts(type(arg), arguments.facts_of)(arg)


def _native_us(compiled, records) -> float:
    """The JIT'd ``run_ctas`` called through ctypes with already packed arguments."""
    module = compiled.module
    err, stop = ctypes.create_string_buffer(64 * 8), ctypes.c_int32(0)
    packed = module._pack_records(0, 1, ctypes.addressof(err), ctypes.addressof(stop), 0, 1,
                                  1, (1, 1, 1), records)
    return per_call_us(lambda: module._run_ctas(packed))


GEMM_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
from tilejit.examples import matmul, run_matmul
t1 = time.perf_counter()
n = int(sys.argv[1])
a, b = torch.randn(n, n), torch.randn(n, n)
c = torch.empty(n, n)
t2 = time.perf_counter()
run_matmul(a, b, c)
t3 = time.perf_counter()
run_matmul(a, b, c)
t4 = time.perf_counter()
info = matmul.cache_info()
print(json.dumps({"import_s": t1 - t0, "first_s": t3 - t2, "steady_s": t4 - t3,
                  "compiles": info.compiles, "disk_hits": info.disk_hits,
                  "max_error": float((c - a @ b).abs().max())}))
"""


def first_result(sizes: list[int]) -> None:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"{'GEMM':>10s} {'process':>8s} {'imports':>9s} {'first result':>13s} "
          f"{'steady':>9s} {'load cost':>10s} {'compiles':>8s} {'disk hits':>9s}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            env = {**os.environ, "TILEJIT_CACHE_DIR": os.path.join(scratch, "tilejit"),
                   "PYTHONPYCACHEPREFIX": os.path.join(scratch, "pycache"), "PYTHONPATH": repo}
            for name in ("TILEJIT_ALWAYS_COMPILE", "PYTHONDONTWRITEBYTECODE"):
                env.pop(name, None)
            for process in ("first", "second"):
                done = subprocess.run([sys.executable, "-c", GEMM_CHILD, str(n)], env=env,
                                      capture_output=True, text=True, check=True)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                assert r["max_error"] < 1e-2 * n ** 0.5, r
                print(f"{f'{n}³':>10s} {process:>8s} {r['import_s'] * 1e3:7.0f}ms "
                      f"{r['first_s'] * 1e3:11.1f}ms {r['steady_s'] * 1e3:7.1f}ms "
                      f"{(r['first_s'] - r['steady_s']) * 1e3:8.1f}ms {r['compiles']:8d} "
                      f"{r['disk_hits']:9d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", nargs="?", choices=("overhead", "first-result"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    args = parser.parse_args()
    if args.part in (None, "overhead"):
        overhead()
    if args.part in (None, "first-result"):
        if args.part is None:
            print()
        first_result(args.sizes)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - start:.0f} s)", file=sys.stderr)
