"""The cuda target end to end: a representative set of kernels (masks, reductions and a
scan, shared memory with ``tj.sync``, atomics, a while loop, f16/bf16 casts, ragged
shapes, the examples) compiled for sm_80 and sm_90a, and launched on a GPU.

Without a GPU (NVRTC compiles anywhere):

- every kernel compiles for both archs, with no spills, and its PTX has the instructions
  that matter (``bar.sync``, ``atom``, ``cvt`` ...);
- *one lowering, two consumers*: the per-thread IR the cuda target prints as CUDA C++
  (``compiled.asm["lowered"]``) is exactly the IR the CPU runs in SIMT mode
  (``simt=True``), and the CPU's run of it matches torch.

On a GPU (``-m gpu``, run by scripts/gpu_check.sh): each kernel launched on cuda tensors
with random non-zero data and ragged edges, in each dtype it supports, against torch,
with a guard band around every output that must stay untouched.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

import tilejit as tj
from support.gpu import needs_gpu, needs_nvrtc
from tilejit.examples.kernels import layer_norm, matmul, vector_add
from tilejit.knobs import knobs
from tilejit.passes.dispatch import register_target
from tilejit.targets.backend import get_backend

ARCHS = ("sm_80", "sm_90a")
THREADS = 128   # num_warps = 4, the default

# The cuda target has one lowering; the CPU runs are simt=True where they stand for it.
pytestmark = pytest.mark.team_once_only("compiles for cuda, whose lowering is per_thread")



# --------------------------------------------------------------------------- the kernels
@tj.kernel
def masked_add(x, y, out, n, BLOCK: tj.constexpr):
    """A Triton-style mask from ``tj.arange``; the fragments have the tensors' dtype."""
    base = tj.cta_id(0) * BLOCK
    mask = base + tj.arange(0, BLOCK) < n
    a = tj.fragment((BLOCK,), x.dtype)
    b = tj.fragment((BLOCK,), y.dtype)
    tj.copy(a, x[base:base + BLOCK], mask=mask, other=0.0)
    tj.copy(b, y[base:base + BLOCK], mask=mask, other=0.0)
    tj.copy(out[base:base + BLOCK], a + b, mask=mask)


@tj.kernel
def masked_softmax(x, out, n_cols, BM: tj.constexpr, BN: tj.constexpr):
    """Rows of ``n_cols`` in a wider power-of-two tile, masked with ``-inf``; f32 inside."""
    row0 = tj.program_id(0) * BM
    mask = tj.arange(0, BN)[None, :] < n_cols
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[row0:row0 + BM, 0:BN], mask=mask, other=float("-inf"))
    e = tj.exp(t - tj.max(t, axis=1, keep_dims=True))
    tj.copy(out[row0:row0 + BM, 0:BN], e / tj.sum(e, axis=1, keep_dims=True), mask=mask)


@tj.kernel
def row_stats(x, best, total, csum, BM: tj.constexpr, BN: tj.constexpr):
    """argmax, sum and cumsum of each row (rows past the tensor's end are skipped)."""
    row0 = tj.program_id(0) * BM
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[row0:row0 + BM, 0:BN], other=float("-inf"))
    tj.copy(best[row0:row0 + BM], tj.argmax(t, axis=1))
    u = tj.fragment((BM, BN), tj.float32)
    tj.copy(u, x[row0:row0 + BM, 0:BN])
    tj.copy(total[row0:row0 + BM], tj.sum(u, axis=1))
    tj.copy(csum[row0:row0 + BM, 0:BN], tj.cumsum(u, axis=1))


@tj.kernel
def reverse_shared(x, out, n, BLOCK: tj.constexpr):
    """Each CTA reverses its BLOCK elements through shared memory: element writes, a CTA
    barrier, element reads of what other threads wrote."""
    t = tj.thread_id()
    base = tj.cta_id(0) * BLOCK
    buf = tj.alloc_shared((BLOCK,), x.dtype)
    for j in range(t, BLOCK, 128):
        if base + j < n:
            buf[j] = x[base + j]
    tj.sync()
    for j in range(t, BLOCK, 128):
        src = BLOCK - 1 - j
        if base + src < n and base + j < n:
            out[base + j] = buf[src]


@tj.kernel
def histogram(x, hist, n, BINS: tj.constexpr, PER_THREAD: tj.constexpr):
    """Shared-memory atomics per CTA, then global atomics of the CTA's bins."""
    t = tj.thread_id()
    local = tj.alloc_shared((BINS,), tj.int32)
    if t < BINS:
        local[t] = 0
    tj.sync()
    base = (tj.cta_id(0) * 128 + t) * PER_THREAD
    for k in range(PER_THREAD):
        if base + k < n:
            tj.atomic_add(local[x[base + k]], 1)
    tj.sync()
    if t < BINS:
        tj.atomic_add(hist[t], local[t])


@tj.kernel
def split_k_gemm(a, b, c, K, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                 SPLIT: tj.constexpr):
    """A tile gemm over this CTA's share of K, added into C with a tile atomic (f32)."""
    pm, pn, part = tj.cta_id(0), tj.cta_id(1), tj.cta_id(2)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    ta = tj.fragment((BM, BK), tj.float32)
    tb = tj.fragment((BK, BN), tj.float32)
    for k in range(part * BK, K, SPLIT * BK):
        tj.copy(ta, a[pm * BM:pm * BM + BM, k:k + BK])
        tj.copy(tb, b[k:k + BK, pn * BN:pn * BN + BN])
        tj.gemm(acc, ta, tb)
    tj.atomic_add(c[pm * BM:pm * BM + BM, pn * BN:pn * BN + BN], acc)


@tj.kernel
def collatz(x, steps, n):
    """A data-dependent while loop per thread (divergent trip counts within a warp)."""
    i = tj.cta_id(0) * 128 + tj.thread_id()
    if i < n:
        v = x[i]
        k = 0
        while v != 1:
            if v % 2 == 0:
                v = v // 2
            else:
                v = 3 * v + 1
            k += 1
        steps[i] = k


@tj.kernel
def casts(x, lo, out, BLOCK: tj.constexpr):
    """f32 -> ``lo.dtype`` (f16 / bf16) rounding, and back, through tiles."""
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), tj.float32)
    tj.copy(a, x[base:base + BLOCK])
    tj.copy(lo[base:base + BLOCK], tj.cast(a * 2.0, lo.dtype))
    b = tj.fragment((BLOCK,), lo.dtype)
    tj.copy(b, lo[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], tj.cast(b, tj.float32) + a)


# --------------------------------------------------------------------------- the cases
def rand(shape, dtype, gen, device, low=-4.0, high=4.0):
    """Random values in [low, high), none of them zero, rounded to ``dtype``."""
    v = torch.rand(shape, generator=gen, dtype=torch.float64) * (high - low) + low
    v[v == 0] = 0.5
    return v.to(dtype).to(device)


def guarded(shape, dtype, device, pad=3, fill=7):
    """(out, whole): ``out`` is a ``shape`` view inside ``whole``, which holds ``fill``
    everywhere, so that a check sees any write past ``out``'s edges."""
    whole = torch.full(tuple(n + pad for n in shape), fill, dtype=torch.float64).to(dtype)
    whole = whole.to(device)
    return whole[tuple(slice(0, n) for n in shape)], whole


def untouched(whole, shape, fill=7):
    outside = torch.ones(whole.shape, dtype=torch.bool, device=whole.device)
    outside[tuple(slice(0, n) for n in shape)] = False
    assert torch.all(whole.double()[outside] == fill), "a write past the output's edge"


def close(got, expected, dtype):
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(got.double(), expected.double(), rtol=tol, atol=tol)


@dataclass
class Case:
    """One kernel launch: ``build(dtype, gen, device)`` returns (args, grid, constexprs,
    check), ``check()`` compares the outputs with torch after the launch."""
    name: str
    kernel: object
    dtypes: tuple
    build: Callable
    ptx: tuple = ()          # instructions its PTX must hold (on both archs)

    def __repr__(self):
        return self.name


def _masked_add(dtype, gen, dev, n=1000):
    x, y = rand(n, dtype, gen, dev), rand(n, dtype, gen, dev)
    out, whole = guarded((n,), dtype, dev)

    def check():
        close(out, x + y, dtype)
        untouched(whole, (n,))
    return (x, y, out, n), (tj.cdiv(n, 256),), dict(BLOCK=256), check


def _masked_softmax(dtype, gen, dev, rows=37, cols=781):
    x = rand((rows, cols), dtype, gen, dev)
    out, whole = guarded((rows, cols), dtype, dev)

    def check():
        close(out, torch.softmax(x.double(), 1), dtype)
        untouched(whole, (rows, cols))
    return (x, out, cols), (tj.cdiv(rows, 2),), dict(BM=2, BN=1024), check


def _row_stats(dtype, gen, dev, rows=37, cols=100):
    x = rand((rows, cols), dtype, gen, dev)
    best, wb = guarded((rows,), torch.int32, dev)
    total, wt = guarded((rows,), torch.float32, dev)
    csum, wc = guarded((rows, cols), torch.float32, dev)

    def check():
        assert torch.equal(best.long(), x.float().argmax(1))
        torch.testing.assert_close(total.double(), x.double().sum(1), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(csum.double(), x.double().cumsum(1), rtol=1e-5, atol=1e-4)
        for whole, shape in ((wb, (rows,)), (wt, (rows,)), (wc, (rows, cols))):
            untouched(whole, shape)
    return (x, best, total, csum), (tj.cdiv(rows, 4),), dict(BM=4, BN=cols), check


def _reverse_shared(dtype, gen, dev, n=1000, block=512):
    x = rand(n, dtype, gen, dev, low=1, high=100) if dtype.is_floating_point else \
        torch.randint(1, 100, (n,), generator=gen).to(dtype).to(dev)
    out, whole = guarded((n,), dtype, dev)

    def check():
        i = torch.arange(n, device=dev)
        src = i // block * block + block - 1 - i % block   # the element each one gets
        keep = src < n                                     # the last CTA's, partly
        assert torch.equal(out[keep], x[src[keep]])
        assert torch.all(out[~keep].double() == 7)         # left alone
        untouched(whole, (n,))
    return (x, out, n), (tj.cdiv(n, block),), dict(BLOCK=block), check


def _histogram(dtype, gen, dev, n=4097, bins=10):
    x = torch.randint(0, bins, (n,), generator=gen, dtype=torch.int32).to(dev)
    hist = torch.zeros(bins, dtype=torch.int32, device=dev)

    def check():
        assert torch.equal(hist.cpu(), torch.bincount(x.cpu(), minlength=bins).int())
    return (x, hist, n), (tj.cdiv(n, THREADS * 8),), dict(BINS=bins, PER_THREAD=8), check


def _split_k(dtype, gen, dev, m=40, k=50, n=30):
    a, b = rand((m, k), dtype, gen, dev), rand((k, n), dtype, gen, dev)
    c = torch.zeros(m, n, dtype=dtype, device=dev)

    def check():
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
    return (a, b, c, k), (tj.cdiv(m, 16), tj.cdiv(n, 16), 2), \
        dict(BM=16, BN=16, BK=8, SPLIT=2), check


def _collatz_ref(v: int) -> int:
    k = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        k += 1
    return k


def _collatz(dtype, gen, dev, n=1000):
    x = torch.randint(1, 10_000, (n,), generator=gen).to(dtype).to(dev)
    steps, whole = guarded((n,), torch.int32, dev)

    def check():
        expected = torch.tensor([_collatz_ref(v) for v in x.tolist()], dtype=torch.int32)
        assert torch.equal(steps.cpu(), expected)
        untouched(whole, (n,))
    return (x, steps, n), (tj.cdiv(n, THREADS),), {}, check


def _casts(dtype, gen, dev, n=1000):
    x = rand(n, torch.float32, gen, dev)
    lo, wl = guarded((n,), dtype, dev)
    out, wo = guarded((n,), torch.float32, dev)

    def check():
        assert torch.equal(lo, (x * 2).to(dtype))   # one round to nearest even, as torch
        assert torch.equal(out, (x * 2).to(dtype).float() + x)
        untouched(wl, (n,))
        untouched(wo, (n,))
    return (x, lo, out), (tj.cdiv(n, 256),), dict(BLOCK=256), check


def _vector_add(dtype, gen, dev, n=100_003):
    x, y = rand(n, dtype, gen, dev), rand(n, dtype, gen, dev)
    out, whole = guarded((n,), dtype, dev)

    def check():
        close(out, x + y, dtype)
        untouched(whole, (n,))
    return (x, y, out), (tj.cdiv(n, 1024),), dict(BLOCK=1024), check


def _matmul(dtype, gen, dev, m=100, k=70, n=90):
    a, b = rand((m, k), dtype, gen, dev), rand((k, n), dtype, gen, dev)
    c, whole = guarded((m, n), torch.float32, dev)

    def check():
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
        untouched(whole, (m, n))
    return (a, b, c), (tj.cdiv(m, 64), tj.cdiv(n, 64)), dict(BM=64, BN=64, BK=32), check


def _layer_norm(dtype, gen, dev, rows=37, cols=300):
    x = rand((rows, cols), dtype, gen, dev)
    w, b = rand(cols, dtype, gen, dev), rand(cols, dtype, gen, dev)
    out, whole = guarded((rows, cols), dtype, dev)

    def check():
        ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
        tol = {torch.float32: 1e-4}.get(dtype, 5e-2)
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
        untouched(whole, (rows, cols))
    return (x, w, b, out, 1e-5), (tj.cdiv(rows, 3),), dict(N=cols, BM=3, BLOCK=cols), check


F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
CASES = [
    Case("masked_add", masked_add, (F32, F16, BF16), _masked_add, ("ld.global",)),
    Case("masked_softmax", masked_softmax, (F32, F16, BF16), _masked_softmax,
         ("ex2.approx", "bar.sync")),
    Case("row_stats", row_stats, (F32, F16), _row_stats, ("bar.sync",)),
    Case("reverse_shared", reverse_shared, (F32, F16, BF16, torch.int32, torch.int64,
                                            torch.uint8), _reverse_shared,
         ("bar.sync", "st.shared", "ld.shared")),
    Case("histogram", histogram, (torch.int32,), _histogram,
         ("atom.acq_rel.gpu.shared", "atom.acq_rel.gpu.global.add")),
    Case("split_k_gemm", split_k_gemm, (F32,), _split_k, ("atom.acq_rel.gpu.global.add.f32",)),
    Case("collatz", collatz, (torch.int32, torch.int64), _collatz, ()),
    Case("casts", casts, (F16, BF16), _casts, ("cvt.rn",)),
    Case("vector_add", vector_add, (F32, F16, BF16), _vector_add, ("ld.global",)),
    Case("matmul", matmul, (F32, F16), _matmul, ("bar.sync", "ld.shared", "fma.rn.f32")),
    Case("layer_norm", layer_norm, (F32, BF16), _layer_norm, ("bar.sync",)),
]
BY_NAME = {case.name: case for case in CASES}
# The small sizes the CPU runs in SIMT mode (one simulated unit per thread) for the
# lowering comparison; the GPU launches use the builders' defaults.
CPU_SIZES = {"vector_add": dict(n=3001), "histogram": dict(n=1001), "masked_softmax":
             dict(rows=5), "row_stats": dict(rows=9), "layer_norm": dict(rows=7),
             "collatz": dict(n=300), "matmul": dict(m=70, k=40, n=66)}


def spec_of(value, device: str):
    """A tensor as a ``TensorSpec`` (same shape, dtype, strides, alignment) on ``device``."""
    if not isinstance(value, torch.Tensor):
        return value
    return tj.TensorSpec(tuple(value.shape), value.dtype, tuple(value.stride()), device=device,
                         aligned16=value.data_ptr() % 16 == 0)


def cpu_build(case: Case, dtype=None):
    return case.build(dtype or case.dtypes[0], torch.Generator().manual_seed(0), "cpu",
                      **CPU_SIZES.get(case.name, {}))


# --------------------------------------------------------------------------- no GPU needed
@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_compiles_for_both_archs(case, arch):
    args, _, constexprs, _ = cpu_build(case)
    compiled = case.kernel.compile(*(spec_of(a, "cuda") for a in args), target="cuda",
                                   arch=arch, **constexprs)
    meta = compiled.metadata
    assert compiled.target == "cuda" and meta["cuda_arch"] == arch
    assert f".target {arch}" in compiled.asm["ptx"]
    assert compiled.asm["cubin"][:4] == b"\x7fELF"
    assert 0 < meta["registers"] <= 255 and meta["spill_bytes"] == 0, meta
    assert meta["threads"] == THREADS
    for instruction in case.ptx:
        assert instruction in compiled.asm["ptx"], f"{instruction} not in the PTX"
    # The printed kernel is the C++ of this kernel, one tensor = pointer + shape + strides.
    assert f'extern "C" __global__ void __launch_bounds__({THREADS})' in compiled.asm["cuda"]


def test_shared_memory_is_planned_and_passed_at_launch():
    """The matmul's 64 x 32 and 32 x 64 f32 tiles (and, today, its accumulator: a CTA
    fragment without a thread layout is a shared buffer under a per-thread split): the
    planned dynamic shared memory is what the CUDA module launches with."""
    args, _, constexprs, _ = cpu_build(BY_NAME["matmul"])
    compiled = matmul.compile(*(spec_of(a, "cuda") for a in args), target="cuda",
                              arch="sm_90a", **constexprs)
    assert compiled.metadata["shared_bytes"] >= 2 * 64 * 32 * 4
    assert compiled.module.shared_bytes == compiled.metadata["shared_bytes"]
    assert "extern __shared__ __align__(1024) unsigned char tj_smem[]" in compiled.asm["cuda"]


# One lowering, two consumers ------------------------------------------------------------
# The cuda target and the CPU's SIMT mode run the same pipeline with distribution =
# per_thread. The kernel line differs by the attributes that name the consumer: `target`,
# `arch` (only the cuda compile has one) and `distribution` (the CPU's SIMT mode asks for
# per_thread on the kernel; the cuda target's capabilities imply it). The body may differ
# only where dispatch reads the target's capabilities: the CPU's vector width (64 bytes
# with AVX-512, 32 with AVX; CUDA's 16) sizes the vector loops, and its register count
# (32 or 16; CUDA's 255) the gemm's register blocks. The shared-memory capacity (2 GiB
# on the CPU, 227 KiB per CTA on cuda) changes nothing for a kernel that fits. So the
# comparison compiles the CPU side with the CPU's dispatch context given CUDA's
# vector_bytes and registers: then the two lowered texts are equal, line for line.
KERNEL_LINE_CONSUMER = re.compile(
    r'(target = "(cpu|cuda)", |arch = "\w+", |distribution = "per_thread", )')


def normalized(lowered: str) -> str:
    head, _, body = lowered.partition("\n")
    return KERNEL_LINE_CONSUMER.sub("", head) + "\n" + body


@pytest.fixture
def cpu_with_cuda_capabilities(tmp_path):
    """The CPU's dispatch context with CUDA's vector width and register count, and a disk
    cache of its own (with a fresh kernel object per test, nothing compiled under it is
    seen by other tests)."""
    cpu, cuda = get_backend("cpu").register(), get_backend("cuda").register()
    register_target(dataclasses.replace(cpu, vector_bytes=cuda.vector_bytes,
                                        registers=cuda.registers))
    try:
        with knobs.scoped(cache_dir=str(tmp_path)):
            yield
    finally:
        register_target(cpu)


@needs_nvrtc
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_one_lowering_two_consumers(case, cpu_with_cuda_capabilities):
    args, grid, constexprs, check = cpu_build(case)
    printed = case.kernel.compile(*(spec_of(a, "cuda") for a in args), target="cuda",
                                  arch="sm_90a", **constexprs)
    cpu_kernel = tj.kernel(case.kernel.fn)    # a fresh kernel object: a memory cache of its own
    cpu_kernel[grid](*args, simt=True, **constexprs)
    check()                                   # the CPU's run of that IR matches torch
    (ran,) = cpu_kernel.compiled_kernels()
    assert ran.target == "cpu" and ran.metadata["backend"]["granularity"] == "thread"
    assert 'distribution = "per_thread"' in ran.asm["lowered"].splitlines()[0]
    assert normalized(ran.asm["lowered"]) == normalized(printed.asm["lowered"])
    assert [(r.primitive, r.rule, r.shape) for r in ran.dispatch_log] == \
        [(r.primitive, r.rule, r.shape) for r in printed.dispatch_log]


@needs_nvrtc
def test_with_the_hosts_own_capabilities_only_the_instruction_shapes_differ():
    """Without the adjustment above, the CPU's SIMT mode picks the same families for the
    same primitives; only the shapes sized by the vector width / registers change."""
    case = BY_NAME["matmul"]   # vector copies and the fma gemm's register blocks
    args, _, constexprs, _ = cpu_build(case)
    printed = matmul.compile(*(spec_of(a, "cuda") for a in args), target="cuda",
                             arch="sm_90a", **constexprs)
    host = tj.kernel(matmul.fn).compile(*args, simt=True, **constexprs)
    assert [(r.primitive, r.rule) for r in host.dispatch_log] == \
        [(r.primitive, r.rule) for r in printed.dispatch_log]
    cpu_context = get_backend("cpu").register()
    if cpu_context.vector_bytes != 16 or cpu_context.registers != 255:
        assert normalized(host.asm["lowered"]) != normalized(printed.asm["lowered"])


@needs_nvrtc
def test_the_gpu_benchmark_compiles_its_kernels(tmp_path):
    """scripts/gpu_bench.py --compile-only: the benchmark's kernels compile here (its
    launches run in scripts/gpu_check.sh on a GPU)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "gpu_bench.py"),
                           "--compile-only", "--small", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "gpu_bench.json").read_text())["rows"]
    assert {r["part"] for r in rows} == {"vector_add", "row_softmax", "matmul"}
    assert all(r["status"] == "COMPILED" and r["spill_bytes"] == 0 for r in rows), rows
    assert "| matmul |" in (tmp_path / "gpu_bench.md").read_text()


# --------------------------------------------------------------------------- on a GPU
def _gpu_params():
    return [pytest.param(case, dtype, id=f"{case.name}-{str(dtype).removeprefix('torch.')}")
            for case in CASES for dtype in case.dtypes]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case, dtype", _gpu_params())
def test_launch_on_gpu_matches_torch(case, dtype):
    gen = torch.Generator().manual_seed(1)
    args, grid, constexprs, check = case.build(dtype, gen, "cuda")
    case.kernel[grid](*args, **constexprs)
    torch.cuda.synchronize()
    check()
    compiled = case.kernel.compiled_kernels()[-1]
    assert compiled.target == "cuda"


@pytest.mark.gpu
@needs_gpu
def test_gpu_and_cpu_simt_agree_bit_for_bit_on_integer_kernels():
    """Integer kernels have one right answer: the GPU and the CPU's run of the same
    per-thread IR write the same bits."""
    for case in (BY_NAME["reverse_shared"], BY_NAME["collatz"]):
        for dtype in (torch.int32, torch.int64):
            gen_gpu, gen_cpu = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
            g_args, grid, constexprs, _ = case.build(dtype, gen_gpu, "cuda")
            c_args, _, _, _ = case.build(dtype, gen_cpu, "cpu")
            case.kernel[grid](*g_args, **constexprs)
            case.kernel[grid](*c_args, simt=True, **constexprs)
            torch.cuda.synchronize()
            out = 1
            assert torch.equal(g_args[out].cpu(), c_args[out])
