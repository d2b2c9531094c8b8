#!/usr/bin/env python3
"""GPU smoke test: NVRTC -> CUBIN for this device's own arch -> driver load -> launch on torch
tensors -> compare with torch; then a tilejit kernel compiled for the cuda target and
launched through the runtime. Prints versions, then a PASS/FAIL table, which also goes to
$GPU_CHECK_REPORT or else $OUT/gpu_check.md. Exit status 1 on any FAIL.

Run through scripts/gpu_check.sh (which sets PYTHONPATH), or: PYTHONPATH=. python3 scripts/gpu_smoke.py
"""
from __future__ import annotations

import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

ROWS: list[tuple[str, str, str]] = []  # (check, PASS/FAIL/WARN/SKIP, detail)
VERSIONS: dict[str, str] = {}

KERNELS = r"""
extern "C" __global__ void axpb(float* out, const float* a, const float* b, float x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * x + b[i];
}
extern "C" __global__ void reverse_smem(float* out, const float* in, int m) {
  extern __shared__ float buf[];
  for (int j = threadIdx.x; j < m; j += blockDim.x) buf[j] = in[blockIdx.x * m + j];
  __syncthreads();
  for (int j = threadIdx.x; j < m; j += blockDim.x) out[blockIdx.x * m + j] = buf[m - 1 - j];
}
"""

HEADERS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halves(__half* h, __nv_bfloat16* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { h[i] = __float2half(0.5f * i); b[i] = __float2bfloat16(0.25f * i); }
}
"""


def check(name: str, warn_only: bool = False):
    """Decorator that runs fn at once as one table row: PASS with the detail it returns,
    FAIL (WARN if warn_only) on an exception, SKIP on _Skip. Later checks read ``state``."""
    def deco(fn):
        t0 = time.perf_counter()
        try:
            detail = fn() or ""
            ROWS.append((name, "PASS", f"{detail} ({time.perf_counter() - t0:.2f} s)"))
            return True
        except _Skip as e:
            ROWS.append((name, "SKIP", str(e)))
        except Exception as e:
            traceback.print_exc()
            msg = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
            ROWS.append((name, "WARN" if warn_only else "FAIL", msg[:400]))
        return False
    return deco


class _Skip(Exception):
    pass


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "not installed"


def main() -> int:
    state: dict = {}
    VERSIONS["python"] = platform.python_version()
    for dist in ("torch", "cuda-python", "cuda-bindings", "cuda-pathfinder", "cuda-core"):
        VERSIONS[dist] = _version(dist)

    @check("torch sees a CUDA device")
    def _():
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        p = torch.cuda.get_device_properties(0)
        VERSIONS["GPU"] = f"{p.name}, cc {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
        VERSIONS["torch CUDA"] = str(torch.version.cuda)
        state["torch"] = torch
        return VERSIONS["GPU"]

    @check("CUDA driver (cuda-python)")
    def _():
        from tilejit.targets.cuda import driver as drv
        maj, mnr = drv.driver_version()
        cap = drv.device_capability(0)
        VERSIONS["driver CUDA version"] = f"{maj}.{mnr}"
        state["arch"] = drv.device_arch(0)
        return f"CUDA {maj}.{mnr}, compute capability {cap[0]}.{cap[1]} -> {state['arch']}"

    @check("NVRTC loads")
    def _():
        from tilejit.targets.cuda import nvrtc
        reason = nvrtc.nvrtc_unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        v = nvrtc.nvrtc_version()
        VERSIONS["NVRTC"] = f"{v[0]}.{v[1]}"
        VERSIONS["CUDA headers"] = ", ".join(nvrtc.cuda_include_dirs()) or "none found"
        return f"NVRTC {v[0]}.{v[1]}, archs up to sm_{max(nvrtc.supported_archs())}"

    @check("NVRTC compiles for the device arch")
    def _():
        from tilejit.targets.cuda.nvrtc import compile_cuda
        arch = state.get("arch") or _from_torch_arch(state)
        prog = compile_cuda(KERNELS, arch, name="gpu_smoke.cu")
        assert f".target {arch}" in prog.ptx, "PTX lacks the target line"
        assert prog.cubin[:4] == b"\x7fELF", "CUBIN is not an ELF"
        state["prog"] = prog
        r = prog.resources()["axpb"]
        return f"{arch}: {len(prog.cubin)} B CUBIN; axpb uses {r.registers} registers"

    @check("CUDA headers (cuda_fp16.h, cuda_bf16.h)")
    def _():
        from tilejit.targets.cuda.nvrtc import compile_cuda
        state["hprog"] = compile_cuda(HEADERS, state.get("arch") or _from_torch_arch(state))
        return "compiled"

    @check("driver loads the CUBIN")
    def _():
        from tilejit.targets.cuda.driver import load_module
        if "prog" not in state:
            raise _Skip("no CUBIN")
        mod = state["mod"] = load_module(state["prog"])
        f = mod["axpb"]
        regs, cubin_regs = f.attribute("NUM_REGS"), state["prog"].resources()["axpb"].registers
        assert regs == cubin_regs, f"driver says {regs} registers, CUBIN says {cubin_regs}"
        return f"axpb: {regs} registers (driver and CUBIN agree)"

    @check("launch axpb, n=1000003 fp32, vs torch")
    def _():
        if "mod" not in state:
            raise _Skip("no module")
        torch = state["torch"]
        n = 1_000_003
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, device="cuda", generator=g)
        b = torch.randn(n, device="cuda", generator=g)
        out = torch.full_like(a, float("nan"))
        state["mod"]["axpb"](out, a, b, 1.75, n, grid=(n + 255) // 256, block=256)
        torch.cuda.synchronize()
        # The kernel fuses a*x+b into one FMA; torch rounds twice: allow ~1 ulp of a*x.
        err = (out - (a * 1.75 + b)).abs().max().item()
        assert err <= 1e-5, f"max abs error {err}"  # NaN (unwritten output) fails here too
        return f"max abs error {err:.2e}"

    @check("launch with 160 KB dynamic shared memory")
    def _():
        if "mod" not in state:
            raise _Skip("no module")
        torch = state["torch"]
        m, blocks = 40_000, 8
        x = torch.randn(blocks * m, device="cuda")
        out = torch.empty_like(x)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            state["mod"]["reverse_smem"](out, x, m, grid=blocks, block=512, shared_mem=4 * m)
        s.synchronize()
        assert torch.equal(out.view(blocks, m), x.view(blocks, m).flip(1)), "wrong result"
        return "side stream, exact"

    @check("launch fp16/bf16 kernel")
    def _():
        if "hprog" not in state:
            raise _Skip("header kernel did not compile")
        from tilejit.targets.cuda.driver import load_module
        torch = state["torch"]
        n = 1000
        h = torch.empty(n, dtype=torch.float16, device="cuda")
        b = torch.empty(n, dtype=torch.bfloat16, device="cuda")
        load_module(state["hprog"])["halves"](h, b, n, grid=4, block=256)
        torch.cuda.synchronize()
        i = torch.arange(n, device="cuda", dtype=torch.float32)
        assert torch.equal(h, (0.5 * i).half()) and torch.equal(b, (0.25 * i).bfloat16())
        return "exact"

    @check("tilejit vector_add: cuda target, runtime launch, vs torch")
    def _():
        if "mod" not in state:
            raise _Skip("the driver could not load a CUBIN")
        import tilejit as tj
        from tilejit.examples.kernels import vector_add
        torch = state["torch"]
        n = 100_003                                  # a ragged last CTA
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.full((n + 5,), float("nan"), device="cuda")
        vector_add[(tj.cdiv(n, 1024),)](x, y, out[:n], BLOCK=1024)
        torch.cuda.synchronize()
        compiled = vector_add.compiled_kernels()[-1]
        assert compiled.target == "cuda", f"ran on {compiled.target}"
        assert torch.equal(out[:n], x + y), "wrong result"
        assert out[n:].isnan().all(), "wrote past the end"
        meta = compiled.metadata
        return f"{meta['cuda_arch']}, {meta['registers']} registers, exact"

    # PTX JIT by the driver works only when the driver is as new as NVRTC: a WARN, not a FAIL.
    @check("driver JIT-compiles NVRTC's PTX", warn_only=True)
    def _():
        if "torch" not in state or "arch" not in state:
            raise _Skip("no GPU / driver")
        from tilejit.targets.cuda.driver import load_module
        from tilejit.targets.cuda.nvrtc import compile_cuda
        torch = state["torch"]
        prog = compile_cuda(KERNELS, state["arch"].replace("sm_", "compute_"))
        f = load_module(prog.ptx)["axpb"]
        n = 1000
        a = torch.randn(n, device="cuda")
        out = torch.empty_like(a)
        f(out, a, a, 2.0, n, grid=4, block=256)
        torch.cuda.synchronize()
        assert torch.allclose(out, 3 * a), "wrong result"
        return f"param sizes {f.param_sizes}"

    return report()


def _from_torch_arch(state) -> str:
    torch = state.get("torch")
    if torch is None:
        raise _Skip("no device arch known")
    from tilejit.targets.cuda.nvrtc import arch_for_capability
    state["arch"] = arch_for_capability(*torch.cuda.get_device_capability(0))
    return state["arch"]


def report() -> int:
    print("\n== versions ==")
    for k, v in VERSIONS.items():
        print(f"{k:20s} {v}")
    lines = ["| check | result | detail |", "| --- | --- | --- |"]
    lines += [f"| {n} | {s} | {d} |" for n, s, d in ROWS]
    table = "\n".join(lines)
    print("\n== gpu_smoke ==\n" + table)
    path = os.environ.get("GPU_CHECK_REPORT") or (
        os.path.join(os.environ["OUT"], "gpu_check.md") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            f.write("# tilejit GPU check\n\n## Versions\n\n")
            f.write("".join(f"- {k}: {v}\n" for k, v in VERSIONS.items()))
            f.write("\n## Checks\n\n" + table + "\n")  # the table ends the file: rows may follow
    return 1 if any(s == "FAIL" for _, s, _ in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
