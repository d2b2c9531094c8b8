"""packed_binary / packed_cast printed by the cuda target: one inline-PTX f16x2/bf16x2
instruction on the pair packed into a 32-bit register (the first value in the low half),
the two results unpacked from it; bf16 add/sub/mul before sm_90 as one fma.rn.bf16x2 with
its bf16x2 constant; NVRTC compiles each for sm_80 and sm_90a; an arch without the
instruction is a located error. The kernels are textual per-thread IR."""
import pytest
from support.gpu import needs_nvrtc

from tilejit.errors import CompilationError
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.targets.cuda.emit import print_cuda
from tilejit.targets.cuda.nvrtc import compile_cuda


def pair_kernel(dtype: str, op: str):
    """Lane l adds (or ...) elements 2l, 2l + 1 of x and y into out."""
    buffer = f"buffer<global, {dtype}, [?], strides=[1]>"
    lines = [f"kernel @pairs(%x: {buffer}, %y: {buffer}, %out: {buffer}) "
             '{distribution = "per_thread", num_warps = 1} loc("/src/k.py":1:0) {',
             "  %lane = thread_index {kind = lane_id} : i32 loc(2:4)",
             "  %two = const {value = 2} : i32 loc(2:4)",
             "  %one = const {value = 1} : i32 loc(2:4)",
             "  %i0 = binary(%lane, %two) {op = mul} : i32 loc(2:4)",
             "  %i1 = binary(%i0, %one) {op = add} : i32 loc(2:4)"]
    for name in ("x", "y"):
        for i in (0, 1):
            lines.append(f"  %{name}{i} = load_at(%{name}, %i{i}) : {dtype} loc(3:4)")
    lines.append(f"  %r0, %r1 = packed_binary(%x0, %x1, %y0, %y1) {{op = {op}}} : {dtype}, "
                 f"{dtype} loc(4:4)")
    lines += [f"  store_at(%out, %r{i}, %i{i}) loc(5:4)" for i in (0, 1)]
    return verify(parse_kernel("\n".join(lines + ["}"])))


def cast_kernel(dtype: str):
    lines = ["kernel @rounds(%x: buffer<global, f32, [?], strides=[1]>, "
             f"%out: buffer<global, {dtype}, [?], strides=[1]>) "
             '{distribution = "per_thread", num_warps = 1} loc("/src/k.py":1:0) {',
             "  %lane = thread_index {kind = lane_id} : i32 loc(2:4)",
             "  %x0 = load_at(%x, %lane) : f32 loc(3:4)",
             "  %x1 = load_at(%x, %lane) : f32 loc(3:4)",
             f"  %h0, %h1 = packed_cast(%x0, %x1) {{to = {dtype}}} : {dtype}, {dtype} "
             "loc(4:4)",
             "  store_at(%out, %h0, %lane) loc(5:4)",
             "  store_at(%out, %h1, %lane) loc(5:4)"]
    return verify(parse_kernel("\n".join(lines + ["}"])))


def unary_kernel(dtype: str, op: str):
    buffer = f"buffer<global, {dtype}, [?], strides=[1]>"
    lines = [f"kernel @pairs(%x: {buffer}, %out: {buffer}) "
             '{distribution = "per_thread", num_warps = 1} loc("/src/k.py":1:0) {',
             "  %lane = thread_index {kind = lane_id} : i32 loc(2:4)",
             f"  %x0 = load_at(%x, %lane) : {dtype} loc(3:4)",
             f"  %x1 = load_at(%x, %lane) : {dtype} loc(3:4)",
             f"  %r0, %r1 = packed_unary(%x0, %x1) {{op = {op}}} : {dtype}, {dtype} loc(4:4)",
             "  store_at(%out, %r0, %lane) loc(5:4)",
             "  store_at(%out, %r1, %lane) loc(5:4)"]
    return verify(parse_kernel("\n".join(lines + ["}"])))


def asm_line(source: str) -> str:
    (line,) = [line.strip() for line in source.splitlines() if line.strip().startswith("asm(")]
    return line


@pytest.mark.parametrize("dtype, op, arch, text", [
    ("f16", "add", "sm_80", '"add.rn.f16x2 %0, %1, %2;"'),
    ("f16", "max", "sm_80", '"max.NaN.f16x2 %0, %1, %2;"'),
    ("bf16", "mul", "sm_90a", '"mul.rn.bf16x2 %0, %1, %2;"'),
    ("bf16", "add", "sm_80", '"fma.rn.bf16x2 %0, %1, %3, %2;"'),
    ("bf16", "sub", "sm_80", '"fma.rn.bf16x2 %0, %2, %3, %1;"'),
    ("bf16", "mul", "sm_80", '"fma.rn.bf16x2 %0, %1, %2, %3;"'),
])
def test_a_pair_prints_as_one_inline_ptx_instruction(dtype, op, arch, text):
    source, _ = print_cuda(pair_kernel(dtype, op), arch)
    line = asm_line(source)
    assert line.startswith(f"asm({text} : \"=r\"(pair) : ")
    assert '"r"(((unsigned)tj_bits(x1) << 16 | tj_bits(x0)))' in line   # x0 in the low half
    assert '"r"(((unsigned)tj_bits(y1) << 16 | tj_bits(y0)))' in line
    constant = {"add": '"r"(0x3F803F80u)', "sub": '"r"(0xBF80BF80u)', "mul": '"r"(0x80008000u)'}
    assert (constant.get(op, "") in line) if "fma" in text else "0x" not in line
    element = {"f16": "__half", "bf16": "__nv_bfloat16"}[dtype]
    assert f"tj_from_bits<{element}>((unsigned short)(pair & 0xFFFFu))" in source
    assert f"tj_from_bits<{element}>((unsigned short)(pair >> 16))" in source


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_a_cast_pair_puts_the_first_value_in_the_low_half(dtype):
    line = asm_line(print_cuda(cast_kernel(dtype), "sm_80")[0])
    assert line == (f'asm("cvt.rn.{dtype}x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(x1), '
                    '"f"(x0));')


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, op", [("f16", "sub"), ("f16", "min"), ("bf16", "add"),
                                       ("bf16", "max")])
def test_nvrtc_compiles_each_pair_to_its_packed_instruction(dtype, op, arch):
    source, _ = print_cuda(pair_kernel(dtype, op), arch)
    ptx = [line.strip() for line in compile_cuda(source, arch).ptx.splitlines()]
    native = {"sub": "sub.rn", "min": "min.NaN", "add": "add.rn", "max": "max.NaN"}[op]
    if dtype == "bf16" and op == "add" and arch == "sm_80":
        native = "fma.rn"
    assert sum(line.startswith(f"{native}.{dtype}x2 ") for line in ptx) == 1


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, op", [("f16", "neg"), ("bf16", "abs")])
def test_a_unary_pair_prints_and_compiles_to_one_instruction(dtype, op, arch):
    source, _ = print_cuda(unary_kernel(dtype, op), arch)
    assert asm_line(source) == (f'asm("{op}.{dtype}x2 %0, %1;" : "=r"(pair) : '
                                '"r"(((unsigned)tj_bits(x1) << 16 | tj_bits(x0))));')
    ptx = [line.strip() for line in compile_cuda(source, arch).ptx.splitlines()]
    assert sum(line.startswith(f"{op}.{dtype}x2 ") for line in ptx) == 1


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_nvrtc_compiles_a_cast_pair(dtype):
    source, _ = print_cuda(cast_kernel(dtype), "sm_90a")
    ptx = compile_cuda(source, "sm_90a").ptx
    assert f"cvt.rn.{dtype}x2.f32" in ptx


@pytest.mark.parametrize("kernel, arch, message", [
    (lambda: pair_kernel("f16", "max"), "sm_75", "packed_binary max on f16 pairs needs sm_80"),
    (lambda: pair_kernel("bf16", "add"), "sm_75", "packed_binary add on bf16 pairs needs sm_80"),
    (lambda: cast_kernel("f16"), "sm_75", "packed_cast of f32 pairs to f16 needs sm_80"),
    (lambda: unary_kernel("bf16", "neg"), "sm_75", "packed_unary neg on bf16 pairs needs sm_80"),
])
def test_an_arch_without_the_instruction_is_a_located_error(kernel, arch, message):
    with pytest.raises(CompilationError, match=f"{message} or later; compiling for {arch}") \
            as info:
        print_cuda(kernel(), arch)
    assert info.value.line == 4
