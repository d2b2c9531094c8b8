#!/usr/bin/env python3
"""GPU benchmark of the example kernels on the cuda target, against what the device and
torch do with the same bytes and FLOPs:

- vector add and row softmax as a fraction of the measured device copy bandwidth (a torch
  device-to-device copy moving the same bytes: read + write);
- the tiled matmul against ``torch.matmul`` (its time over ours: 1.0 means as fast).

Each kernel is checked against torch before it is timed; times are CUDA events around one
launch after warmup, the best of ``--reps``. Each part runs in a child process with its
own time limit (``--part-timeout``), so a hang or a crash fails that part's rows and the
others still run. The table goes to stdout and, as JSON and markdown, to ``--out`` (default
``$OUT``): ``gpu_bench.json``, ``gpu_bench.md``. Exit status 0 only when no row FAILed.

``--compile-only`` compiles every benchmark kernel for ``--arch`` with NVRTC and reports
its registers, spills and shared memory: it needs no GPU (scripts/gpu_check.sh runs the
full benchmark on a GPU machine).

    PYTHONPATH=. python3 scripts/gpu_bench.py --compile-only
    PYTHONPATH=. python3 scripts/gpu_bench.py --out /tmp/bench --reps 20
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

PARTS = ("vector_add", "row_softmax", "matmul")

# (name, shape, dtype): sizes well past the 50 MiB L2, so that bandwidth is HBM's.
SIZES = {
    "vector_add": [((1 << 24,), "float32"), ((1 << 26,), "float32"), ((1 << 26,), "float16")],
    "row_softmax": [((16384, 4096), "float32"), ((65536, 781), "float32"),
                    ((16384, 4096), "float16")],
    "matmul": [((2048, 2048, 2048), "float32"), ((4096, 4096, 4096), "float32")],
}
SMALL = {   # --small: a quick pass of every code path
    "vector_add": [((100_003,), "float32")],
    "row_softmax": [((257, 781), "float32")],
    "matmul": [((200, 136, 72), "float32")],
}
MATMUL_TILES = dict(BM=64, BN=64, BK=32)


def _row(part, case, **fields) -> dict:
    return {"part": part, "case": case, "status": "PASS", "detail": "", **fields}


# ----------------------------------------------------------------------------- one part
def _kernel_and_args(part: str, shape, dtype: str, make):
    """(kernel, grid, args, constexprs, bytes moved, flops, reference fn, outputs check).
    ``make(shape, dtype, kind)`` makes a tensor ("rand", "empty") or a TensorSpec."""
    from tilejit import cdiv
    from tilejit.examples.kernels import matmul, row_softmax, vector_add
    size = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    if part == "vector_add":
        (n,) = shape
        x, y, out = make(shape, dtype, "rand"), make(shape, dtype, "rand"), make(shape, dtype, "empty")
        return (vector_add, (cdiv(n, 1024),), (x, y, out), dict(BLOCK=1024), 3 * n * size, 0,
                lambda: x + y, out)
    if part == "row_softmax":
        rows, cols = shape
        x, out = make(shape, dtype, "rand"), make(shape, dtype, "empty")
        return (row_softmax, (rows,), (x, out), dict(BM=1, BN=cols), 2 * rows * cols * size, 0,
                lambda: _torch().softmax(x.float(), 1).to(x.dtype), out)
    m, n, k = shape
    a, b = make((m, k), dtype, "rand"), make((k, n), dtype, "rand")
    c = make((m, n), "float32", "empty")
    return (matmul, (cdiv(m, MATMUL_TILES["BM"]), cdiv(n, MATMUL_TILES["BN"])), (a, b, c),
            dict(MATMUL_TILES), 0, 2 * m * n * k, lambda: _torch().matmul(a, b).float(), c)


def _torch():
    import torch
    return torch


def _best_ms(fn, warmup: int, reps: int, budget_ms: float = 3000.0) -> float:
    """The best of ``reps`` CUDA-event timings of one ``fn()`` each, after ``warmup`` calls;
    fewer (at least 3) where ``reps`` of them would take more than ``budget_ms``."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(reps):
        if i == 1:
            reps = max(3, min(reps, int(budget_ms / max(best, 1e-3))))
        if i >= reps:
            break
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def run_part(part: str, args) -> list[dict]:
    sizes = (SMALL if args.small else SIZES)[part]
    if args.compile_only:
        return [_compile_row(part, shape, dtype, args.arch) for shape, dtype in sizes]
    torch = _torch()
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False (use --compile-only)")
    gen = torch.Generator(device="cuda").manual_seed(0)

    def make(shape, dtype, kind):
        dt = getattr(torch, dtype)
        if kind == "empty":
            return torch.full(shape, float("nan"), dtype=dt, device="cuda")
        return torch.randn(shape, generator=gen, device="cuda").to(dt)

    rows = []
    for shape, dtype in sizes:
        case = f"{'x'.join(map(str, shape))} {dtype}"
        try:
            rows.append(_measure(part, case, shape, dtype, make, args))
        except Exception as err:   # noqa: BLE001  (a row says what went wrong)
            traceback.print_exc()
            rows.append(_row(part, case, status="FAIL", detail=_one_line(err)))
        torch.cuda.empty_cache()
    return rows


def _measure(part, case, shape, dtype, make, args) -> dict:
    torch = _torch()
    kernel, grid, targs, constexprs, nbytes, flops, reference, out = \
        _kernel_and_args(part, shape, dtype, make)
    t0 = time.perf_counter()
    compiled = kernel.compile(*targs, **constexprs)
    compile_s = time.perf_counter() - t0
    if compiled.target != "cuda":
        raise RuntimeError(f"compiled for {compiled.target!r}, not cuda")
    launch = lambda: kernel[grid](*targs, **constexprs)   # noqa: E731
    launch()
    torch.cuda.synchronize()
    expected = reference()
    tol = {"float32": 1e-4 if part != "matmul" else 2e-3}.get(dtype, 2e-2)
    torch.testing.assert_close(out.float(), expected.float(), rtol=tol, atol=tol)
    ms = _best_ms(launch, args.warmup, args.reps)
    meta = compiled.metadata
    row = _row(part, case, ms=ms, compile_s=round(compile_s, 3), registers=meta.get("registers"),
               spill_bytes=meta.get("spill_bytes"), shared_bytes=meta.get("shared_bytes"),
               arch=meta.get("cuda_arch"))
    if nbytes:
        # The reference: one device-to-device copy that reads and writes nbytes in all.
        elems = nbytes // 2 // 4
        src = torch.randn(elems, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = _best_ms(lambda: dst.copy_(src), args.warmup, args.reps)
        copy_bytes = 2 * elems * 4
        row.update(gbps=nbytes / ms / 1e6, reference="torch d2d copy",
                   reference_ms=copy_ms, reference_gbps=copy_bytes / copy_ms / 1e6)
        row["ratio"] = row["gbps"] / row["reference_gbps"]
        row["detail"] = (f"{row['gbps']:.0f} GB/s = {row['ratio']:.0%} of copy "
                         f"({row['reference_gbps']:.0f} GB/s)")
        del src, dst
    else:
        a, b = targs[0], targs[1]
        ref_ms = _best_ms(lambda: torch.matmul(a, b), args.warmup, args.reps)
        row.update(tflops=flops / ms / 1e9, reference="torch.matmul", reference_ms=ref_ms,
                   reference_tflops=flops / ref_ms / 1e9,
                   tf32=bool(torch.backends.cuda.matmul.allow_tf32))
        row["ratio"] = ref_ms / ms
        row["detail"] = (f"{row['tflops']:.2f} TFLOP/s = {row['ratio']:.2f}x torch.matmul "
                         f"({row['reference_tflops']:.2f} TFLOP/s)")
    return row


def _compile_row(part, shape, dtype, arch) -> dict:
    import tilejit as tj
    case = f"{'x'.join(map(str, shape))} {dtype}"

    def make(shape, dtype, kind):
        return tj.TensorSpec(shape, getattr(tj, dtype), device="cuda")
    try:
        kernel, _, targs, constexprs, *_ = _kernel_and_args(part, shape, dtype, make)
        t0 = time.perf_counter()
        compiled = kernel.compile(*targs, target="cuda", arch=arch, **constexprs)
        meta = compiled.metadata
        return _row(part, case, status="COMPILED", arch=arch,
                    compile_s=round(time.perf_counter() - t0, 3),
                    registers=meta["registers"], spill_bytes=meta["spill_bytes"],
                    shared_bytes=meta["shared_bytes"],
                    detail=f"{meta['registers']} registers, {meta['spill_bytes']} B spilled, "
                           f"{meta['shared_bytes']} B shared")
    except Exception as err:   # noqa: BLE001
        traceback.print_exc()
        return _row(part, case, status="FAIL", arch=arch, detail=_one_line(err))


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".replace("\n", " ").replace("|", "/")[:400]


# ----------------------------------------------------------------------------- the driver
def run_all(args) -> list[dict]:
    """Each part in a child process with its own time limit."""
    rows: list[dict] = []
    for part in args.parts:
        cmd = [sys.executable, os.path.abspath(__file__), "--part", part, "--reps",
               str(args.reps), "--warmup", str(args.warmup), "--arch", args.arch]
        cmd += ["--compile-only"] * args.compile_only + ["--small"] * args.small
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.part_timeout,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                      filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})
        except subprocess.TimeoutExpired as err:
            sys.stderr.write(_text(err.stderr))
            rows.append(_row(part, "(all)", status="FAIL",
                             detail=f"timed out after {args.part_timeout} s"))
            continue
        sys.stderr.write(proc.stderr)
        found = [line for line in proc.stdout.splitlines() if line.startswith("ROWS ")]
        if proc.returncode != 0 or not found:
            last = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            tail = last[0].replace("|", "/")[:300]
            rows.append(_row(part, "(all)", status="FAIL",
                             detail=f"exit status {proc.returncode}: {tail}"))
        if found:
            rows.extend(json.loads(found[-1][5:]))
        print(f"{part}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return rows


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def versions() -> dict:
    info = {"python": sys.version.split()[0]}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info["GPU"] = f"{p.name}, cc {p.major}.{p.minor}, {p.multi_processor_count} SMs"
    except Exception as err:   # noqa: BLE001
        info["torch"] = f"not usable: {_one_line(err)}"
    return info


def markdown(rows: list[dict], info: dict, args) -> str:
    mode = "compile only (no launches)" if args.compile_only else \
        f"CUDA events, best of {args.reps} after {args.warmup} warmup launches"
    lines = ["# tilejit GPU benchmark", "", *(f"- {k}: {v}" for k, v in info.items()),
             f"- timing: {mode}", "",
             "| part | case | result | time (ms) | reference (ms) | ratio | regs | spill B | "
             "shared B | detail |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cells = [r["part"], r["case"], r["status"], _num(r.get("ms")), _num(r.get("reference_ms")),
                 _num(r.get("ratio")), _num(r.get("registers")), _num(r.get("spill_bytes")),
                 _num(r.get("shared_bytes")), r.get("detail", "")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    verdict = "FAIL" if any(r["status"] == "FAIL" for r in rows) else "PASS"
    return "\n".join(lines + ["", f"**Benchmark: {verdict}**", ""])


def _num(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-only", action="store_true",
                        help="compile every benchmark kernel with NVRTC; launch nothing")
    parser.add_argument("--arch", default="sm_90a",
                        help="the arch --compile-only compiles for (launches use the device's)")
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="folder for gpu_bench.json and gpu_bench.md (default: $OUT)")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--reps", type=int, default=20, help="timed launches (the best counts)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="small sizes: a quick pass")
    parser.add_argument("--part-timeout", type=float, default=90.0,
                        help="seconds each part may take (default 90)")
    parser.add_argument("--part", help=argparse.SUPPRESS)   # the child process's part
    args = parser.parse_args(argv)

    if args.part:   # a child: print its rows as one JSON line
        rows = run_part(args.part, args)
        print("ROWS " + json.dumps(rows))
        return 0

    rows = run_all(args)
    info = versions()
    table = markdown(rows, info, args)
    print(table)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpu_bench.json"), "w") as f:
            json.dump({"versions": info, "compile_only": args.compile_only, "reps": args.reps,
                       "warmup": args.warmup, "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
            f.write(table)
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
