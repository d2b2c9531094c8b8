"""The C++ helpers every printed kernel starts with: the CPU target's semantics in CUDA.

Each helper implements one rule of ``tilejit/targets/cpu/emit_native.py`` (integer
arithmetic that wraps, division and shifts that never trap, Python's floor division and
modulo, NaN-propagating float max/min, saturating float-to-int casts) or wraps one PTX
instruction sequence (mbarriers, elect). They are ``__forceinline__`` templates: constant
operands fold away, so ``tj_floordiv(i, 16)`` costs what ``i >> 4`` with a sign fix-up
costs.
"""
from __future__ import annotations

from tilejit.ir.types import ScalarType, bf16, f8e4m3, f8e5m2, f16

__all__ = ["PRELUDE", "TYPE_PRELUDES", "type_preludes"]

PRELUDE = r"""// ---- tilejit prelude: the CPU target's semantics (tilejit/targets/cuda/emit_prelude.py)
#define TJ_DEVICE __device__ __forceinline__

template <typename T> struct tj_unsigned;
template <> struct tj_unsigned<bool> { typedef unsigned char type; };
template <> struct tj_unsigned<signed char> { typedef unsigned char type; };
template <> struct tj_unsigned<unsigned char> { typedef unsigned char type; };
template <> struct tj_unsigned<short> { typedef unsigned short type; };
template <> struct tj_unsigned<unsigned short> { typedef unsigned short type; };
template <> struct tj_unsigned<int> { typedef unsigned int type; };
template <> struct tj_unsigned<unsigned int> { typedef unsigned int type; };
template <> struct tj_unsigned<long long> { typedef unsigned long long type; };
template <> struct tj_unsigned<unsigned long long> { typedef unsigned long long type; };
#define TJ_SIGNED(T) (T(-1) < T(0))

// A run of N elements moved by one vector access (load_vec_at, store_vec_at): aligned to
// its size, it is one ld/st.global.v2 or .v4 (the rule that made it proved the alignment).
template <typename T, int N> struct alignas(sizeof(T) * N) tj_vec { T v[N]; };

// Integer add, sub, mul and neg wrap modulo 2^bits, as the CPU's LLVM IR (no nsw) does.
// C++ leaves signed overflow undefined, so they compute in an unsigned type of at least
// 32 bits (a narrower one would promote to int, where u16 * u16 overflows) and convert
// back, which wraps. The unsigned operation is the same PTX instruction as the signed one.
template <typename T> struct tj_wrapping {
  typedef decltype(0u + (typename tj_unsigned<T>::type)0) type;
};
template <typename T> TJ_DEVICE T tj_add(T a, T b) {
  typedef typename tj_wrapping<T>::type U;
  return T((U)a + (U)b);
}
template <typename T> TJ_DEVICE T tj_sub(T a, T b) {
  typedef typename tj_wrapping<T>::type U;
  return T((U)a - (U)b);
}
template <typename T> TJ_DEVICE T tj_mul(T a, T b) {
  typedef typename tj_wrapping<T>::type U;
  return T((U)a * (U)b);
}
template <typename T> TJ_DEVICE T tj_neg(T a) { return tj_sub(T(0), a); }

// Integer division by zero gives 0; MIN / -1 wraps to MIN and MIN % -1 is 0 (no trap).
template <typename T> TJ_DEVICE T tj_div(T a, T b) {
  if (b == T(0)) return T(0);
  if (TJ_SIGNED(T) && b == T(-1)) return tj_neg(a);
  return T(a / b);
}
template <typename T> TJ_DEVICE T tj_rem(T a, T b) {  // C's truncating remainder
  if (b == T(0) || (TJ_SIGNED(T) && b == T(-1))) return T(0);
  return T(a % b);
}
// Python's // and %: the quotient rounds toward -inf, the remainder takes b's sign.
template <typename T> TJ_DEVICE T tj_floordiv(T a, T b) {
  T q = tj_div(a, b);
  if (TJ_SIGNED(T)) {
    T r = tj_rem(a, b);
    if (r != T(0) && (r ^ b) < 0) q = T(q - T(1));
  }
  return q;
}
template <typename T> TJ_DEVICE T tj_mod(T a, T b) {
  T r = tj_rem(a, b);
  if (TJ_SIGNED(T) && r != T(0) && (r ^ b) < 0) r = T(r + b);
  return r;
}
template <typename T> TJ_DEVICE T tj_max(T a, T b) { return a > b ? a : b; }
template <typename T> TJ_DEVICE T tj_min(T a, T b) { return a < b ? a : b; }
// Shift counts are unsigned; a count of BITS or more shifts every bit out.
template <int BITS, typename T> TJ_DEVICE T tj_shl(T a, T count) {
  typedef typename tj_unsigned<T>::type U;
  return (U)count >= (U)BITS ? T(0) : T((U)a << (U)count);
}
template <int BITS, typename T> TJ_DEVICE T tj_shr(T a, T count) {
  typedef typename tj_unsigned<T>::type U;
  U c = (U)count;
  if (TJ_SIGNED(T)) return T(a >> (c > (U)(BITS - 1) ? (U)(BITS - 1) : c));  // sign fill
  return c > (U)(BITS - 1) ? T(0) : T(a >> c);
}

// Floats: max/min propagate NaN and order -0 below +0 (torch.maximum, LLVM maximum).
template <typename T> TJ_DEVICE T tj_maximum(T a, T b) {
  if (a != a || b != b) return a + b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
template <typename T> TJ_DEVICE T tj_minimum(T a, T b) {
  if (a != a || b != b) return a + b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
// Python's float divmod (CPython's float_divmod, numpy's npy_divmod): the quotient comes
// from the exact remainder fmod, so 1.0 // 0.1 is 9.0; x // 0.0 is x / 0.0, x % 0.0 NaN.
template <typename T> TJ_DEVICE T tj_fdivmod(T a, T b, T* mod) {
  T rem = fmod(a, b);
  T quotient = (a - rem) / b;
  if (!(rem == T(0)) && ((rem < T(0)) != (b < T(0)))) { rem += b; quotient -= T(1); }
  if (rem == T(0)) rem = copysign(T(0), b);
  T fl = floor(quotient);
  if (quotient - fl > T(0.5)) fl += T(1);
  T exact = a / b;
  if (quotient == T(0)) fl = copysign(T(0), exact);
  *mod = rem;
  return b == T(0) ? exact : fl;
}
template <typename T> TJ_DEVICE T tj_ffloordiv(T a, T b) { T m; return tj_fdivmod(a, b, &m); }
template <typename T> TJ_DEVICE T tj_fmod(T a, T b) { T m; tj_fdivmod(a, b, &m); return m; }
TJ_DEVICE float tj_sigmoid(double x) { return (float)(1.0 / (1.0 + exp(-x))); }
TJ_DEVICE double tj_sigmoid64(double x) { return 1.0 / (1.0 + exp(-x)); }
TJ_DEVICE float tj_exp2_approx(float x) {
  float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y;
}

// Float -> int casts saturate and take NaN to 0 (cvt.rzi does both); narrow results clamp.
TJ_DEVICE int tj_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
TJ_DEVICE unsigned tj_uclamp(unsigned v, unsigned hi) { return v > hi ? hi : v; }

// Bit patterns: atomics on floats swap bits; bools are bytes (the low bit is the value).
TJ_DEVICE unsigned tj_bits(float x) { return __float_as_uint(x); }
TJ_DEVICE unsigned long long tj_bits(double x) { return (unsigned long long)__double_as_longlong(x); }
TJ_DEVICE unsigned short tj_bits(short x) { return (unsigned short)x; }
TJ_DEVICE unsigned short tj_bits(unsigned short x) { return x; }
TJ_DEVICE unsigned tj_bits(int x) { return (unsigned)x; }
TJ_DEVICE unsigned tj_bits(unsigned x) { return x; }
TJ_DEVICE unsigned long long tj_bits(long long x) { return (unsigned long long)x; }
TJ_DEVICE unsigned long long tj_bits(unsigned long long x) { return x; }
template <typename T, typename U> TJ_DEVICE T tj_from_bits(U bits) {
  T value; memcpy(&value, &bits, sizeof(T)); return value;
}
TJ_DEVICE bool tj_bool(unsigned char byte) { return (byte & 1) != 0; }
TJ_DEVICE unsigned tj_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// mbarriers (sm_80+; transaction counts sm_90+). A phase with parity P has completed when
// the barrier's current parity differs from P.
TJ_DEVICE void tj_mbarrier_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tj_smem_addr(bar)), "r"(count) : "memory");
}
TJ_DEVICE void tj_mbarrier_arrive(unsigned long long* bar) {
  asm volatile("{\n\t.reg .b64 tj_state;\n\tmbarrier.arrive.shared::cta.b64 tj_state, [%0];\n\t}"
               :: "r"(tj_smem_addr(bar)) : "memory");
}
#if __CUDA_ARCH__ >= 900
// Thread-block clusters: the CTA's place in its cluster, from the special registers.
#define TJ_SPECIAL_REGISTER(name, reg) \
  TJ_DEVICE int name() { unsigned r; asm("mov.u32 %0, %%" reg ";" : "=r"(r)); return (int)r; }
TJ_SPECIAL_REGISTER(tj_cluster_ctarank, "cluster_ctarank")
TJ_SPECIAL_REGISTER(tj_cluster_ctaid_x, "cluster_ctaid.x")
TJ_SPECIAL_REGISTER(tj_cluster_ctaid_y, "cluster_ctaid.y")
TJ_SPECIAL_REGISTER(tj_cluster_ctaid_z, "cluster_ctaid.z")
// Distributed shared memory: p (this CTA's shared memory) at the same offset in the CTA of
// `rank`, as a generic address (ld / st reach it) or a shared::cluster one (mbarriers).
template <typename T> TJ_DEVICE T* tj_mapa(T* p, int rank) {
  unsigned long long out;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(p), "r"(rank));
  return reinterpret_cast<T*>(out);
}
TJ_DEVICE unsigned tj_mapa_shared(const void* p, int rank) {
  unsigned out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(out) : "r"(tj_smem_addr(p)), "r"(rank));
  return out;
}
TJ_DEVICE void tj_mbarrier_arrive_cluster(unsigned remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(remote) : "memory");
}
TJ_DEVICE void tj_mbarrier_expect_tx(unsigned long long* bar, int bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(tj_smem_addr(bar)), "r"(bytes) : "memory");
}
TJ_DEVICE void tj_mbarrier_arrive_expect_tx(unsigned long long* bar, int bytes) {
  asm volatile("{\n\t.reg .b64 tj_state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 tj_state, [%0], %1;\n\t}"
               :: "r"(tj_smem_addr(bar)), "r"(bytes) : "memory");
}
TJ_DEVICE bool tj_mbarrier_try_wait(unsigned long long* bar, int parity) {
  unsigned done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(tj_smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}
TJ_DEVICE bool tj_elect_sync(unsigned mask) {
  unsigned elected;
  asm volatile("{\n\t.reg .pred p;\n\telect.sync _|p, %1;\n\tselp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(elected) : "r"(mask));
  return elected != 0;
}
#else
TJ_DEVICE bool tj_mbarrier_try_wait(unsigned long long* bar, int parity) {
  unsigned done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(tj_smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}
TJ_DEVICE bool tj_elect_sync(unsigned mask) {  // the lowest lane of the mask, as elect.sync
  return (threadIdx.x & 31) == (unsigned)(__ffs(mask) - 1);
}
#endif
TJ_DEVICE void tj_mbarrier_wait(unsigned long long* bar, int phase) {
  while (!tj_mbarrier_try_wait(bar, phase & 1)) {
  }
}
// ---- end of prelude
"""

# Each 16-bit float type's header and helpers, printed only for a kernel that holds values of
# the type: cuda_fp16.h and cuda_bf16.h are a quarter of NVRTC's time for an empty
# kernel (BENCHMARKS.md, "cold compile"). f16 and bf16 values are computed in f32 and
# rounded once per op, as on the CPU; tj_bits gives their bit patterns (atomics, mma packing).
F16_PRELUDE = r"""#include <cuda_fp16.h>
TJ_DEVICE float tj_f32(__half x) { return __half2float(x); }
TJ_DEVICE unsigned short tj_bits(__half x) { return __half_as_ushort(x); }
"""
BF16_PRELUDE = r"""#include <cuda_bf16.h>
TJ_DEVICE float tj_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
TJ_DEVICE unsigned short tj_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
"""
# fp8 (cuda_fp8.h): e4m3fn saturates to +-448 (it has no inf), e5m2 overflows to inf, as
# the CPU's conversions (and torch's casts) do.
FP8_PRELUDE = r"""#include <cuda_fp8.h>
TJ_DEVICE float tj_f32(__nv_fp8_e4m3 x) { return float(x); }
TJ_DEVICE float tj_f32(__nv_fp8_e5m2 x) { return float(x); }
TJ_DEVICE unsigned char tj_bits(__nv_fp8_e4m3 x) { return x.__x; }
TJ_DEVICE unsigned char tj_bits(__nv_fp8_e5m2 x) { return x.__x; }
TJ_DEVICE __nv_fp8_e4m3 tj_to_e4m3(float x) {
  __nv_fp8_e4m3 r; r.__x = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); return r;
}
TJ_DEVICE __nv_fp8_e5m2 tj_to_e5m2(float x) {
  __nv_fp8_e5m2 r; r.__x = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2); return r;
}
TJ_DEVICE __nv_fp8_e4m3 tj_to_e4m3(double x) {
  __nv_fp8_e4m3 r; r.__x = __nv_cvt_double_to_fp8(x, __NV_SATFINITE, __NV_E4M3); return r;
}
TJ_DEVICE __nv_fp8_e5m2 tj_to_e5m2(double x) {
  __nv_fp8_e5m2 r; r.__x = __nv_cvt_double_to_fp8(x, __NV_NOSAT, __NV_E5M2); return r;
}
"""

TYPE_PRELUDES = {f16: F16_PRELUDE, bf16: BF16_PRELUDE, f8e4m3: FP8_PRELUDE, f8e5m2: FP8_PRELUDE}


def type_preludes(types: set[ScalarType]) -> str:
    """The sections of :data:`TYPE_PRELUDES` that a kernel holding values of ``types`` needs,
    each once, in the table's order."""
    sections = dict.fromkeys(TYPE_PRELUDES[t] for t in TYPE_PRELUDES if t in types)
    return "".join(sections)
