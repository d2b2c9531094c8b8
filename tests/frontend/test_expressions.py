"""Expressions: typing and promotion, constexpr folding, names, calls, attributes."""
from tilejit.frontend import compile_to_ir_with_deps
from tilejit.frontend import language as tj
from tilejit.ir.types import BufferType, bf16, f64, i1, i8, u8

from .helpers import S, T, build, f16, f32, i32, i64, line_of, op_lines, ops

SCALE = 3            # module-level constants a kernel reads (recorded for the cache key)
OUT_DTYPE = tj.float16
WRAPPED = tj.constexpr(5)


def types_of(kernel, name):
    return [op.result.type for op in ops(kernel, name)]


def test_literals_adopt_the_other_operand_type():
    def kernel(x_f16, n_i64, flag):
        a = x_f16 * 2.0
        b = n_i64 + 1
        c = x_f16 + 1
        d = n_i64 * 0.5       # a float literal makes an int float (f32)
        e = flag + 1          # bools count as ints
    k = build(kernel, {"x_f16": S(f16), "n_i64": S(i64), "flag": S(i1)})
    assert [op.result.type for op in ops(k, "binary")] == [f16, i64, f16, f32, i32]
    assert [op.attrs["value"] for op in ops(k, "const")][:2] == [2.0, 1]


def test_two_run_time_types_promote():
    def kernel(a, b, c, d):
        x = a + b             # i32 + i64 -> i64
        y = c * d             # f16 + bf16 -> f32
        z = a / a             # int / int divides in f32
        w = a // 2 + a % 3
    k = build(kernel, {"a": S(i32), "b": S(i64), "c": S(f16), "d": S(bf16)})
    assert [op.result.type for op in ops(k, "cast")] == [i64, f32, f32, f32, f32]
    assert [op.attrs["op"] for op in ops(k, "binary")] == ["add", "mul", "div", "floordiv",
                                                          "mod", "add"]


def test_constexpr_arithmetic_folds():
    def kernel(x, BLOCK: tj.constexpr, N: tj.constexpr = 10):
        half = BLOCK // 2 + N % 3 - SCALE ** 2
        x[0] = half * 1.5
    k = build(kernel, {"x": T(f32, 1)}, {"BLOCK": 64})
    assert ops(k, "binary") == []
    assert [op.attrs["value"] for op in ops(k, "const")] == [0, (32 + 1 - 9) * 1.5]
    assert k.attrs["constexprs"] == {"BLOCK": 64, "N": 10}


def test_bitwise_comparisons_and_unary():
    def kernel(a, b, out):
        out[0] = (a << 2) | (b >> 1) & ~a ^ 7
        out[1] = -a
        out[2] = (a < b) + (not a)
    k = build(kernel, {"a": S(i32), "b": S(i32), "out": T(i32, 1)})
    kinds = [op.attrs["op"] for op in ops(k, "binary")]
    assert kinds[:5] == ["shl", "shr", "and", "xor", "or"]   # a<<2 | ((b>>1) & ~a) ^ 7
    assert [op.attrs["op"] for op in ops(k, "unary")] == ["not", "neg", "not"]
    assert [op.attrs["pred"] for op in ops(k, "cmp")] == ["lt", "ne"]


def test_and_or_on_ir_values_are_bitwise_on_i1():
    def kernel(a, b, out):
        out[0] = a > 0 and b > 0 or a == b
    k = build(kernel, {"a": S(i32), "b": S(i32), "out": T(i1, 1)})
    assert [op.attrs["op"] for op in ops(k, "binary")] == ["and", "or"]
    assert all(op.result.type == i1 for op in ops(k, "binary"))


def test_and_or_on_constexprs_keep_python_semantics():
    def kernel(out, A: tj.constexpr = 0, B: tj.constexpr = 7):
        out[0] = A or B         # 7
        out[1] = A and B[0]     # short-circuits: B[0] would fail
        out[2] = 1 < B < 10 and not A
    k = build(kernel, {"out": T(i32, 1)})
    assert [op.attrs["value"] for op in ops(k, "const")] == [0, 7, 1, 0, 2, 1]


def test_compile_time_and_run_time_operands_mix_without_extra_ops():
    def kernel(a, out, FLAG: tj.constexpr = True):
        if FLAG and a > 0:
            out[0] = 1
    k = build(kernel, {"a": S(i32), "out": T(i32, 1)})
    assert ops(k, "binary") == []     # `True and c` is just c


def test_chained_comparison():
    def kernel(a, out):
        out[0] = 0 <= a < 10
    k = build(kernel, {"a": S(i32), "out": T(i1, 1)})
    assert [op.attrs["pred"] for op in ops(k, "cmp")] == ["le", "lt"]
    assert [op.attrs["op"] for op in ops(k, "binary")] == ["and"]


def test_ternary_is_a_select_or_folds():
    def kernel(a, out, BIG: tj.constexpr = False):
        out[0] = a if a > 0 else 0.5
        out[1] = 1 if BIG else 2
    k = build(kernel, {"a": S(i32), "out": T(f32, 1)})
    select, = ops(k, "select")
    assert select.result.type == f32
    assert op_lines(k, "store")[1].startswith("store(%out, %")


def test_power_expands_small_exponents():
    def kernel(a, out):
        out[0] = a ** 3
    k = build(kernel, {"a": S(f32), "out": T(f32, 1)})
    assert [op.attrs["op"] for op in ops(k, "binary")] == ["mul"] * 3


def test_tuples_unpacking_and_augmented_assignment():
    def kernel(x, out):
        n, = x.shape
        a, (b, c) = 1, (2, n)
        a += b
        c -= 1
        out[0] = a + c
        out[1] += 2.0
    k = build(kernel, {"x": T(f32, 1), "out": T(f32, 1)})
    assert len(ops(k, "buffer_dim")) == 1
    load, = ops(k, "load")
    store = ops(k, "store")[-1]
    assert load.operands[0].name_hint == "out" and store.operands[1].owner.name == "binary"


def test_shape_strides_and_dtype_of_tensors():
    def kernel(x, out):
        tj.static_assert(x.dtype == tj.float16, "dtype is folded")
        out[0] = x.shape[0] + x.strides[0] + x.shape[1] * x.strides[1]
    k = build(kernel, {"x": T(f16, 2, shape=(None, 8), unit_stride=True), "out": T(i64, 1)})
    assert [op.attrs["dim"] for op in ops(k, "buffer_dim")] == [0]
    assert [op.attrs["dim"] for op in ops(k, "buffer_stride")] == [0]
    assert k.params[0].type == BufferType(f16, (None, 8), k.params[0].type.scope,
                                          strides=(None, 1))


def test_module_globals_are_folded_and_recorded():
    import math

    def kernel(out):
        out[0] = SCALE + WRAPPED + math.pi
        y = tj.fragment((4,), OUT_DTYPE)
    k, deps = compile_to_ir_with_deps(kernel, {"out": T(f32, 1)})
    assert ops(k, "const")[-1].attrs["value"] == SCALE + 5 + 3.141592653589793
    assert deps.globals == {"SCALE": 3, "WRAPPED": 5, "math.pi": 3.141592653589793,
                            "OUT_DTYPE": f16}


@tj.func
def scaled(v, factor: tj.constexpr = 2):
    doubled = v * factor
    return doubled + 1


@tj.func
def twice_scaled(v):
    return scaled(scaled(v), factor=3)


def test_device_functions_are_inlined_with_their_own_locations():
    def kernel(a, out):
        out[0] = twice_scaled(a)
    k, deps = compile_to_ir_with_deps(kernel, {"a": S(i32), "out": T(i32, 1)})
    assert [f.fn.__name__ for f in deps.functions] == ["twice_scaled", "scaled"]
    muls = ops(k, "binary")[::2]
    assert [op.attrs["op"] for op in muls] == ["mul", "mul"]
    assert {op.loc.line for op in muls} == {line_of(scaled.fn, "v * factor")}
    assert muls[0].result.name_hint == "doubled"


def test_python_builtins_fold_or_build_ir():
    def kernel(a, b, out):
        out[0] = max(a, b) + min(a, 3) + abs(a) + len((1, 2)) + int(2.7)
        out[1] = float(a) > 0.0
    k = build(kernel, {"a": S(i32), "b": S(i32), "out": T(f32, 1)})
    assert [op.attrs["op"] for op in ops(k, "binary")][:2] == ["max", "min"]
    assert [op.attrs["op"] for op in ops(k, "unary")] == ["abs"]


def test_cdiv_works_in_and_out_of_kernels():
    assert tj.cdiv(10, 4) == 3

    def kernel(n, out, B: tj.constexpr = 4):
        out[0] = tj.cdiv(n, B) + tj.cdiv(10, B)
    k = build(kernel, {"n": S(i32), "out": T(i32, 1)})
    assert [op.attrs["op"] for op in ops(k, "binary")] == ["add", "sub", "floordiv", "add"]
    assert 3 in [op.attrs["value"] for op in ops(k, "const")]


def test_thread_ids_intrinsics_and_prints():
    def kernel(out):
        t = tj.thread_id() + tj.lane_id() + tj.warp_id_in_wg() + tj.num_ctas(1)
        p = tj.program_id(2) + tj.cta_id_in_cluster(0)
        r = tj.ptx.mov_u32(t, 7, dtype=tj.int32)
        tj.nki.barrier()
        tj.device_print(f"t={SCALE}", t, 1.5)
        out[0] = r + p
    k = build(kernel, {"out": T(i32, 1)})
    kinds = [(op.attrs["kind"], op.attrs["dim"]) for op in ops(k, "thread_index")]
    assert kinds == [("thread_id", 0), ("lane_id", 0), ("warp_id_in_wg", 0), ("num_ctas", 1),
                     ("cta_id", 2), ("cta_id_in_cluster", 0)]
    mov, barrier = ops(k, "intrinsic")
    assert (mov.attrs["target"], mov.attrs["name"], mov.result.type) == ("cuda", "mov_u32", i32)
    assert (barrier.attrs["target"], barrier.results) == ("nki", ())
    printed, = ops(k, "device_print")
    assert printed.attrs["fmt"] == "t=3" and len(printed.operands) == 2


def test_element_access_casts_to_the_buffer_dtype():
    def kernel(x, y):
        smem = tj.alloc_shared((4, 8), tj.int8)
        smem[1, 2] = x[3] * 2
        local = tj.alloc_local((2,), tj.uint8)
        local[0] = smem[1, 2]
        y[0] = local[0]
    k = build(kernel, {"x": T(f32, 1), "y": T(f64, 1)})
    assert [op.result.type for op in ops(k, "cast")] == [i8, u8, f64]
    assert [len(op.operands) for op in ops(k, "store")] == [4, 3, 3]


def test_annotated_assignments():
    def kernel(a, out):
        x: tj.float16 = a
        y: tj.constexpr = 4
        z: int = a
        out[0] = x + y + z
    k = build(kernel, {"a": S(i32), "out": T(f16, 1)})
    assert ops(k, "cast")[0].result.type == f16


def test_fragment_expressions_broadcast_and_promote():
    def kernel(x):
        a = tj.fragment((8, 1), tj.float16)
        b = tj.fragment((8, 16), tj.float32)
        c = tj.fragment((16,), tj.int32)
        s = a + b             # (8, 16) f32
        t = -(c * 2) / 3      # int tile / int -> f32
        u = tj.exp2(c)        # float-only op on ints -> f32
        v = tj.maximum(b, 0.0)
        w = tj.select(a, b, 1.0)
        z = tj.fma(b, b, c)
        q = tj.cast(c, tj.float16)
        r = abs(b) + max(b, a)
    k = build(kernel, {"x": S(f32)})
    news = [(op.result.type.shape, op.result.type.dtype) for op in ops(k, "alloc")][3:]
    assert news == [((8, 16), f32), ((16,), i32), ((16,), i32), ((16,), f32), ((16,), f32),
                    ((8, 16), f32), ((8, 16), f32), ((8, 16), f32), ((16,), f16),
                    ((8, 16), f32), ((8, 16), f32), ((8, 16), f32)]
    pointwise = [op.attrs["op"] for op in ops(k, "tile.pointwise")]
    assert pointwise == ["add", "mul", "neg", "div", "exp2", "maximum", "select", "fma", "cast",
                         "abs", "maximum", "add"]
    scalar_srcs = [op.operands[2].type for op in ops(k, "tile.pointwise")
                   if op.attrs["op"] in ("mul", "div", "maximum")][:3]
    assert scalar_srcs == [i32, f32, f32]


def test_scalar_forms_of_pointwise_builtins():
    def kernel(a, b, out):
        out[0] = tj.add(a, b) + tj.exp(a) + tj.sqrt(2.0) + tj.select(a > b, a, b) + tj.fma(a, b, 1)
        out[1] = tj.cast(a, tj.int8) + tj.neg(b) + tj.minimum(a, b)
    k = build(kernel, {"a": S(f32), "b": S(f32), "out": T(f32, 1)})
    assert [op.attrs["op"] for op in ops(k, "unary")] == ["exp", "neg"]
    assert 2.0 ** 0.5 in [op.attrs["value"] for op in ops(k, "const")]
    assert ops(k, "select") and ops(k, "cast")[0].result.type == i8
