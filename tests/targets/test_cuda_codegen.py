"""The CUDA printer (tilejit/targets/cuda/emit.py): per-thread IR -> CUDA C++ -> NVRTC.

No GPU is needed: kernels are printed from textual IR (the flat ``*_at`` accesses the
lower-addresses pass makes), the lines that matter are checked, and each kernel compiles
with NVRTC for sm_80 and sm_90a (PTX instructions, no spills). Launches need a GPU
(``-m gpu``)."""
import math
import re
import shutil
import subprocess
import textwrap

import pytest
import torch

import tilejit as tj
from support.gpu import cuda_available, needs_gpu, needs_nvrtc
from tilejit.errors import CompilationError
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.targets.backend import get_backend
from tilejit.targets.cuda.emit import literal, print_cuda
from tilejit.targets.cuda.emit_prelude import PRELUDE
from tilejit.targets.cuda.nvrtc import compile_cuda, nvrtc_unavailable_reason
from tilejit.ir.types import f16, f32, f64, i1, i8, i32, i64, u32, u64
from tilejit.layout import TileLayout

ARCHS = ("sm_80", "sm_90a")

HEADER = ('kernel @{name}({params}) {{distribution = "per_thread", num_warps = {warps}{extra}}} '
          'loc("/src/k.py":1:0) {{\n')


def kernel(name: str, params: str, body: str, warps: int = 4, extra: str = ""):
    text = HEADER.format(name=name, params=params, warps=warps, extra=extra) \
        + textwrap.dedent(body) + "}\n"
    return verify(parse_kernel(text))


def body_lines(source: str) -> list[str]:
    """The kernel's own lines (after the prelude), stripped."""
    return [line.strip() for line in source.split("end of prelude", 1)[1].splitlines()]


def compiled(source: str, arch: str):
    program = compile_cuda(source, arch)
    (usage,) = program.resources().values()
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0
    return program


# --------------------------------------------------------------------------- kernels
F32_1D = "buffer<global, f32, [?], strides=[1]>"
I32_1D = "buffer<global, i32, [?], strides=[1]>"


def flat_kernel():
    return kernel("axpy", f"%x: {F32_1D}, %out: {F32_1D}, %n: i32", """
      %cta = thread_index {kind = cta_id} : i32 loc(2:4)
      %tid = thread_index {kind = thread_id} : i32 loc(2:4)
      %c128 = const {value = 128} : i32 loc(2:4)
      %base = binary(%cta, %c128) {op = mul} : i32 loc(3:4)
      %i = binary(%base, %tid) {op = add} : i32 loc(3:4)
      %ok = cmp(%i, %n) {pred = lt} : i1 loc(4:4)
      %dead = binary(%i, %n) {op = floordiv} : i32 loc(4:4)
      %v = if(%ok) : f32 loc(4:4) {
      ^():
        %xi = load_at(%x, %i) : f32 loc(5:8)
        yield(%xi) loc(5:8)
      } {
      ^():
        %zero = const {value = 0.0} : f32 loc(6:8)
        yield(%zero) loc(6:8)
      }
      %two = const {value = 2.5} : f32 loc(7:4)
      %w = binary(%v, %two) {op = mul} : f32 loc(7:4)
      %c0 = const {value = 0} : i32 loc(8:4)
      %c1 = const {value = 1} : i32 loc(8:4)
      %acc, %prod = for(%c0, %n, %c1, %c0, %c1) {unroll = 4} : i32, i32 loc(8:4) {
      ^(%j: i32, %a: i32, %p: i32):
        %a2 = binary(%a, %j) {op = add} : i32 loc(9:8)
        yield(%p, %a2) loc(9:8)
      }
      %s = binary(%acc, %prod) {op = sub} : i32 loc(10:4)
      %f = cast(%s) {to = f32} : f32 loc(10:4)
      %r = binary(%w, %f) {op = add} : f32 loc(10:4)
      store_at(%out, %r, %i) loc(11:4)
    """)


def test_flat_accesses_and_control_flow_print_as_c():
    source, entry = print_cuda(flat_kernel(), "sm_90a")
    lines = body_lines(source)
    assert entry == "axpy"
    assert 'extern "C" __global__ void __launch_bounds__(128) axpy(' in lines
    # A tensor is its data pointer, then its shape and strides in elements (the launch record).
    assert ["float* __restrict__ x,", "long long x_shape0,", "long long x_stride0,"] == \
        lines[lines.index("float* __restrict__ x,"):][:3]
    assert "int n) {" in lines
    assert "const int cta = (int)blockIdx.x;" in lines
    assert "const int tid = (int)threadIdx.x;" in lines
    assert "const int base = tj_mul(cta, 128);" in lines   # constants are inlined
    assert "const bool ok = i < n;" in lines
    assert "const float xi = x[i];" in lines             # load_at(%x, %i)
    assert "out[i] = r;" in lines                        # store_at(%out, %r, %i)
    assert not any("tj_floordiv" in line for line in lines)  # unused, no effects: not printed
    # if with a result: a local assigned in both branches
    assert lines[lines.index("float v;"):][:7] == [
        "float v;", "if (ok) {", "// line 5", "const float xi = x[i];", "v = xi;", "} else {",
        "// line 6"]
    assert "v = 0.0f;" in lines
    assert "const float w = v * 2.5f;" in lines
    # for with iter args: mutable locals, the yield a parallel assignment (p and a swap)
    assert "int acc = 0;" in lines and "int prod = 1;" in lines
    assert "#pragma unroll 4" in lines
    assert "for (int j = 0; j < n; j += 1) {" in lines
    assert "const int a2 = tj_add(acc, j);" in lines
    swap = lines[lines.index("const int a2 = tj_add(acc, j);") + 1:][:4]
    assert swap == ["const auto acc_next = prod;", "const auto prod_next = a2;",
                    "acc = acc_next;", "prod = prod_next;"]
    assert "const int s = tj_sub(acc, prod);" in lines
    assert "// line 11" in lines


SYNC_PARAMS = f"%x: buffer<global, f32, [?, ?], strides=[?, 1]>, %out: {F32_1D}"


def sync_kernel():
    return kernel("reduce", SYNC_PARAMS, """
      %lane = thread_index {kind = lane_id} : i32 loc(2:4)
      %warp = thread_index {kind = warp_id} : i32 loc(2:4)
      %c0 = const {value = 0} : i32 loc(2:4)
      %c1 = const {value = 1} : i32 loc(2:4)
      %c16 = const {value = 16} : i32 loc(2:4)
      %s = alloc {scope = shared, dtype = f32, shape = [8], offset = 256} : buffer<shared, f32, [8]> loc(3:4)
      %stride = buffer_stride(%x) {dim = 0} : i64 loc(4:4)
      %rows = buffer_dim(%x) {dim = 0} : i64 loc(4:4)
      %ones = buffer_stride(%x) {dim = 1} : i64 loc(4:4)
      %warp64 = cast(%warp) {to = i64} : i64 loc(4:4)
      %o = binary(%warp64, %stride) {op = mul} : i64 loc(4:4)
      %o2 = binary(%o, %ones) {op = add} : i64 loc(4:4)
      %o3 = binary(%o2, %rows) {op = add} : i64 loc(4:4)
      %v = load_at(%x, %o3) : f32 loc(4:4)
      %x16 = warp_shuffle(%v, %c16) {mode = xor} : f32 loc(5:4)
      %m = binary(%v, %x16) {op = max} : f32 loc(5:4)
      %d = warp_shuffle(%m, %warp) {mode = down} : f32 loc(5:4)
      %first = warp_shuffle(%d, %c0) {mode = idx} : f32 loc(5:4)
      %is0 = cmp(%lane, %c0) {pred = eq} : i1 loc(6:4)
      if(%is0) {filter = {axis = lane, lo = 0, hi = 1}} loc(6:4) {
      ^():
        store_at(%s, %first, %warp) loc(7:8)
        single {team = warp} loc(7:8) {
        ^():
          yield loc(7:8)
        }
        yield loc(7:8)
      } {
      ^():
        yield loc(6:4)
      }
      sync loc(8:4)
      single {team = warpgroup} loc(8:4) {
      ^():
        yield loc(8:4)
      }
      single {team = cta} loc(8:4) {
      ^():
        yield loc(8:4)
      }
      %r = load_at(%s, %lane) : f32 loc(9:4)
      store_at(%out, %r, %lane) loc(9:4)
    """, warps=8, extra=", shared_bytes = 512")


def test_shuffles_barriers_and_shared_memory():
    source, _ = print_cuda(sync_kernel(), "sm_90a")
    lines = body_lines(source)
    assert "extern __shared__ __align__(1024) unsigned char tj_smem[];" in lines
    assert "float* const s = reinterpret_cast<float*>(tj_smem + 256);" in lines
    # Strides the signature fixed are constants; the others are parameters.
    assert "const long long o = tj_mul(warp64, x_stride0);" in lines
    assert "const long long o2 = tj_add(o, 1LL);" in lines
    assert "const long long o3 = tj_add(o2, x_shape0);" in lines
    assert "const float x16 = __shfl_xor_sync(0xffffffffu, v, 16);" in lines
    assert "const float m = tj_maximum(v, x16);" in lines   # NaN-propagating, as the CPU
    # A run-time delta: every lane shuffles, then a source past the warp reads its own.
    assert "const float d = __shfl_down_sync(0xffffffffu, m, warp);" in lines
    assert "const float d_1 = (unsigned)warp < 32u ? d : m;" in lines
    assert "const float first = __shfl_sync(0xffffffffu, d_1, 0);" in lines
    assert "__syncwarp(0x00000001u);" in lines               # lane 0 only, under the filter
    assert lines.count("__syncthreads();") == 2                # sync, single {team = cta}
    assert ('asm volatile("bar.sync %0, %1;" :: "r"(1 + (int)(threadIdx.x >> 7)), '
            '"r"(128) : "memory");') in lines


ATOMIC_PARAMS = (f"%out: {F32_1D}, %cnt: {I32_1D}, "
                 "%h: buffer<global, f16, [?], strides=[1]>, "
                 "%b: buffer<global, bf16, [?], strides=[1]>, %v: f32")


def atomic_kernel():
    return kernel("atomics", ATOMIC_PARAMS, """
      %lane = thread_index {kind = lane_id} : i32 loc(2:4)
      %c0 = const {value = 0} : i32 loc(2:4)
      %c1 = const {value = 1} : i32 loc(2:4)
      %s = alloc {scope = shared, dtype = f32, shape = [4], offset = 0} : buffer<shared, f32, [4]> loc(3:4)
      %a = atomic_at(%out, %v, %c0) {op = add} : f32 loc(4:4)
      %m = atomic_at(%cnt, %lane, %c1) {op = max, order = relaxed, sync_scope = cta} : i32 loc(5:4)
      %fm = atomic_at(%out, %v, %c1) {op = min} : f32 loc(6:4)
      %cas = atomic_cas_at(%cnt, %c0, %lane, %c0) {order = acquire, sync_scope = sys} : i32 loc(7:4)
      %sa = atomic_at(%s, %v, %lane) {op = add, sync_scope = cta} : f32 loc(8:4)
      %hv = cast(%v) {to = f16} : f16 loc(9:4)
      %ha = atomic_at(%h, %hv, %lane) {op = add} : f16 loc(9:4)
      %bv = cast(%v) {to = bf16} : bf16 loc(10:4)
      %ba = atomic_at(%b, %bv, %lane) {op = add} : bf16 loc(10:4)
      %sum = binary(%a, %fm) {op = add} : f32 loc(11:4)
      %sum2 = binary(%sum, %sa) {op = add} : f32 loc(11:4)
      %hf = cast(%ha) {to = f32} : f32 loc(11:4)
      %bf = cast(%ba) {to = f32} : f32 loc(11:4)
      %sum3 = binary(%sum2, %hf) {op = add} : f32 loc(11:4)
      %sum4 = binary(%sum3, %bf) {op = add} : f32 loc(11:4)
      %mi = binary(%m, %cas) {op = add} : i32 loc(11:4)
      %mf = cast(%mi) {to = f32} : f32 loc(11:4)
      %sum5 = binary(%sum4, %mf) {op = add} : f32 loc(11:4)
      store_at(%out, %sum5, %lane) loc(12:4)
    """, extra=", shared_bytes = 128")


def test_atomics_are_inline_ptx_with_order_and_scope():
    source, _ = print_cuda(atomic_kernel(), "sm_90a")
    lines = body_lines(source)
    assert ('asm volatile("atom.acq_rel.gpu.global.add.f32 %0, [%1], %2;" : "=r"(old_bits) : '
            '"l"(&out[0]), "r"((unsigned)tj_bits(v)) : "memory");') in lines
    assert "const float a = tj_from_bits<float>(old_bits);" in lines
    assert any(line.startswith('asm volatile("atom.relaxed.cta.global.max.s32') for line in lines)
    assert any(line.startswith('asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;"')
               for line in lines)
    assert any(line.startswith('asm volatile("atom.acq_rel.cta.shared::cta.add.f32') and
               '"r"(tj_smem_addr(&s[lane]))' in line for line in lines)
    assert any("atom.acq_rel.gpu.global.add.noftz.f16" in line for line in lines)
    assert any("atom.acq_rel.gpu.global.add.noftz.bf16" in line for line in lines)
    # Float min has no atom: a compare-and-swap loop (NaN-ignoring fmin, as LLVM's atomicrmw)
    loop = lines[lines.index("float fm = out[1];"):][:8]
    assert loop[1:3] == ["while (true) {", "const float want = fmin(fm, v);"]
    assert "if (seen == tj_bits(fm)) break;" in loop
    # sm_80 has no bf16 atom.add: the same compare-and-swap loop, on 16 bits
    lines80 = body_lines(print_cuda(atomic_kernel(), "sm_80")[0])
    assert not any("add.noftz.bf16" in line for line in lines80)
    assert any("atom.acq_rel.gpu.global.cas.b16" in line for line in lines80)


CAST_PARAMS = ("%x: buffer<global, f16, [?], strides=[1]>, %y: buffer<global, bf16, [?], "
               "strides=[1]>, %o: buffer<global, i8, [?], strides=[1]>, "
               "%u: buffer<global, u64, [?], strides=[1]>, "
               "%flags: buffer<global, i1, [?], strides=[1]>, %out: " + F32_1D)


def cast_kernel():
    return kernel("casts", CAST_PARAMS, """
      %i = thread_index {kind = thread_id} : i32 loc(2:4)
      %h = load_at(%x, %i) : f16 loc(3:4)
      %b = load_at(%y, %i) : bf16 loc(3:4)
      %hh = binary(%h, %h) {op = mul} : f16 loc(4:4)
      %hb = cast(%hh) {to = bf16} : bf16 loc(4:4)
      %bb = binary(%hb, %b) {op = add} : bf16 loc(4:4)
      %e = unary(%bb) {op = exp} : bf16 loc(5:4)
      %t = unary(%e) {op = tanh} : bf16 loc(5:4)
      %f = cast(%t) {to = f32} : f32 loc(6:4)
      %q = cast(%f) {to = i8} : i8 loc(7:4)
      store_at(%o, %q, %i) loc(7:4)
      %w = cast(%f) {to = u64} : u64 loc(8:4)
      store_at(%u, %w, %i) loc(8:4)
      %nz = cast(%f) {to = i1} : i1 loc(9:4)
      %fl = load_at(%flags, %i) : i1 loc(9:4)
      %both = binary(%nz, %fl) {op = and} : i1 loc(9:4)
      store_at(%flags, %both, %i) loc(9:4)
      %half = const {value = 0.1} : f16 loc(10:4)
      %bhalf = const {value = 0.1} : bf16 loc(10:4)
      %hs = binary(%h, %half) {op = sub} : f16 loc(10:4)
      %bs = binary(%b, %bhalf) {op = sub} : bf16 loc(10:4)
      %hf = cast(%hs) {to = f32} : f32 loc(10:4)
      %bf = cast(%bs) {to = f32} : f32 loc(10:4)
      %r = binary(%hf, %bf) {op = add} : f32 loc(10:4)
      store_at(%out, %r, %i) loc(11:4)
    """)


def test_casts_and_narrow_floats_follow_the_cpu():
    lines = body_lines(print_cuda(cast_kernel(), "sm_90a")[0])
    # f16/bf16 compute in f32, rounded once per op
    assert "const __half hh = __float2half_rn(tj_f32(h) * tj_f32(h));" in lines
    assert "const __nv_bfloat16 hb = __float2bfloat16_rn(tj_f32(hh));" in lines
    assert "const __nv_bfloat16 e = __float2bfloat16_rn(expf(tj_f32(bb)));" in lines
    assert "const __nv_bfloat16 t = __float2bfloat16_rn((float)tanh((double)tj_f32(e)));" in lines
    # float -> int saturates (cvt.rzi: NaN -> 0), narrow ints clamp
    assert "const signed char q = (signed char)tj_clamp(__float2int_rz(f), -128, 127);" in lines
    assert "const unsigned long long w = __float2ull_rz(f);" in lines
    assert "const bool nz = f != 0;" in lines                 # NaN != 0: true, as the CPU
    # bools are bytes in memory; the low bit is the value
    assert "unsigned char* __restrict__ flags," in lines
    assert "const bool fl = tj_bool(flags[i]);" in lines
    assert "flags[i] = (unsigned char)both;" in lines
    # constants rounded as the CPU rounds them
    assert ("const __half hs = __float2half_rn(tj_f32(h) - "
            "tj_f32(__float2half_rn(0.0999755859375f)));") in lines
    assert ("const __nv_bfloat16 bs = __float2bfloat16_rn(tj_f32(b) - "
            "tj_f32(__float2bfloat16_rn(0.10000000149011612f)));") in lines


def copy_kernel(dtype: str):
    buf = f"buffer<global, {dtype}, [?], strides=[1]>"
    return kernel("copy", f"%x: {buf}, %out: {buf}", """
      %tid = thread_index {kind = thread_id} : i32 loc(2:4)
      %v = load_at(%x, %tid) : DTYPE loc(3:4)
      store_at(%out, %v, %tid) loc(4:4)
    """.replace("DTYPE", dtype))


HEADERS = ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h")


@pytest.mark.parametrize("make, included", [
    (flat_kernel, ()), (cast_kernel, ("cuda_fp16.h", "cuda_bf16.h")),
    (lambda: copy_kernel("f16"), ("cuda_fp16.h",)), (lambda: copy_kernel("bf16"), ("cuda_bf16.h",)),
    (lambda: copy_kernel("f8e4m3"), ("cuda_fp8.h",))])
def test_a_narrow_float_header_is_included_only_for_a_kernel_holding_the_type(make, included):
    # cuda_fp16.h and cuda_bf16.h are a quarter of NVRTC's time for an empty kernel
    source, _ = print_cuda(make(), "sm_90a")
    prelude = source.split("end of prelude", 1)[0]
    assert [h for h in HEADERS if f"#include <{h}>" in source] == list(included)
    assert ("tj_f32(__half x)" in source) == ("cuda_fp16.h" in included)
    assert "#include" not in prelude   # the 16-bit sections follow the core prelude
    if nvrtc_unavailable_reason() is None:
        compiled(source, "sm_90a")


def test_approximate_math_prints_the_fast_intrinsics():
    ops = ("exp", "exp2", "log", "log2", "sin", "cos")   # each of the previous result
    body = "%i = thread_index {kind = thread_id} : i32 loc(2:4)\n" \
        + "%x = load_at(%a, %i) : f32 loc(3:4)\n" \
        + "".join(f"%{op}_ = unary(%{prev}) {{op = {op}, approx = true}} : f32 loc(4:4)\n"
                  for prev, op in zip(("x",) + tuple(f"{o}_" for o in ops), ops)) \
        + "store_at(%a, %cos_, %i) loc(4:4)\n" \
        + "%h = load_at(%b, %i) : f16 loc(5:4)\n" \
        + "%hl = unary(%h) {op = log, approx = true} : f16 loc(5:4)\n" \
        + "store_at(%b, %hl, %i) loc(5:4)\n"
    fast = kernel("fast_math", "%a: " + F32_1D + ", %b: buffer<global, f16, [?], strides=[1]>",
                  body)
    lines = body_lines(print_cuda(fast, "sm_90a")[0])
    for line in ("const float exp_ = __expf(x);", "const float exp2_ = tj_exp2_approx(exp_);",
                 "const float log_ = __logf(exp2_);", "const float log2_ = __log2f(log_);",
                 "const float sin_ = __sinf(log2_);", "const float cos_ = __cosf(sin_);"):
        assert line in lines
    assert "const __half hl = __float2half_rn(__logf(tj_f32(h)));" in lines
    if nvrtc_unavailable_reason() is None:
        ptx = compiled(print_cuda(fast, "sm_90a")[0], "sm_90a").ptx
        for instruction in ("ex2.approx", "lg2.approx", "sin.approx", "cos.approx"):
            assert instruction in ptx


def test_literals():
    assert literal(-(1 << 31), i32) == "(-2147483647 - 1)"
    assert literal(-(1 << 63), i64) == "(-9223372036854775807LL - 1)"
    assert literal(7, u32) == "7u" and literal(7, u64) == "7ULL" and literal(-3, i64) == "(-3LL)"
    assert literal(-5, i8) == "(signed char)(-5)"
    assert literal(True, i1) == "true"
    assert literal(math.inf, f32) == "__int_as_float(0x7f800000)"
    assert literal(-math.inf, f32) == "__int_as_float(0xff800000)"
    assert literal(1e300, f32) == "__int_as_float(0x7f800000)"   # rounds to inf in f32
    assert literal(1e-3, f64) == "0.001"
    assert literal(1.0, f16) == "__float2half_rn(1.0f)"
    assert literal(70000.0, f16) == "__float2half_rn(__int_as_float(0x7f800000))"


MBAR_PARAMS = f"%out: {F32_1D}"


def mbarrier_kernel(expect_tx: bool = True):
    tx = """
      if(%el) {filter = {axis = elect}} loc(4:4) {
      ^():
        mbarrier_expect_tx(%bars, %c0, %c64) {arrive = true} loc(5:8)
        yield loc(5:8)
      } {
      ^():
        yield loc(4:4)
      }""" if expect_tx else ""
    return kernel("pipeline", MBAR_PARAMS, f"""
      %c0 = const {{value = 0}} : i32 loc(2:4)
      %c1 = const {{value = 1}} : i32 loc(2:4)
      %c64 = const {{value = 64}} : i32 loc(2:4)
      %c128 = const {{value = 128}} : i32 loc(2:4)
      %bars = alloc_barrier {{count = 2}} : barrier<2> loc(3:4)
      mbarrier_init(%bars, %c0, %c128) loc(3:4)
      sync loc(3:4)
      %el = elect_sync : i1 loc(4:4){tx}
      mbarrier_arrive(%bars, %c0) loc(6:4)
      mbarrier_wait(%bars, %c0, %c0) loc(7:4)
      %i = thread_index {{kind = thread_id}} : i32 loc(8:4)
      %one = const {{value = 1.0}} : f32 loc(8:4)
      store_at(%out, %one, %i) loc(8:4)
    """)


def test_mbarriers_and_elect():
    lines = body_lines(print_cuda(mbarrier_kernel(), "sm_90a")[0])
    assert "__shared__ __align__(8) unsigned long long bars[2];" in lines
    assert "tj_mbarrier_init(&bars[0], 128);" in lines
    assert "const bool el = tj_elect_sync(0xffffffffu);" in lines
    assert "tj_mbarrier_arrive_expect_tx(&bars[0], 64);" in lines
    assert "tj_mbarrier_arrive(&bars[0]);" in lines
    assert "tj_mbarrier_wait(&bars[0], 0);" in lines
    # sm_80: the lowest lane of the mask (what the CPU elects), no transaction counts
    lines80 = body_lines(print_cuda(mbarrier_kernel(expect_tx=False), "sm_80")[0])
    assert "const bool el = (threadIdx.x & 31) == 0u;" not in lines80   # unused: not printed
    with pytest.raises(CompilationError, match="expect_tx.*need sm_90") as err:
        print_cuda(mbarrier_kernel(), "sm_80")
    assert err.value.line == 5


ALL_KERNELS = {"flat": flat_kernel, "sync": sync_kernel, "atomics": atomic_kernel,
               "casts": cast_kernel, "mbarriers": mbarrier_kernel}
# What each kernel's PTX must hold, per arch.
PTX = {
    "flat": {"all": ["ld.global.nc.f32", "st.global.f32"]},   # x is never written
    "sync": {"all": ["shfl.sync.bfly.b32", "shfl.sync.down.b32", "shfl.sync.idx.b32",
                     "bar.sync", "bar.warp.sync", "ld.shared.f32", "st.shared"]},
    "atomics": {"all": ["atom.acq_rel.gpu.global.add.f32", "atom.relaxed.cta.global.max.s32",
                        "atom.acquire.sys.global.cas.b32", "atom.acq_rel.cta.shared::cta.add.f32",
                        "atom.acq_rel.gpu.global.add.noftz.f16"],
                "sm_90a": ["atom.acq_rel.gpu.global.add.noftz.bf16"],
                "sm_80": ["atom.acq_rel.gpu.global.cas.b16"]},
    "casts": {"all": ["cvt.rzi.s32.f32", "cvt.rzi.u64.f32", "cvt.rn.f16.f32",
                      "cvt.rn.bf16.f32", "st.global.u8"]},
    "mbarriers": {"all": ["mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64"],
                  "sm_90a": ["mbarrier.try_wait.parity.shared::cta.b64", "elect.sync",
                             "mbarrier.arrive.expect_tx.shared::cta.b64"],
                  "sm_80": ["mbarrier.test_wait.parity.shared::cta.b64"]},
}


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(ALL_KERNELS))
def test_printed_kernels_compile_with_nvrtc(name, arch):
    k = mbarrier_kernel(expect_tx=arch != "sm_80") if name == "mbarriers" else ALL_KERNELS[name]()
    source, entry = print_cuda(k, arch)
    program = compiled(source, arch)
    assert program.entries == [entry]
    for instruction in PTX[name]["all"] + PTX[name].get(arch, []):
        assert instruction in program.ptx, f"{instruction} missing from the {arch} PTX"


# --------------------------------------------------------------------------- errors
THREAD_LAYOUT = '"(4,32):(1@m,1@laneid)"'


def test_a_private_tile_over_threads_is_an_array_of_one_threads_elements():
    k = kernel("frag", f"%out: {F32_1D}", f"""
      %c0 = const {{value = 0}} : i32 loc(2:4)
      %acc = alloc {{scope = local, dtype = f32, shape = [4, 32], layout = {THREAD_LAYOUT}}} : buffer<local, f32, [4, 32], layout={THREAD_LAYOUT}> loc(3:4)
      %v = load_at(%acc, %c0) : f32 loc(4:8)
      store_at(%out, %v, %c0) loc(5:4)
    """)
    lines = body_lines(print_cuda(k)[0])
    assert "float acc[4];" in lines and "const float v = acc[0];" in lines


@pytest.mark.parametrize("body, message, line", [
    ("""
      single {team = warp} loc(3:4) {
      ^():
        %c = const {value = 1.0} : f32 loc(3:8)
        store_at(%out, %c, %c0) loc(3:8)
        yield loc(3:8)
      }""", "'single' region with a body is not supported", 3),
    ("""
      intrinsic(%c0) {target = "cpu", name = "mbarrier_complete_tx"} loc(4:4)""",
     "intrinsic cpu.mbarrier_complete_tx is not available on the cuda target", 4),
    ("""
      %r = region(%out, %c0) {sizes = [4], keep = [true]} : region<buffer<global, f32, [?], strides=[1]>, [4]> loc(5:4)
      %v = load(%r, %c0) : f32 loc(5:8)
      store_at(%out, %v, %c0) loc(5:12)""", "a 'region' is still used", 5),
    ("""
      %v = load(%out, %c0) : f32 loc(6:8)
      store_at(%out, %v, %c0) loc(6:12)""", "'load' with indices reached the cuda printer", 6),
    (f"""
      %s = alloc {{scope = shared, dtype = f32, shape = [4, 32], layout = {THREAD_LAYOUT}, offset = 0}} : buffer<shared, f32, [4, 32], layout={THREAD_LAYOUT}> loc(8:4)
      %v = load(%s, %c0, %c0) : f32 loc(9:8)
      store_at(%out, %v, %c0) loc(9:12)""", "shared buffers laid out over threads are not "
                                           "supported by the cuda target yet", 9),
    ("""
      %s = alloc {scope = shared, dtype = f32, shape = [4]} : buffer<shared, f32, [4]> loc(7:4)
      %v = load_at(%s, %c0) : f32 loc(7:8)
      store_at(%out, %v, %c0) loc(7:12)""", "without a planned offset", 7),
])
def test_unsupported_ir_is_a_located_error(body, message, line):
    k = kernel("bad", f"%out: {F32_1D}",
               "%c0 = const {value = 0} : i32 loc(2:4)\n" + textwrap.dedent(body) + "\n")
    with pytest.raises(CompilationError, match=re.escape(message)) as err:
        print_cuda(k)
    assert err.value.file == "/src/k.py" and err.value.line == line


def test_cuda_intrinsics_are_calls():
    k = kernel("clock", f"%out: {F32_1D}", """
      %c0 = const {value = 0} : i32 loc(2:4)
      %t = intrinsic {target = "cuda", name = "clock"} : i32 loc(3:4)
      intrinsic(%c0) {target = "cuda", name = "__nanosleep"} loc(4:4)
      %f = cast(%t) {to = f32} : f32 loc(5:4)
      store_at(%out, %f, %c0) loc(5:4)
    """)
    lines = body_lines(print_cuda(k)[0])
    assert "const int t = clock();" in lines and "__nanosleep(0);" in lines


def test_nvrtc_errors_are_compilation_errors():
    if nvrtc_unavailable_reason() is not None:
        pytest.skip(nvrtc_unavailable_reason())
    with pytest.raises(CompilationError, match="(?s)NVRTC failed to compile.*no_such_function"):
        compile_cuda('extern "C" __global__ void k() { no_such_function(); }', "sm_90a")


# --------------------------------------------------------------------------- semantics
HOST_SHIM = """
#include <cmath>
#include <cstdio>
#include <cstring>
#include <climits>
#include <initializer_list>
#define __device__
#define __forceinline__ inline
using std::signbit; using std::fmod; using std::floor; using std::copysign;
"""
HOST_MAIN = r"""
template <typename T> void show(T v) { printf("%lld\n", (long long)v); }
int main() {
  const int xs[] = {7, -7, 0, 5, -5, INT_MIN, INT_MAX, 1};
  const int ys[] = {2, -2, 3, -3, 0, -1, 1, 32, 33, -1};
  for (int x : xs) for (int y : ys) {
    show(tj_div(x, y)); show(tj_floordiv(x, y)); show(tj_mod(x, y));
  }
  const int counts[] = {0, 1, 31, 32, 33, -1};
  for (int x : xs) for (int c : counts) { show(tj_shl<32>(x, c)); show(tj_shr<32>(x, c)); }
  for (unsigned x : {7u, 0u, 4294967295u}) for (unsigned y : {2u, 0u, 3u})
    { show(tj_floordiv(x, y)); show(tj_mod(x, y)); }
  for (signed char x : {(signed char)-128, (signed char)5})
    for (signed char y : {(signed char)-1, (signed char)2}) show(tj_floordiv(x, y));
  const double fs[] = {1.0, -1.0, 7.5, -7.5, 0.0};
  const double gs[] = {0.1, -2.0, 3.0, 0.0};
  for (double a : fs) for (double b : gs)
    printf("%.17g %.17g\n", tj_ffloordiv(a, b), tj_fmod(a, b));
  printf("%g %g %g\n", tj_maximum(-0.0, 0.0), tj_minimum(0.0, -0.0), tj_maximum(1.0, (double)NAN));
  return 0;
}
"""


def _py_int(op, x, y=0, bits=32, signed=True):
    """The CPU target's integer semantics (emit_native.py), in Python."""
    def wrap(v):
        v &= (1 << bits) - 1
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v
    wrapping = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                "neg": lambda: -x, "abs": lambda: abs(x)}
    if op in wrapping:
        return wrap(wrapping[op]())
    if op in ("div", "floordiv", "mod"):
        if y == 0:
            return 0
        if signed and y == -1:
            return wrap(-x) if op != "mod" else 0
        if op == "div":   # truncating
            return wrap(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))
        return wrap(x // y) if op == "floordiv" else wrap(x % y)
    count = y & ((1 << bits) - 1)   # shift counts are unsigned
    if op == "shl":
        return 0 if count >= bits else wrap(x << count)
    if signed:
        return x >> min(count, bits - 1)
    return 0 if count >= bits else x >> count


def _host_flags(tmp_path) -> list[str]:
    """g++ flags that make undefined behaviour (signed overflow) fail the run: -O2 lets the
    optimizer assume there is none, the UB sanitizer aborts where there is. Without the
    sanitizer (not installed) the run checks results only."""
    ubsan = ["-fsanitize=undefined", "-fno-sanitize-recover"]
    probe = tmp_path / "probe.cpp"
    probe.write_text("int main() { return 0; }\n")
    works = subprocess.run(["g++", *ubsan, "-o", str(tmp_path / "probe"), str(probe)],
                           capture_output=True).returncode == 0
    return ["-std=c++17", "-O2", *(ubsan if works else [])]


def _run_on_host(tmp_path, code: str):
    """The prelude's helpers (up to the casts) followed by ``code``, compiled for the host
    and run: its output lines."""
    start = PRELUDE.index("template <typename T> struct tj_unsigned")
    end = PRELUDE.index("// Float -> int casts")
    helpers = PRELUDE[start:end].replace("__device__ __forceinline__", "inline")
    helpers = helpers.replace("TJ_DEVICE", "inline")
    source = tmp_path / "helpers.cpp"
    source.write_text(HOST_SHIM + "#define TJ_DEVICE inline\n" + helpers + code)
    exe = tmp_path / "helpers"
    subprocess.run(["g++", *_host_flags(tmp_path), "-o", str(exe), str(source)],
                   check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return iter(run.stdout.splitlines())


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")


@needs_gxx
def test_prelude_helpers_compute_the_cpu_semantics(tmp_path):
    """The prelude's integer and float helpers, compiled for the host, against the CPU
    target's rules: floor division and modulo of negative numbers, by zero, MIN / -1,
    shift counts past the width, Python's float divmod, NaN-propagating max."""
    out = _run_on_host(tmp_path, HOST_MAIN)
    xs, ys = [7, -7, 0, 5, -5, -2**31, 2**31 - 1, 1], [2, -2, 3, -3, 0, -1, 1, 32, 33, -1]
    for x in xs:
        for y in ys:
            for op in ("div", "floordiv", "mod"):
                assert int(next(out)) == _py_int(op, x, y), (op, x, y)
    for x in xs:
        for c in (0, 1, 31, 32, 33, -1):
            assert int(next(out)) == _py_int("shl", x, c), ("shl", x, c)
            assert int(next(out)) == _py_int("shr", x, c), ("shr", x, c)
    for x in (7, 0, 2**32 - 1):
        for y in (2, 0, 3):
            assert int(next(out)) == _py_int("floordiv", x, y, signed=False)
            assert int(next(out)) == _py_int("mod", x, y, signed=False)
    for x in (-128, 5):
        for y in (-1, 2):
            assert int(next(out)) == _py_int("floordiv", x, y, bits=8)
    for a in (1.0, -1.0, 7.5, -7.5, 0.0):
        for b in (0.1, -2.0, 3.0, 0.0):
            q, m = (float(v) for v in next(out).split())
            if b == 0.0:
                assert math.isnan(m) and (math.isnan(q) if a == 0 else
                                          q == math.copysign(math.inf, a) * math.copysign(1, b))
            else:
                assert (q, m) == divmod(a, b)
                assert math.copysign(1, m) == math.copysign(1, divmod(a, b)[1])
    assert next(out).split() == ["0", "-0", "nan"]


WRAPPING = {32: ("i32", "int", [0, 1, -1, 2, -2, 3, 65536, 2**31 - 1, -2**31]),
            64: ("i64", "long long", [0, 1, -1, 2, -2, 3, 2**32, 2**63 - 1, -2**63])}


def wrapping_kernel():
    """add, sub, mul, neg and abs of i32 and i64 scalars, each stored so it is printed."""
    lines = []
    for bits, (t, _, _) in WRAPPING.items():
        for name in ("add", "sub", "mul"):
            lines.append(f"%{name}{bits} = binary(%a{bits}, %b{bits}) {{op = {name}}} : {t}")
        for name in ("neg", "abs"):
            lines.append(f"%{name}{bits} = unary(%a{bits}) {{op = {name}}} : {t}")
        for k, name in enumerate(("add", "sub", "mul", "neg", "abs")):
            lines.append(f"%c{k}_{bits} = const {{value = {k}}} : i32")
            lines.append(f"store_at(%out{bits}, %{name}{bits}, %c{k}_{bits})")
    params = ", ".join(f"%a{bits}: {t}, %b{bits}: {t}, "
                       f"%out{bits}: buffer<global, {t}, [?], strides=[1]>"
                       for bits, (t, _, _) in WRAPPING.items())
    return kernel("wrapping", params, "\n".join(f"{line} loc(2:4)" for line in lines))


@needs_gxx
def test_printed_integer_arithmetic_wraps_as_on_the_cpu(tmp_path):
    """The printer's own expressions for signed 32- and 64-bit add, sub, mul, neg and abs,
    run on the host at the overflow edges (INT_MAX + 1, INT_MIN * -1, -INT_MIN, abs(MIN)):
    they wrap as the CPU's LLVM IR does, where C's operators would be undefined behaviour
    (the UB sanitizer aborts on them; -O2 may assume they cannot overflow)."""
    source, _ = print_cuda(wrapping_kernel(), "sm_90a")
    printed = dict(re.findall(r"const (?:int|long long) (\w+) = (.+);",
                              "\n".join(body_lines(source))))
    code = []
    for bits, (_, c_type, values) in WRAPPING.items():
        for name in ("add", "sub", "mul", "neg", "abs"):
            code.append(f"{c_type} {name}{bits}({c_type} a{bits}, {c_type} b{bits}) "
                        f"{{ return {printed[f'{name}{bits}']}; }}")
        listing = ", ".join(f"{v}LL" if v != -2**63 else "LLONG_MIN" for v in values)
        code.append(f"void run{bits}() {{\n"
                    f"  const long long values[] = {{{listing}}};\n"
                    f"  for (long long x : values) for (long long y : values) {{\n"
                    f"    const {c_type} a = ({c_type})x, b = ({c_type})y;\n"
                    f"    printf(\"%lld %lld %lld %lld %lld\\n\", (long long)add{bits}(a, b), "
                    f"(long long)sub{bits}(a, b), (long long)mul{bits}(a, b), "
                    f"(long long)neg{bits}(a, b), (long long)abs{bits}(a, b));\n  }}\n}}")
    code.append("int main() { run32(); run64(); return 0; }")
    out = _run_on_host(tmp_path, "\n".join(code) + "\n")
    for bits, (_, _, values) in WRAPPING.items():
        for x in values:
            for y in values:
                want = [_py_int(op, x, y, bits=bits) for op in ("add", "sub", "mul", "neg", "abs")]
                assert [int(v) for v in next(out).split()] == want, (bits, x, y)


# (type, C type, bits, signed, values): dividends at the edges of each type.
POWER_OF_TWO = [("i32", "int", 32, True, [0, 1, -1, 7, -7, 8, -8, 2**31 - 1, -2**31]),
                ("i8", "signed char", 8, True, [0, 5, -5, 127, -128]),
                ("u32", "unsigned int", 32, False, [0, 7, 2**32 - 1])]


def power_of_two_kernel():
    """floordiv and mod of i32, i8 and u32 by 2, 8 and 16 (and by 3: the helpers)."""
    lines, params = [], []
    for t, _, _, _, _ in POWER_OF_TWO:
        params.append(f"%a_{t}: {t}, %out_{t}: buffer<global, {t}, [?], strides=[1]>")
        for k, d in enumerate((2, 8, 16, 3)):
            lines.append(f"%d{d}_{t} = const {{value = {d}}} : {t}")
            for j, name in enumerate(("floordiv", "mod")):
                lines.append(f"%{name}{d}_{t} = binary(%a_{t}, %d{d}_{t}) {{op = {name}}} : {t}")
                lines.append(f"%at{d}{name}_{t} = const {{value = {2 * k + j}}} : i32")
                lines.append(f"store_at(%out_{t}, %{name}{d}_{t}, %at{d}{name}_{t})")
    return kernel("power_of_two", ", ".join(params),
                  "\n".join(f"{line} loc(2:4)" for line in lines))


@needs_gxx
def test_floordiv_and_mod_by_a_power_of_two_print_as_shift_and_mask(tmp_path):
    """Python's // and % by a constant 2**k print as an arithmetic shift and a mask (no
    division for NVVM to simplify: the layouts' index math is full of them), and compute
    what the CPU does for negative dividends, the type's minimum and narrow types; by 3
    they stay the helpers."""
    source, _ = print_cuda(power_of_two_kernel(), "sm_90a")
    printed = dict(re.findall(r"const (?:int|signed char|unsigned int) (\w+) = (.+);",
                              "\n".join(body_lines(source))))
    assert printed["floordiv8_i32"] == "(a_i32 >> 3)" and printed["mod16_i32"] == "(a_i32 & 15)"
    assert printed["floordiv2_i8"] == "(signed char)(a_i8 >> 1)"
    assert printed["floordiv3_i32"].startswith("tj_floordiv(")
    code = []
    for t, c_type, _, _, values in POWER_OF_TWO:
        body = ", ".join(f"(long long){name}{d}_{t}" for d in (2, 8, 16, 3)
                         for name in ("floordiv", "mod"))
        defs = " ".join(f"const {c_type} {name}{d}_{t} = {printed[f'{name}{d}_{t}']};"
                        for d in (2, 8, 16, 3) for name in ("floordiv", "mod"))
        listing = ", ".join(f"{v}LL" for v in values)
        code.append(f"void run_{t}() {{\n  for (long long x : {{{listing}}}) {{\n"
                    f"    const {c_type} a_{t} = ({c_type})x; {defs}\n"
                    f"    const long long got[] = {{{body}}};\n"
                    f"    for (long long g : got) printf(\"%lld \", g);\n"
                    f"    printf(\"\\n\");\n  }}\n}}")
    code.append("int main() { " + " ".join(f"run_{t}();" for t, *_ in POWER_OF_TWO)
                + " return 0; }")
    out = _run_on_host(tmp_path, "\n".join(code) + "\n")
    for _, _, bits, signed, values in POWER_OF_TWO:
        for x in values:
            want = [_py_int(op, x, d, bits=bits, signed=signed) for d in (2, 8, 16, 3)
                    for op in ("floordiv", "mod")]
            assert [int(v) for v in next(out).split()] == want, (bits, x)


# --------------------------------------------------------------------------- backend
def test_backend_arch_and_stages():
    backend = get_backend("cuda")
    assert backend.text_stages == ("cuda", "ptx")
    assert backend.arch_id("sm_80") == "sm_80"
    if not cuda_available():
        assert backend.arch_id(None) == "sm_90a"


def _pipeline_lowers_addresses() -> bool:
    from tilejit.passes.pipeline import PIPELINE
    return any(name == "lower-addresses" for name, _ in PIPELINE)


needs_address_lowering = pytest.mark.skipif(not _pipeline_lowers_addresses(),
                                            reason="needs the lower-addresses pass")


def _spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype, device="cuda")


def _compile_example(name: str, arch: str):
    from tilejit.examples import kernels as K
    if name == "vector_add":
        return K.vector_add.compile(_spec(1000), _spec(1000), _spec(1000), BLOCK=256,
                                    target="cuda", arch=arch)
    if name == "row_softmax":
        return K.row_softmax.compile(_spec(100, 64), _spec(100, 64), BM=4, BN=64,
                                     target="cuda", arch=arch)
    if name == "layer_norm":
        return K.layer_norm.compile(_spec(64, 256), _spec(256), _spec(256), _spec(64, 256),
                                    1e-5, N=256, BM=4, BLOCK=256, target="cuda", arch=arch)
    return K.matmul.compile(_spec(128, 128), _spec(128, 128), _spec(128, 128), BM=64, BN=64,
                            BK=32, target="cuda", arch=arch)


ROWS_ON_LANES = TileLayout.parse("(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m)")


@tj.kernel
def _scale_rows(x, out):
    t = tj.fragment((8, 16), tj.float32, layout=ROWS_ON_LANES)
    tj.copy(t, x[0:8, 0:16])
    tj.mul(t, t, 2.0)
    tj.copy(out[0:8, 0:16], t)


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
def test_a_fragment_over_threads_lives_in_registers(arch, fresh_cache):
    compiled = _scale_rows.compile(_spec(8, 16), _spec(8, 16), num_warps=2, target="cuda",
                                   arch=arch)
    assert "float t[2];" in compiled.asm["cuda"]   # a thread's 2 of the 128 elements
    assert ".local" not in compiled.asm["ptx"] and compiled.metadata["spill_bytes"] == 0


# Trainium's partition (P) and free (F) axes are memory: a GPU stores them like m.
OVER_P_AND_F = TileLayout.parse("(2,1,2,2):(1@m,1@P,2@F,4@m) + 5@P - 3@F + 3@m")
PRIVATE_OVER_F = TileLayout.parse("(8,1,5,1):(10@m,-1@F,2@m,2@m)")


@tj.kernel
def _transpose_over_memory_axes(x, out, PRIVATE: tj.constexpr):
    if PRIVATE:   # a thread's own tile; the transposed view leaves the team as a result
        with tj.thread():
            t = tj.alloc_local((8, 5), tj.float32, layout=PRIVATE_OVER_F)
            tj.copy(t, x[0:8, 0:5])
            v = tj.expand_dims(t.T, 2)
            tj.copy(out[0:5, 0:8, 0:1], v)
    else:         # the CTA's fragment: shared memory per thread
        t = tj.fragment((2, 4), tj.float32, layout=OVER_P_AND_F)
        tj.copy(t, x[0:2, 0:4])
        tj.copy(out[0:4, 0:2, 0:1], tj.expand_dims(t.T, 2))


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("private", [False, True])
def test_tiles_over_memory_axes_beyond_m_compile_and_run_per_thread(arch, private, fresh_cache):
    from tilejit.ir.storage import storage_elements
    shape, layout = ((8, 5), PRIVATE_OVER_F) if private else ((2, 4), OVER_P_AND_F)
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    out = torch.full((shape[1], shape[0], 1), -1.0)
    warps = 1 if private else 4
    _transpose_over_memory_axes[(1,)](x, out, PRIVATE=private, num_warps=warps, simt=True)
    assert torch.equal(out, x.T[:, :, None])
    compiled = _transpose_over_memory_axes.compile(
        _spec(*shape), _spec(shape[1], shape[0], 1), PRIVATE=private, num_warps=warps,
        target="cuda", arch=arch)
    stored = storage_elements(shape, layout)   # over m, P and F
    if private:
        assert f"float t[{stored}];" in compiled.asm["cuda"]
    else:
        assert "tj_smem" in compiled.asm["cuda"] and compiled.metadata["shared_bytes"] >= 4 * stored


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["vector_add", "row_softmax", "layer_norm", "matmul"])
def test_examples_compile_for_cuda_without_a_gpu(name, arch, fresh_cache):
    compiled = _compile_example(name, arch)
    assert compiled.target == "cuda"
    assert f"__launch_bounds__({compiled.metadata['threads']}) {name}(" in compiled.asm["cuda"]
    ptx = compiled.asm["ptx"]
    assert ".entry " + name in ptx and "ld.global" in ptx and "st.global" in ptx
    assert isinstance(compiled.asm["cubin"], bytes) and compiled.asm["cubin"][:4] == b"\x7fELF"
    meta = compiled.metadata
    assert meta["cuda_arch"] == arch and meta["registers"] > 0 and meta["spill_bytes"] == 0
    # Every register tile is indexed statically (matmul's gemm carries a thread's
    # accumulators through its k loop), so none lives in local memory.
    assert ".local" not in ptx
    if name == "matmul":   # stages A and B; the other examples' tiles are registers
        assert meta["shared_bytes"] > 0 and "tj_smem" in compiled.asm["cuda"]
    if name in ("row_softmax", "layer_norm"):   # row reductions: warp shuffles
        assert "shfl.sync.bfly" in ptx
    assert compiled.module._functions == {}    # loading touched no driver


@needs_nvrtc
@needs_address_lowering
def test_matmul_edge_copies_print_no_division(fresh_cache):
    """The example f16 GEMM's A and B copies at the tensors' ragged edges: one rolled loop
    each with a constant bound and a check per element, no division by a run-time extent
    (they were most of NVRTC's time, BENCHMARKS.md); the kernel divides nowhere."""
    from tilejit.examples import kernels as K
    f16 = lambda: _spec(1024, 1024, dtype=tj.float16)   # noqa: E731
    compiled = K.matmul.compile(f16(), f16(), _spec(1024, 1024), BM=64, BN=64, BK=32,
                                target="cuda", arch="sm_90a")
    lines = body_lines(compiled.asm["cuda"])
    copies = [i for i, line in enumerate(lines) if line == "#pragma unroll 1"]
    assert len(copies) == 2   # A's tile (64 x 32) and B's (32 x 64): 256 chunks of 8 each
    assert all(re.fullmatch(r"for \(int \w+ = v\d+; \w+ < 256; \w+ \+= 128\) \{",
                            lines[i + 1]) for i in copies)
    assert not any(re.search(r"tj_(floordiv|mod)\(", line) for line in lines)
    assert not re.search(r"\b(div|rem)\.", compiled.asm["ptx"])
    assert compiled.metadata["spill_bytes"] == 0 and compiled.metadata["stack_frame_bytes"] == 0


SHARED_OVER_THREADS = TileLayout.parse("(2,1,4,1):(2@m,1@warpid,-1@tid_in_wg,1@warpid) "
                                       "+ 3@tid_in_wg")


@tj.kernel
def _transpose_shared_over_threads(x, out):
    t = tj.alloc_shared((2, 4), tj.float32, layout=SHARED_OVER_THREADS)
    tj.copy(t, x[0:2, 0:4])
    tj.copy(out[0:1, 0:4, 0:2], tj.expand_dims(tj.trans(t), 0))


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
def test_a_shared_source_laid_out_over_threads_is_read_by_any_thread(arch, fresh_cache):
    """The transpose's domain is dst's shape; its shared src, laid out over threads but
    stored over those axes, is read by whichever thread the cyclic split gives an element
    (only registers need their holder)."""
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    out = torch.full((1, 4, 2), -1.0)
    _transpose_shared_over_threads[(1,)](x, out, simt=True)
    assert torch.equal(out, x.T[None])
    compiled = _transpose_shared_over_threads.compile(_spec(2, 4), _spec(1, 4, 2),
                                                      target="cuda", arch=arch)
    (permute,) = [r for r in compiled.dispatch_log if r.primitive == "permute"]
    assert permute.rule == "scalar" and "tj_smem" in compiled.asm["cuda"]


# Copies on lanes 7 apart overlap the base's lanes (0, 2, 4, 6 and 8 + those): no owner per
# element, so no Owned split of the copy; the row sums are owned by warp 0's threads.
NO_OWNER_PER_ELEMENT = TileLayout.parse("(2,1,1,4):(2@P,1@warpid,8@laneid,2@laneid) "
                                        "+ R[2:7@laneid]")


@tj.kernel
def _row_sums_of_a_shared_tile_without_owners(x, out):
    t = tj.alloc_shared((2, 4), tj.float32, layout=NO_OWNER_PER_ELEMENT)
    sums = tj.alloc_shared((2,), tj.float32, layout=TileLayout.parse("(2,1):(1@P,1@warpid)"))
    tj.copy(t, x[0:2, 0:4])
    tj.reduce(sums, t, "sum", 1)
    tj.copy(out[0:2, 0], sums)


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
def test_a_shared_tile_without_owners_splits_cyclically(arch, fresh_cache):
    """Shared memory is stored over its thread axes: a copy into a tile whose layout
    names no owner per element splits cyclically over the CTA, and the reduce's owners
    read elements other threads wrote (after the barrier the hazard pass puts there)."""
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    out = torch.zeros(2, 1)
    _row_sums_of_a_shared_tile_without_owners[(1,)](x, out, simt=True)
    assert torch.equal(out[:, 0], x.sum(1))
    compiled = _row_sums_of_a_shared_tile_without_owners.compile(_spec(2, 4), _spec(2, 1),
                                                                 target="cuda", arch=arch)
    copy_in, reduce, _ = compiled.dispatch_log
    assert copy_in.distribution == "cyclic over 128 threads"
    assert reduce.distribution.startswith("owned by the threads of dst's layout")
    ptx = compiled.asm["ptx"]
    assert "st.shared.f32" in ptx and "bar.sync" in ptx and "ld.shared.f32" in ptx
    assert ".local" not in ptx and compiled.metadata["spill_bytes"] == 0


@tj.kernel
def _gemm_of_shared_operands_over_threads(a, b, out):
    ta = tj.alloc_shared((4, 6), tj.float32, layout=TileLayout.parse("(4,6):(1@warpid,1@m)"))
    tb = tj.alloc_shared((6, 8), tj.float32, layout=TileLayout.parse("(6,8):(1@m,1@laneid)"))
    c = tj.fragment((4, 8), tj.float32, layout=TileLayout.parse("(4,8):(8@laneid,1@laneid)"))
    tj.copy(ta, a[0:4, 0:6])
    tj.copy(tb, b[0:6, 0:8])
    tj.fill(c, 0.5)
    tj.gemm(c, ta, tb)
    tj.copy(out[0:4, 0:8], c)


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
def test_fma_gemm_reads_shared_operands_laid_out_over_threads(arch, fresh_cache):
    """C's owners read rows of A and columns of B that the layouts put on other warps and
    lanes: in shared memory (stored over those axes) they reach them."""
    a, b = torch.arange(24.0).reshape(4, 6) / 8, torch.arange(48.0).reshape(6, 8) / 16 - 1
    out = torch.zeros(4, 8)
    _gemm_of_shared_operands_over_threads[(1,)](a, b, out, simt=True)
    torch.testing.assert_close(out, a @ b + 0.5)
    compiled = _gemm_of_shared_operands_over_threads.compile(
        _spec(4, 6), _spec(6, 8), _spec(4, 8), target="cuda", arch=arch)
    (gemm,) = [r for r in compiled.dispatch_log if r.primitive == "gemm"]
    assert gemm.rule == "fma" and gemm.distribution.startswith("owned by the threads of C's")
    ptx = compiled.asm["ptx"]
    assert re.search(r"\bld\.shared(\.v\d)?\.f32", ptx) and re.search(r"\bfma\.rn\.f32\b", ptx)
    assert ".local" not in ptx and compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@needs_address_lowering
@pytest.mark.parametrize("arch", ARCHS)
def test_layer_norm_with_a_masked_tail_reduces_in_registers(arch, fresh_cache):
    """BLOCK > N: the centred rows are masked (``tj.where``) before the sum of squares. The
    mask (i1) and the centred tile (f32) get different blocked layouts, so the select reads
    the tile through shared memory; the fused reduce must then not be driven by that shared
    copy, whose cyclic split gives no thread the mask elements it holds."""
    from tilejit.examples import kernels as K
    n, block = 781, 1024
    x = torch.randn(3, n) + 3
    weight, bias, out = torch.randn(n), torch.randn(n), torch.empty(3, n)
    K.layer_norm[(3,)](x, weight, bias, out, 1e-5, N=n, BM=1, BLOCK=block, simt=True)
    expected = torch.nn.functional.layer_norm(x.double(), (n,), weight.double(), bias.double(),
                                              1e-5)
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-4)
    compiled = K.layer_norm.compile(_spec(3, n), _spec(n), _spec(n), _spec(3, n), 1e-5, N=n,
                                    BM=1, BLOCK=block, target="cuda", arch=arch)
    reduces = [r for r in compiled.dispatch_log if r.primitive == "reduce"]
    assert len(reduces) == 2 and all(r.rule == "shuffle" for r in reduces)
    assert "shfl.sync.bfly" in compiled.asm["ptx"] and compiled.metadata["spill_bytes"] == 0


@pytest.mark.gpu
@needs_gpu
@needs_address_lowering
def test_examples_run_on_the_gpu():
    import torch
    from tilejit.examples import kernels as K
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    K.vector_add[(4,)](x, y, out, BLOCK=256)
    torch.testing.assert_close(out, x + y)
    a, b = torch.randn(100, 64, device="cuda"), torch.empty(100, 64, device="cuda")
    K.row_softmax[(25,)](a, b, BM=4, BN=64)
    torch.testing.assert_close(b, torch.softmax(a, dim=1))
