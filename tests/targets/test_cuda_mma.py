"""mma_sync printed by the cuda target: one inline-PTX mma.sync.aligned with the 16-bit A and
B values packed in pairs into 32-bit registers (8-bit e4m3/e5m2 ones in fours, m16n8k32);
NVRTC compiles it for sm_80 and sm_90a (m16n8k32: sm_90a) without spills; below the
shape's first arch it is a located error. The kernel is textual per-thread IR whose lanes
read their fragments from tensors (x: 8 A values per lane, y: 4 B, z: 4 C; 16 and 8 for
m16n8k32) and write their D values to d."""
import pytest
from support.gpu import needs_nvrtc

from tilejit.errors import CompilationError
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.targets.cuda.emit import print_cuda
from tilejit.targets.cuda.nvrtc import compile_cuda

FRAGMENTS = {"m16n8k16": (("x", "a", 8), ("y", "b", 4), ("z", "c", 4)),
             "m16n8k32": (("x", "a", 16), ("y", "b", 8), ("z", "c", 4))}


def mma_kernel(dtype: str, b_dtype: str | None = None, shape: str = "m16n8k16"):
    types = {"a": dtype, "b": b_dtype or dtype, "c": "f32"}
    params = ", ".join(f"%{name}: buffer<global, {types[part]}, [?], strides=[1]>"
                       for name, part, _ in FRAGMENTS[shape])
    lines = [f'kernel @mma({params}, %d: buffer<global, f32, [?], strides=[1]>) '
             '{distribution = "per_thread", num_warps = 1} loc("/src/k.py":1:0) {',
             "  %lane = thread_index {kind = lane_id} : i32 loc(2:4)"]
    values = []
    for name, part, count in FRAGMENTS[shape]:
        lines.append(f"  %{part}n = const {{value = {count}}} : i32 loc(3:4)")
        lines.append(f"  %{part}0 = binary(%lane, %{part}n) {{op = mul}} : i32 loc(3:4)")
        for i in range(count):
            t = types[part]
            lines.append(f"  %{part}i{i} = const {{value = {i}}} : i32 loc(3:4)")
            lines.append(f"  %{part}o{i} = binary(%{part}0, %{part}i{i}) {{op = add}} : i32 "
                         "loc(3:4)")
            lines.append(f"  %{part}v{i} = load_at(%{name}, %{part}o{i}) : {t} loc(3:4)")
            values.append(f"%{part}v{i}")
    lines.append(f"  %d0, %d1, %d2, %d3 = mma_sync({', '.join(values)}) {{shape = {shape}, "
                 f"a_type = {types['a']}, b_type = {types['b']}, c_type = f32}} : f32, f32, "
                 "f32, f32 loc(4:4)")
    for i in range(4):
        lines.append(f"  store_at(%d, %d{i}, %co{i}) loc(5:4)")
    return verify(parse_kernel("\n".join(lines + ["}"])))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mma_sync_prints_as_one_inline_ptx_instruction(dtype):
    source, _ = print_cuda(mma_kernel(dtype), "sm_90a")
    (line,) = [line.strip() for line in source.splitlines() if "mma.sync" in line]
    assert line.startswith(f'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32 '
                           '{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"')
    assert '"=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)' in line
    assert '"r"(((unsigned)tj_bits(av1) << 16 | tj_bits(av0)))' in line   # a0 in the low half
    assert '"f"(cv3)' in line


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_nvrtc_compiles_it_to_mma_sync_without_spills(dtype, arch):
    source, entry = print_cuda(mma_kernel(dtype), arch)
    program = compile_cuda(source, arch)
    assert any(line.strip().startswith(f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}."
                                       f"{dtype}.f32")
               for line in program.ptx.splitlines())
    usage = program.resources()[entry]
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0


def test_below_sm_80_it_is_a_located_error():
    with pytest.raises(CompilationError, match="needs sm_80 or later; compiling for sm_75") \
            as info:
        print_cuda(mma_kernel("f16"), "sm_75")
    assert info.value.line == 4


@pytest.mark.parametrize("a_type, b_type", [("f8e4m3", "f8e5m2"), ("f8e5m2", "f8e4m3")])
def test_fp8_mma_sync_packs_four_values_to_a_register(a_type, b_type):
    source, _ = print_cuda(mma_kernel(a_type, b_type, "m16n8k32"), "sm_90a")
    (line,) = [line.strip() for line in source.splitlines() if "mma.sync" in line]
    ptx_a, ptx_b = a_type[2:], b_type[2:]
    assert line.startswith(f'asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.{ptx_a}.'
                           f'{ptx_b}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, '
                           '{%10, %11, %12, %13};"')
    # a0 in the lowest byte of the first register, b7 in the highest of the last
    assert ('"r"(((unsigned)tj_bits(av3) << 24 | (unsigned)tj_bits(av2) << 16 | '
            '(unsigned)tj_bits(av1) << 8 | tj_bits(av0)))') in line
    assert ('"r"(((unsigned)tj_bits(bv7) << 24 | (unsigned)tj_bits(bv6) << 16 | '
            '(unsigned)tj_bits(bv5) << 8 | tj_bits(bv4)))') in line


@needs_nvrtc
def test_nvrtc_compiles_fp8_mma_sync_for_sm_90a():
    source, entry = print_cuda(mma_kernel("f8e4m3", "f8e4m3", "m16n8k32"), "sm_90a")
    program = compile_cuda(source, "sm_90a")
    assert any(line.strip().startswith("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32")
               for line in program.ptx.splitlines())
    usage = program.resources()[entry]
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0


def test_fp8_mma_sync_below_sm_89_is_a_located_error():
    with pytest.raises(CompilationError, match="needs sm_89 or later; compiling for sm_80") \
            as info:
        print_cuda(mma_kernel("f8e4m3", "f8e5m2", "m16n8k32"), "sm_80")
    assert info.value.line == 4


def ldmatrix_kernel(num: int, trans: bool, dtype: str = "f16"):
    """Each lane names row lane % 8 of a shared [32, 16 bytes] tile and stores its values."""
    row = 16 if dtype.startswith("f8") else 8
    count = num * row // 4   # one 32-bit register (4 bytes of a row) of each matrix
    names = ", ".join(f"%v{i}" for i in range(count))
    flag = ", trans = true" if trans else ""
    lines = [f'kernel @rows(%y: buffer<global, {dtype}, [?], strides=[1]>) '
             '{num_warps = 1, distribution = "per_thread"} loc("/src/k.py":1:0) {',
             f"  %s = alloc {{scope = shared, dtype = {dtype}, shape = [32, {row}], offset = 0}}"
             f" : buffer<shared, {dtype}, [32, {row}]> loc(2:4)",
             "  %lane = thread_index {kind = lane_id} : i32 loc(3:4)",
             f"  %eight = const {{value = {row}}} : i32 loc(3:4)",
             "  %row = binary(%lane, %eight) {op = mul} : i32 loc(3:4)",
             f"  {names} = ldmatrix_at(%s, %row) {{num = {num}{flag}}} : "
             f"{', '.join([dtype] * count)} loc(4:4)",
             f"  %n = const {{value = {count}}} : i32 loc(5:4)",
             "  %first = binary(%lane, %n) {op = mul} : i32 loc(5:4)"]
    for i in range(count):
        lines += [f"  %i{i} = const {{value = {i}}} : i32 loc(5:4)",
                  f"  %o{i} = binary(%first, %i{i}) {{op = add}} : i32 loc(5:4)",
                  f"  store_at(%y, %v{i}, %o{i}) loc(5:4)"]
    return verify(parse_kernel("\n".join(lines + ["}"])))


@pytest.mark.parametrize("num, trans", [(4, False), (2, True), (1, False)])
def test_ldmatrix_prints_as_one_inline_ptx_instruction(num, trans):
    source, _ = print_cuda(ldmatrix_kernel(num, trans), "sm_90a")
    (line,) = [line.strip() for line in source.splitlines() if "ldmatrix" in line]
    registers = ", ".join(f"%{i}" for i in range(num))
    form = f"x{num}" + (".trans" if trans else "")
    assert line.startswith(f'asm volatile("ldmatrix.sync.aligned.m8n8.{form}.shared.b16 '
                           f'{{{registers}}}, [%{num}];"')
    assert line.endswith('"r"(tj_smem_addr(&s[row])) : "memory");')
    # value 2j is register j's low half, 2j + 1 its high half
    assert "tj_from_bits<__half>((unsigned short)((ldm >> 16) & 0xFFFFu))" in source


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_ldmatrix(arch):
    source, _ = print_cuda(ldmatrix_kernel(4, True), arch)
    ptx = [line.strip() for line in compile_cuda(source, arch).ptx.splitlines()]
    assert any(line.startswith("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") for line in ptx)


def test_8_bit_ldmatrix_unpacks_four_bytes_of_each_register():
    source, _ = print_cuda(ldmatrix_kernel(4, False, "f8e4m3"), "sm_90a")
    (line,) = [line.strip() for line in source.splitlines() if "ldmatrix" in line]
    assert line.startswith('asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 '
                           '{%0, %1, %2, %3}, [%4];"')
    # value 4j + q is byte q of register j, lowest first
    assert "tj_from_bits<__nv_fp8_e4m3>((unsigned char)(ldm & 0xFFu))" in source
    assert "tj_from_bits<__nv_fp8_e4m3>((unsigned char)((ldm_3 >> 24) & 0xFFu))" in source


@needs_nvrtc
def test_nvrtc_compiles_8_bit_ldmatrix():
    source, _ = print_cuda(ldmatrix_kernel(4, False, "f8e5m2"), "sm_90a")
    ptx = [line.strip() for line in compile_cuda(source, "sm_90a").ptx.splitlines()]
    assert any(line.startswith("ldmatrix.sync.aligned.m8n8.x4.shared.b16") for line in ptx)


def test_ldmatrix_below_sm_75_is_a_located_error():
    with pytest.raises(CompilationError, match="ldmatrix needs sm_75 or later; compiling for "
                                               "sm_70") as info:
        print_cuda(ldmatrix_kernel(4, False), "sm_70")
    assert info.value.line == 4


def stmatrix_kernel(num: int, trans: bool):
    """Each lane reads its 2 * num values from a tensor and names row lane % 8 of a shared
    [32, 8] f16 tile in one stmatrix."""
    count = 2 * num
    flag = ", trans = true" if trans else ""
    lines = ['kernel @rows(%x: buffer<global, f16, [?], strides=[1]>) '
             '{num_warps = 1, distribution = "per_thread"} loc("/src/k.py":1:0) {',
             "  %s = alloc {scope = shared, dtype = f16, shape = [32, 8], offset = 0} : "
             "buffer<shared, f16, [32, 8]> loc(2:4)",
             "  %lane = thread_index {kind = lane_id} : i32 loc(3:4)",
             "  %eight = const {value = 8} : i32 loc(3:4)",
             "  %row = binary(%lane, %eight) {op = mul} : i32 loc(3:4)",
             f"  %n = const {{value = {count}}} : i32 loc(3:4)",
             "  %first = binary(%lane, %n) {op = mul} : i32 loc(3:4)"]
    for i in range(count):
        lines += [f"  %i{i} = const {{value = {i}}} : i32 loc(3:4)",
                  f"  %o{i} = binary(%first, %i{i}) {{op = add}} : i32 loc(3:4)",
                  f"  %v{i} = load_at(%x, %o{i}) : f16 loc(3:4)"]
    values = ", ".join(f"%v{i}" for i in range(count))
    lines.append(f"  stmatrix_at(%s, %row, {values}) {{num = {num}{flag}}} loc(4:4)")
    return verify(parse_kernel("\n".join(lines + ["}"])))


@pytest.mark.parametrize("num, trans", [(4, False), (2, True), (1, False)])
def test_stmatrix_prints_as_one_inline_ptx_instruction(num, trans):
    source, _ = print_cuda(stmatrix_kernel(num, trans), "sm_90a")
    (line,) = [line.strip() for line in source.splitlines() if "stmatrix" in line]
    registers = ", ".join(f"%{i + 1}" for i in range(num))
    form = f"x{num}" + (".trans" if trans else "")
    assert line.startswith(f'asm volatile("stmatrix.sync.aligned.m8n8.{form}.shared.b16 '
                           f'[%0], {{{registers}}};" :: "r"(tj_smem_addr(&s[row])), ')
    assert line.endswith(' : "memory");') and line.count('"r"(') == num + 1
    # register j packs value 2j in its low half and 2j + 1 in its high half
    assert '"r"(((unsigned)tj_bits(v1) << 16 | tj_bits(v0)))' in line


@needs_nvrtc
def test_nvrtc_compiles_stmatrix_for_sm_90a():
    source, _ = print_cuda(stmatrix_kernel(4, True), "sm_90a")
    ptx = [line.strip() for line in compile_cuda(source, "sm_90a").ptx.splitlines()]
    assert any(line.startswith("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16") for line in ptx)


def test_stmatrix_below_sm_90_is_a_located_error():
    with pytest.raises(CompilationError, match="stmatrix needs sm_90 or later; compiling for "
                                               "sm_80") as info:
        print_cuda(stmatrix_kernel(4, False), "sm_80")
    assert info.value.line == 4
