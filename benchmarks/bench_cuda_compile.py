"""Cold compile time for sm_90a: tilejit's example GEMM beside Triton compiling a matmul of
its own for the same arch, in one run, on a machine without a GPU (issue 13: goal <= 0.5x
Triton's time).

tilejit: ``matmul.compile(..., target="cuda", arch="sm_90a")`` from TensorSpecs with every
cache ignored (frontend, passes, printing, NVRTC to PTX and CUBIN). Triton:
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` into a fresh cache
directory each time (TTIR, TTGIR, LLVM IR, PTX, ptxas to CUBIN). One compile of each warms
the process up first (imports, LLVM and NVRTC initialisation); then the two compile in turn
``--repeat`` times (so that the load of a shared machine weighs on both alike) and each
figure is the median of its runs. The two kernels are the same problem (C = A @ B, f32
accumulation, 64x64 tiles, K steps of 32, masked edges), written each in its own language;
they are not the same code (Triton's, triton_peers.triton_matmul, shared with
bench_hopper_gemm.py, also numbers its tiles in bands, compiled here with GROUP = 1).
With ``--dtype float32`` (A and B in f32) tilejit's example runs the ``fma`` family over
register-resident accumulators while Triton's ``tl.dot`` uses tf32 tensor cores; with
``--dtype float16`` both use the tensor cores (tilejit's ``mma`` family).

With ``--kernel hopper`` (issue 14's check) tilejit's side is the Hopper GEMM kernel
(``kernels/hopper_gemm``: warp-specialized TMA + wgmma, bf16, 128x128x64 tiles in 4 stages,
8192x4096x4096, persistent) and Triton's the same matmul source in bf16 at Triton's Hopper
config for that tile (8 warps, 4 stages: Triton picks wgmma and its own pipeline for it).

Triton is not a tilejit dependency: install it only in the benchmark's environment, e.g.
``python -m venv --system-site-packages /tmp/tritonenv && /tmp/tritonenv/bin/pip install
triton`` and run this file with that interpreter. Without Triton only tilejit's time prints.

With ``--breakdown`` it also splits one cold compile of tilejit's kernel into its parts: the
pass pipeline re-run on the kernel's printed ``ir`` stage (each pass, and the verifier that
runs after each), printing the CUDA source, and NVRTC's own phases read from its
``-fdevice-time-trace`` (the C++ front end with the headers it parsed, NVVM's optimizer and
code generator, ptxas). Each part is the median of ``--repeat`` runs.

With ``--python-side`` it times tilejit's Python side alone: CPU time
(``time.process_time``, which a loaded machine disturbs less than the wall clock) of whole
compiles with NVRTC memoized (each source compiled once, then looked up), the median of
``--repeat`` after one warm-up.

    python benchmarks/bench_cuda_compile.py [--repeat 5] [--dtype float16] [--breakdown]
                                            [--python-side] [--kernel hopper]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time

import torch

import tilejit as tj
from tilejit.examples import matmul
from tilejit.knobs import knobs
from triton_peers import triton_matmul

GOAL = 0.5
BM, BN, BK = 64, 64, 32


HOPPER_SHAPE = (8192, 4096, 4096)
HOPPER_TILE = dict(block_m=128, block_n=128, block_k=64, stages=4)
TRITON_HOPPER_OPTIONS = {"num_warps": 8, "num_stages": 4}


def tilejit_compile(dtype: str, kernel: str = "example"):
    """A function that compiles tilejit's kernel once, every cache ignored."""
    knobs.always_compile = True
    if kernel == "hopper":
        return _hopper_compile()
    operands = _operands(dtype)
    return lambda: matmul.compile(*operands, BM=BM, BN=BN, BK=BK, target="cuda", arch="sm_90a")


def _hopper_compile():
    from tilejit.kernels.hopper_gemm import hopper_gemm_kernel
    from tilejit.kernels.hopper_gemm_launch import hopper_gemm_config
    m, n, k = HOPPER_SHAPE
    _, options = hopper_gemm_config(torch.empty(m, k, dtype=torch.bfloat16, device="meta"),
                                    torch.empty(k, n, dtype=torch.bfloat16, device="meta"),
                                    ctas=132, **HOPPER_TILE)
    specs = [tj.TensorSpec(shape, tj.bfloat16, device="cuda") for shape in ((m, k), (k, n),
                                                                          (m, n))]
    return lambda: hopper_gemm_kernel.compile(*specs, k, target="cuda", arch="sm_90a",
                                              **options)


def _operands(dtype: str):
    operand = tj.TensorSpec((1024, 1024), getattr(torch, dtype), device="cuda")
    return operand, operand, tj.TensorSpec((1024, 1024), torch.float32, device="cuda")


# NVRTC's trace events (-fdevice-time-trace) that partition its time, in the order they run.
NVRTC_PHASES = {"CUDA C++ Front-End": "NVRTC C++ front end", "Processing Header File":
                "  of which headers", "NVVM Optimizer": "NVVM optimizer",
                "NVVM CodeGen": "NVVM code generation", "Total PTXAS Time": "ptxas (PTX to CUBIN)"}


def nvrtc_phases(source: str, arch: str) -> dict[str, float]:
    """Seconds per NVRTC phase of compiling ``source``, from its own time trace."""
    from tilejit.targets.cuda.nvrtc import compile_cuda
    with tempfile.TemporaryDirectory() as folder:
        trace = os.path.join(folder, "trace.json")
        compile_cuda(source, arch, minimal=True, options=(f"-fdevice-time-trace={trace}",))
        found = [os.path.join(folder, name) for name in os.listdir(folder)]
        with open(found[0]) as f:
            events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X" and e["name"] in NVRTC_PHASES]

    def nested(e) -> bool:   # a header included by another header: counted in that one
        return any(o is not e and o["name"] == e["name"] and o["ts"] <= e["ts"]
                   and e["ts"] + e["dur"] <= o["ts"] + o["dur"] for o in spans)
    seconds = dict.fromkeys(NVRTC_PHASES.values(), 0.0)
    for event in spans:
        if not nested(event):
            seconds[NVRTC_PHASES[event["name"]]] += event["dur"] * 1e-6
    return seconds


def breakdown(repeat: int, dtype: str) -> None:
    """Print one cold compile's parts (see the module docstring)."""
    from tilejit.ir.parser import parse_kernel
    from tilejit.passes.pipeline import run_pipeline
    from tilejit.targets.backend import get_backend
    from tilejit.targets.cuda.emit import CudaPrinter
    knobs.always_compile = True
    compiled = matmul.compile(*_operands(dtype), BM=BM, BN=BN, BK=BK, target="cuda",
                              arch="sm_90a")
    runs: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(repeat):
        start = time.perf_counter()
        lowered, stages = run_pipeline(parse_kernel(compiled.asm["ir"]),
                                       target_passes=get_backend("cuda").passes)
        total = time.perf_counter() - start
        for name, seconds in stages.timings.items():
            runs[f"pass {name}"].append(seconds)
        runs["verifier (after each pass)"].append(total - sum(stages.timings.values()))
        start = time.perf_counter()
        source = CudaPrinter(lowered, "sm_90a").print()
        runs["print CUDA C++"].append(time.perf_counter() - start)
        for name, seconds in nvrtc_phases(source, "sm_90a").items():
            runs[name].append(seconds)
    print(f"one cold compile, by part (median of {repeat}; {source.count(chr(10))} lines of CUDA, "
          f"{compiled.asm['ptx'].count(chr(10))} of PTX):")
    for name, seconds in runs.items():
        print(f"  {name:<36} {statistics.median(seconds) * 1e3:8.1f} ms")


def python_side(repeat: int, dtype: str) -> None:
    """Print the CPU time of tilejit's compile outside NVRTC (see the module docstring)."""
    from unittest import mock

    from tilejit.targets.cuda import nvrtc
    compiled, compile_cuda = {}, nvrtc.compile_cuda

    def memoized(source, arch, **options):
        key = (source, arch, repr(sorted(options.items())))
        if key not in compiled:
            compiled[key] = compile_cuda(source, arch, **options)
        return compiled[key]
    compile_once = tilejit_compile(dtype)
    with mock.patch.object(nvrtc, "compile_cuda", memoized):
        compile_once()
        seconds = []
        for _ in range(repeat):
            start = time.process_time()
            compile_once()
            seconds.append(time.process_time() - start)
    print(f"tilejit's Python side (NVRTC memoized), CPU time: median "
          f"{statistics.median(seconds) * 1e3:.1f} ms, min {min(seconds) * 1e3:.1f} ms "
          f"(of {repeat})")


def triton_compile(dtype: str, kernel: str = "example"):
    """A function that compiles Triton's kernel once into a fresh cache directory; None
    without Triton."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        return None
    hopper = kernel == "hopper"
    operand = "*bf16" if hopper else {"float32": "*fp32", "float16": "*fp16"}[dtype]
    tile = (HOPPER_TILE["block_m"], HOPPER_TILE["block_n"], HOPPER_TILE["block_k"]) if hopper \
        else (BM, BN, BK)
    options = TRITON_HOPPER_OPTIONS if hopper else {}
    kernel = triton_matmul()
    signature = {"a": operand, "b": operand, "c": operand if hopper else "*fp32",
                 **{name: "i32" for name in ("M", "N", "K", "sam", "sak", "sbk", "sbn",
                                             "scm", "scn")},
                 **{name: "constexpr" for name in ("TM", "TN", "TK", "GROUP")}}

    def compile_once():
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-triton-")
        source = ASTSource(kernel, signature, constexprs={"TM": tile[0], "TN": tile[1],
                                                            "TK": tile[2], "GROUP": 1})
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return compile_once


def interleaved_seconds(compilers: list, repeat: int) -> list[float]:
    """The median seconds of each compile function, run in turn ``repeat`` times: on a
    shared machine a change of load then weighs on both sides alike."""
    times: list[list[float]] = [[] for _ in compilers]
    for _ in range(repeat):
        for compile_once, spent in zip(compilers, times):
            start = time.perf_counter()
            compile_once()
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                        help="A and B's dtype (C accumulates in f32)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the parts of one compile (passes, verifier, NVRTC)")
    parser.add_argument("--python-side", action="store_true",
                        help="only time tilejit's Python side (NVRTC memoized), in CPU time")
    parser.add_argument("--kernel", choices=("example", "hopper"), default="example",
                        help="the example matmul (issue 13) or the Hopper GEMM in bf16 "
                             "(issue 14; --dtype does not apply)")
    args = parser.parse_args()
    if args.python_side:
        python_side(args.repeat, args.dtype)
        return
    compilers = [tilejit_compile(args.dtype, args.kernel),
                 triton_compile(args.dtype, args.kernel)]
    compilers = [c for c in compilers if c is not None]
    interleaved_seconds(compilers, 1)       # warm-up
    load = os.getloadavg()[0]
    ours, *theirs = interleaved_seconds(compilers, args.repeat)
    what = "bfloat16 Hopper GEMM" if args.kernel == "hopper" else f"{args.dtype} operands"
    print(f"{what}; load average {load:.2f} -> {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print(f"tilejit matmul -> sm_90a cubin: {ours * 1e3:8.1f} ms (median of {args.repeat})")
    if not theirs:
        print("triton is not installed here: no comparison (see the module docstring)")
    else:
        ratio = ours / theirs[0]
        verdict = "met" if ratio <= GOAL else "NOT met"
        print(f"triton  matmul -> sm_90a cubin: {theirs[0] * 1e3:8.1f} ms (median of "
              f"{args.repeat}, interleaved with tilejit's)")
        print(f"ratio {ratio:.2f} (goal <= {GOAL}: {verdict})")
    if args.breakdown:
        breakdown(args.repeat, args.dtype)


if __name__ == "__main__":
    main()
