"""Speed of the CPU target against its peers, measured in the same run (issue 5).

    python benchmarks/bench_cpu.py [--quick] [--rounds N]

Prints one table: case, shape, tilejit ms, peer ms, both rates (GB/s or GFLOP/s), the
ratio (peer time / tilejit time: above 1 is faster than the peer), the goal and whether it
is met. Every case runs tilejit and its peer alternately for several rounds (timings by
``tj.testing.do_bench``: median of cache-flushed runs) and keeps each side's best round,
so that load from other processes on the machine hits both alike.

Equal thread counts: tilejit spreads the grid over one worker per core; torch runs with
``torch.set_num_threads(cores)`` and OpenBLAS (numpy.matmul) with threadpoolctl's limit of
the same count. ``numpy.add`` has no thread pool: its row is compared with tilejit on all
cores *and* on one worker. ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` slow OpenBLAS
down when set; this script re-runs itself without them (in its own process only) and says
which kernel OpenBLAS runs. Kernels compile into a fresh temporary cache.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

_OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _reexec_without_openblas_overrides() -> list[str]:
    """Re-run this script without the OpenBLAS overrides (before numpy is imported)."""
    found = [v for v in _OPENBLAS_VARS if v in os.environ]
    if found and not os.environ.get("TILEJIT_BENCH_CHILD"):
        env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_VARS}
        env["TILEJIT_BENCH_CHILD"] = ",".join(found)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    return [v for v in os.environ.get("TILEJIT_BENCH_CHILD", "").split(",") if v]


UNSET = _reexec_without_openblas_overrides()
os.environ["TILEJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilejit-bench-")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tilejit as tj  # noqa: E402
from tilejit.examples import (  # noqa: E402
    matmul,
    row_softmax,
    run_layer_norm,
    run_matmul,
    run_softmax,
    vector_add,
)
from tilejit.knobs import knobs  # noqa: E402

CORES = os.cpu_count() or 1
CASES = ("vector_add", "softmax", "layer_norm", "gemm", "compile", "triton")
GEMM_TILES = (128, 128, 128)
ADD_BLOCK = 1024


# --------------------------------------------------------------------------- machine
def machine() -> list[str]:
    info = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set(info.get("Flags", "").split())
    isa = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                       "avx512_bf16", "avx512_fp16", "amx_tile") if f in flags]
    caches = ", ".join(f"{k.split()[0]} {info[k]}" for k in
                       ("L1d cache", "L2 cache", "L3 cache") if k in info)
    from tilejit.targets import cpu
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}",
        f"cpu: {info.get('Model name', platform.processor())} (family "
        f"{info.get('CPU family', '?')}, model {info.get('Model', '?')}), {CORES} cores, "
        f"{info.get('Thread(s) per core', '?')} thread(s) per core; {caches}",
        f"isa: {' '.join(isa)}; LLVM target {cpu.host_cpu_id()}, vector "
        f"{cpu.CONTEXT.vector_bytes * 8} bits, {cpu.CONTEXT.registers} vector registers",
        f"load average at start: {load}",
        f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"python {platform.python_version()}",
    ]


def threadpool_limit(threads: int):
    """OpenBLAS limited to ``threads`` (a no-op without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def openblas_note() -> tuple[str, object]:
    """(which OpenBLAS kernel runs, a context manager limiting BLAS threads to CORES)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: OpenBLAS threads not pinned", threadpool_limit(CORES)
    blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    kernel = ", ".join(f"OpenBLAS {i.get('version')} kernel {i.get('architecture')}, "
                       f"{i.get('num_threads')} threads by default" for i in blas) or "no OpenBLAS"
    unset = f"; unset for this run: {', '.join(UNSET)}" if UNSET else \
        f"; {' and '.join(_OPENBLAS_VARS)} not set"
    return kernel + unset, threadpool_limit(CORES)


# --------------------------------------------------------------------------- timing
def best_of_rounds(rounds: int, *fns) -> list[float]:
    """For each fn, the best (lowest) of ``rounds`` medians, the fns alternating."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], float(tj.testing.do_bench(fn, warmup=25, rep=150)))
    return best


class Table:
    HEADER = ("case", "shape", "tilejit ms", "peer ms", "tilejit", "peer", "ratio", "goal",
              "met?")

    def __init__(self):
        self.rows: list[tuple] = []

    def add(self, case, shape, tj_ms, peer_ms, unit, amount, goal=None):
        """``amount``: bytes or flops per run; ``goal``: the lowest acceptable ratio (None:
        a row for information)."""
        ratio = peer_ms / tj_ms
        verdict = "-" if goal is None else "yes" if ratio >= goal else "NO"
        self.rows.append((case, shape, f"{tj_ms:.3f}", f"{peer_ms:.3f}",
                          f"{amount / tj_ms / 1e6:.1f} {unit}",
                          f"{amount / peer_ms / 1e6:.1f} {unit}", f"{ratio:.2f}x",
                          "(info)" if goal is None else f">= {goal:.2f}x", verdict))

    def add_text(self, case, shape, text):
        """A row whose measurements are one sentence."""
        self.rows.append((case, shape, text))

    def render(self) -> str:
        widths = [max([len(self.HEADER[i])] + [len(r[i]) for r in self.rows
                                                if len(r) == len(self.HEADER)])
                  for i in range(len(self.HEADER))]
        widths[:2] = [max([widths[i]] + [len(r[i]) for r in self.rows]) for i in range(2)]

        def line(cells):
            return " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
        out = [line(self.HEADER), "-+-".join("-" * w for w in widths)]
        for r in self.rows:
            out.append(line(r) if len(r) == len(self.HEADER) else
                       " | ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2]]))
        return "\n".join(out)


# --------------------------------------------------------------------------- cases
def bench_vector_add(table: Table, n: int, rounds: int, goals: bool) -> None:
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    xn, yn, on = x.numpy(), y.numpy(), out.numpy()
    grid = (tj.cdiv(n, ADD_BLOCK), 1, 1)
    plain = vector_add.warmup(x, y, out, BLOCK=ADD_BLOCK).module
    streaming = vector_add.warmup(x, y, out, BLOCK=ADD_BLOCK, CACHE="stream").module
    all_cores = lambda: vector_add[grid](x, y, out, BLOCK=ADD_BLOCK)  # noqa: E731
    one_core = lambda: plain.launch(grid, [x, y, out], workers=1)  # noqa: E731
    one_core_streaming = lambda: streaming.launch(grid, [x, y, out], workers=1)  # noqa: E731
    for run in (all_cores, one_core_streaming):
        out.zero_()
        run()
        np.testing.assert_allclose(on, xn + yn)
    t_all, t_one, t_stream, t_np = best_of_rounds(
        rounds, all_cores, one_core, one_core_streaming, lambda: np.add(xn, yn, out=on))
    shape = f"2^{n.bit_length() - 1} f32" if n & (n - 1) == 0 else f"{n} f32"
    goal = 0.95 if goals else None
    table.add(f"vector add ({CORES} cores) vs numpy.add", shape, t_all, t_np, "GB/s", 12 * n,
              goal)
    table.add("vector add (1 core) vs numpy.add", shape, t_one, t_np, "GB/s", 12 * n, goal)
    table.add("vector add cache=stream (1 core)", shape, t_stream, t_np, "GB/s", 12 * n)
    torch.set_num_threads(CORES)
    (t_torch,) = best_of_rounds(rounds, lambda: torch.add(x, y, out=out))
    table.add(f"vector add ({CORES} cores) vs torch.add", shape, t_all, t_torch, "GB/s", 12 * n)


@tj.kernel
def native_vector_add(x, y, out, n, BLOCK: tj.constexpr):
    """``out = x + y`` element by element in native code, where every read and write is
    bounds-checked unless ``TILEJIT_BOUNDS_CHECK=0`` (tile primitives never are)."""
    base = tj.cta_id(0) * BLOCK
    for i in range(base, min(base + BLOCK, n)):
        out[i] = x[i] + y[i]


def bench_native_add(table: Table, n: int, rounds: int) -> None:
    """What the default bounds checks cost native element accesses (the peer is the same
    kernel compiled without them)."""
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    grid = (tj.cdiv(n, ADD_BLOCK), 1, 1)
    checked = native_vector_add.warmup(x, y, out, n, BLOCK=ADD_BLOCK).module
    with knobs.scoped(bounds_check=False):
        unchecked = native_vector_add.warmup(x, y, out, n, BLOCK=ADD_BLOCK).module
    runs = [lambda module=module: module.launch(grid, [x, y, out, n])
            for module in (checked, unchecked)]
    for run in runs:
        out.zero_()
        run()
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    t_checked, t_unchecked = best_of_rounds(rounds, *runs)
    table.add("native element add vs BOUNDS_CHECK=0", f"2^{n.bit_length() - 1} f32", t_checked,
              t_unchecked, "GB/s", 12 * n)


def bench_softmax(table: Table, rows: int, cols: int, rounds: int, goals: bool,
                  streaming: bool = False, one_core: bool = False) -> None:
    torch.set_num_threads(CORES)
    x = torch.randn(rows, cols)
    out = torch.empty_like(x)
    run_softmax(x, out)
    torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    # torch.softmax allocates its result on every call, as users call it; the preallocated
    # aten._softmax.out shows the kernels alone.
    preallocated = torch.empty_like(x)
    preallocated_out = lambda: torch.ops.aten._softmax.out(  # noqa: E731
        x, 1, False, out=preallocated)
    t_tj, t_torch, t_out = best_of_rounds(rounds, lambda: run_softmax(x, out),
                                          lambda: torch.softmax(x, 1), preallocated_out)
    shape, amount = f"{rows}x{cols} f32", 8 * rows * cols
    table.add("row softmax vs torch.softmax", shape, t_tj, t_torch, "GB/s", amount,
              1.0 if goals else None)
    table.add("row softmax vs _softmax.out", shape, t_tj, t_out, "GB/s", amount)
    if streaming:   # apart: streaming stores evict `out`, which the other runs find cached
        t_stream, t_out = best_of_rounds(rounds, lambda: run_softmax(x, out, cache="stream"),
                                         preallocated_out)
        table.add("softmax cache=stream vs _softmax.out", shape, t_stream, t_out, "GB/s",
                  amount)
    if one_core:    # the kernels alone, without the second core's share of the machine
        module = row_softmax.warmup(x, out, BM=1, BN=cols).module
        torch.set_num_threads(1)
        t_tj, t_torch = best_of_rounds(rounds, lambda: module.launch((rows, 1, 1), [x, out],
                                                                     workers=1),
                                       lambda: torch.softmax(x, 1))
        torch.set_num_threads(CORES)
        table.add("row softmax, 1 core each", shape, t_tj, t_torch, "GB/s", amount)


def bench_layer_norm(table: Table, rows: int, cols: int, rounds: int, goals: bool,
                     streaming: bool = False) -> None:
    """Layer norm with weight and bias, eps 1e-5, against F.layer_norm (issue 12)."""
    torch.set_num_threads(CORES)
    x, weight, bias = torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)
    out = torch.empty_like(x)
    torch_layer_norm = lambda: torch.nn.functional.layer_norm(  # noqa: E731
        x, (cols,), weight, bias, 1e-5)
    caches = [None, "stream"] if streaming else [None]
    for cache in caches:
        out.zero_()
        run_layer_norm(x, weight, bias, out, cache=cache)
        torch.testing.assert_close(out, torch_layer_norm(), rtol=1e-4, atol=1e-4)
    shape, amount = f"{rows}x{cols} f32", 8 * rows * cols
    for cache in caches:   # apart: streaming stores evict `out`, which the others find cached
        t_tj, t_torch = best_of_rounds(
            rounds, lambda: run_layer_norm(x, weight, bias, out, cache=cache), torch_layer_norm)
        table.add("layer norm vs F.layer_norm" if cache is None else
                  "layer norm cache=stream vs F.layer_norm", shape, t_tj, t_torch, "GB/s",
                  amount, 1.0 if goals and cache is None else None)


def bench_gemm(table: Table, m: int, n: int, k: int, rounds: int, limits, goals: bool,
               one_core: bool = False) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c, c_np = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    run = lambda: run_matmul(a, b, c, *GEMM_TILES)  # noqa: E731
    run()
    with limits:
        np.matmul(a, b, out=c_np)
        np.testing.assert_allclose(c, c_np, rtol=1e-3, atol=1e-3)
        t_tj, t_np = best_of_rounds(rounds, run, lambda: np.matmul(a, b, out=c_np))
    table.add("fp32 GEMM vs numpy.matmul", f"{m}x{n}x{k}", t_tj, t_np, "GFLOP/s",
              2 * m * n * k, 0.5 if goals else None)
    if one_core:
        grid = (tj.cdiv(m, GEMM_TILES[0]), tj.cdiv(n, GEMM_TILES[1]), 1)
        module = matmul.warmup(a, b, c, BM=GEMM_TILES[0], BN=GEMM_TILES[1],
                               BK=GEMM_TILES[2]).module
        with threadpool_limit(1):
            t_tj, t_np = best_of_rounds(rounds, lambda: module.launch(grid, [a, b, c], workers=1),
                                        lambda: np.matmul(a, b, out=c_np))
        table.add("fp32 GEMM, 1 core each", f"{m}x{n}x{k}", t_tj, t_np, "GFLOP/s", 2 * m * n * k)


_COLD_COMPILE = """
import os, sys, time
t0 = time.perf_counter()
import numpy as np, tilejit as tj
from tilejit.examples import matmul
t1 = time.perf_counter()
a = np.zeros((1024, 1024), np.float32)
compiled = matmul.warmup(a, a, a, BM={bm}, BN={bn}, BK={bk})
t2 = time.perf_counter()
assert compiled.dispatch_log and os.listdir(os.environ["TILEJIT_CACHE_DIR"])
print(t1 - t0, t2 - t1)
"""


def bench_cold_compile(table: Table) -> None:
    """Compile the GEMM in a fresh interpreter with an empty cache directory."""
    with tempfile.TemporaryDirectory(prefix="tilejit-cold-") as cache:
        env = {**os.environ, "TILEJIT_CACHE_DIR": cache}
        code = _COLD_COMPILE.format(bm=GEMM_TILES[0], bn=GEMM_TILES[1], bk=GEMM_TILES[2])
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True)
    imports, seconds = map(float, done.stdout.split()[-2:])
    met = "yes" if seconds <= 0.5 else "NO"
    table.add_text("GEMM cold compile", "1024^3 kernel",
                   f"{seconds:.3f} s in a fresh process, empty cache (import of tilejit + numpy "
                   f"before it: {imports:.2f} s); goal <= 0.50 s; met? {met}")


_TRITON_ADD = """
import os, time
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

n = 1 << 20
x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
start = time.perf_counter()
add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
print(time.perf_counter() - start)
"""


def bench_triton(table: Table, rounds: int) -> None:
    n = 1 << 20
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    grid = (tj.cdiv(n, 1024),)
    (t_tj,) = best_of_rounds(rounds, lambda: vector_add[grid](x, y, out, BLOCK=1024))
    import importlib.util
    if importlib.util.find_spec("triton") is None:
        table.add_text("vector add vs Triton interpreter", "2^20 f32, 1024-tiles",
                       f"tilejit {t_tj:.3f} ms; n/a: triton not installed")
        return
    done = subprocess.run([sys.executable, "-c", _TRITON_ADD], capture_output=True, text=True)
    if done.returncode:
        table.add_text("vector add vs Triton interpreter", "2^20 f32, 1024-tiles",
                       f"tilejit {t_tj:.3f} ms; triton failed: {done.stderr.strip()[-200:]}")
        return
    t_triton = float(done.stdout.split()[-1]) * 1e3
    table.add("vector add vs TRITON_INTERPRET=1", "2^20 f32, 1024-tiles", t_tj, t_triton,
              "GB/s", 12 * n, 1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per case")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--only", nargs="*", choices=CASES, metavar="CASE",
                        help=f"run only these cases, of {', '.join(CASES)} (default: all)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    blas, limits = openblas_note()
    for line in machine() + [f"blas: {blas}", f"rounds per case: {rounds}; tilejit workers: "
                             f"{CORES}; GEMM tiles {GEMM_TILES}, vector add BLOCK {ADD_BLOCK}"]:
        print(line, flush=True)
    table = Table()
    goals = not args.quick  # the goals are for the full sizes; --quick only informs
    wanted = set(args.only or CASES)

    def case(name, bench):   # bench(...) runs only where the case was asked for
        return bench if name in wanted else (lambda *a, **k: None)

    bench_vector_add_ = case("vector_add", bench_vector_add)
    bench_native_add_ = case("vector_add", bench_native_add)
    bench_softmax_ = case("softmax", bench_softmax)
    bench_layer_norm_ = case("layer_norm", bench_layer_norm)
    bench_gemm_ = case("gemm", bench_gemm)
    if args.quick:
        bench_vector_add_(table, 1 << 22, rounds, goals)
        bench_native_add_(table, 1 << 22, rounds)
        bench_softmax_(table, 1024, 1024, rounds, goals)
        bench_softmax_(table, 1024, 1000, rounds, goals)
        bench_softmax_(table, 1024, 781, rounds, goals)
        bench_layer_norm_(table, 1024, 1000, rounds, goals)
        bench_layer_norm_(table, 288, 8192, rounds, goals)
        bench_gemm_(table, 512, 512, 512, rounds, limits, goals)
        bench_gemm_(table, 500, 500, 500, rounds, limits, goals)
    else:
        bench_vector_add_(table, 1 << 26, rounds, goals)
        bench_native_add_(table, 1 << 26, rounds)
        bench_softmax_(table, 4096, 4096, rounds, goals, streaming=True)
        bench_softmax_(table, 4096, 1000, rounds, goals, one_core=True)
        bench_softmax_(table, 4096, 781, rounds, goals, one_core=True)
        bench_layer_norm_(table, 4096, 1000, rounds, goals, streaming=True)
        bench_layer_norm_(table, 1151, 8192, rounds, goals)
        bench_gemm_(table, 1024, 1024, 1024, rounds, limits, goals, one_core=True)
        bench_gemm_(table, 1000, 1000, 1000, rounds, limits, goals)
    case("compile", bench_cold_compile)(table)
    case("triton", bench_triton)(table, rounds)
    print()
    print(table.render())
    if args.json:
        with open(args.json, "w") as f:
            json.dump([list(r) for r in table.rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
