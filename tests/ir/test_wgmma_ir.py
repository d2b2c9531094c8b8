"""The wgmma ops: the shared-memory matrix descriptor's bit fields (PTX ISA "Matrix
Descriptor Format"), the canonical layouts it describes, the ops' text round trip and the
verifier's refusals."""
import pytest
from support.wgmma_kernels import wgmma_kernel

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.ops_wgmma import MatrixDescriptor

A = MatrixDescriptor(0, 128, 256)
B = MatrixDescriptor(2048, 128, 256)


def test_descriptor_fields_sit_at_the_ptx_bits():
    bits = MatrixDescriptor(start=0x1230, lbo=0x40, sbo=0x400, swizzle=128,
                            base_offset=5).encode()
    assert bits & 0x3FFF == 0x123            # start >> 4, bits 0-13
    assert bits >> 16 & 0x3FFF == 0x4        # leading byte offset >> 4, bits 16-29
    assert bits >> 32 & 0x3FFF == 0x40       # stride byte offset >> 4, bits 32-45
    assert bits >> 49 & 7 == 5               # base offset, bits 49-51
    assert bits >> 62 == 1                   # 128B swizzle is 1
    for swizzle, code in ((0, 0), (64, 2), (32, 3)):
        assert MatrixDescriptor(0, 16, 16, swizzle).encode() >> 62 == code
    # nothing else is set
    assert bits & ~(0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 7 << 49 | 3 << 62) == 0


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_decode_inverts_encode(swizzle):
    fields = MatrixDescriptor(start=0x3FFF0, lbo=0x10, sbo=0x3FFF0, swizzle=swizzle,
                              base_offset=3)
    assert MatrixDescriptor.decode(fields.encode()) == fields


@pytest.mark.parametrize("fields, message", [
    (MatrixDescriptor(8, 16, 16), "start = 8 bytes"),
    (MatrixDescriptor(0, 1 << 18, 16), "lbo = 262144 bytes"),
    (MatrixDescriptor(0, 16, 16, swizzle=16), "swizzle is 0, 32, 64 or 128"),
    (MatrixDescriptor(0, 16, 16, base_offset=8), "base offset is 3 bits"),
])
def test_fields_that_do_not_fit_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        fields.encode()


def test_k_major_core_matrices_without_swizzle():
    """8 rows of 16 bytes each, contiguous; LBO to the next along K, SBO along M."""
    d = MatrixDescriptor(0, lbo=128, sbo=256)
    assert [d.element_address(r, 0, 2, True) for r in range(9)] == \
        [16 * r for r in range(8)] + [256]
    assert [d.element_address(0, k, 2, True) for k in (0, 7, 8, 15)] == [0, 14, 128, 142]


def test_k_major_128b_swizzle_xors_chunks_with_the_row():
    d = MatrixDescriptor(0, lbo=16, sbo=1024, swizzle=128)
    # row 1: its 16-byte chunk 0 moves to chunk 1; row 8 starts the next atom (SBO)
    assert d.element_address(1, 0, 2, True) == 128 + 16
    assert d.element_address(1, 8, 2, True) == 128
    assert d.element_address(8, 0, 2, True) == 1024
    assert d.element_address(3, 20, 2, True) == 3 * 128 + ((40 // 16) ^ 3) * 16 + 40 % 16


def test_mn_major_layouts():
    none = MatrixDescriptor(0, lbo=256, sbo=128)
    assert [none.element_address(mn, 0, 2, False) for mn in (0, 7, 8)] == [0, 14, 128]
    assert [none.element_address(0, k, 2, False) for k in (1, 8)] == [16, 256]
    wide = MatrixDescriptor(0, lbo=2048, sbo=1024, swizzle=128)   # 64 f16 along N per row
    assert wide.element_address(63, 0, 2, False) == 126
    assert wide.element_address(64, 0, 2, False) == 2048
    assert wide.element_address(0, 8, 2, False) == 1024
    assert wide.element_address(0, 1, 2, False) == 128 + 16   # row 1's chunk 0 -> chunk 1


def test_the_ops_round_trip():
    text = wgmma_kernel(16, A, B)
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    (mma,) = [op for op in kernel.walk() if op.name == "wgmma_mma_async"]
    assert len(mma.operands) == 2 + 8 and len(mma.results) == 8
    assert mma.attrs["scale_d"] is True and mma.attrs["trans_a"] is False   # defaults
    (desc, _) = [op for op in kernel.walk() if op.name == "wgmma_desc"]
    assert (desc.attrs["lbo"], desc.attrs["sbo"], desc.attrs["swizzle"]) == (128, 256, 0)


def test_fp8_of_two_kinds_round_trips():
    """e4m3 by e5m2: B's type is its own attribute, printed only when it differs."""
    text = wgmma_kernel(16, A, B, dtype="f8e4m3").replace(
        "a_type = f8e4m3", "a_type = f8e4m3, b_type = f8e5m2")
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    (mma,) = [op for op in kernel.walk() if op.name == "wgmma_mma_async"]
    assert (str(mma.attrs["a_type"]), str(mma.attrs["b_type"])) == ("f8e4m3", "f8e5m2")


@pytest.mark.parametrize("edit, message", [
    (("n = 16", "n = 12"), "N a multiple of 8 in \\[8, 256\\], not 12"),
    (("n = 16", "n = 24"), "m64n24k16 takes 12 f32 accumulators per thread, got 8"),
    (("a_type = f16", "a_type = f32"), "f16, bf16, f8e4m3 or f8e5m2 here, not f32"),
    (("a_type = f16", "a_type = f16, b_type = bf16"), "multiplies f16 by f16, not by bf16"),
    (("a_type = f16", "a_type = f8e4m3, b_type = f16"), "f8e4m3 by f8e4m3, not by f16"),
    (("a_type = f16", "a_type = f8e4m3, trans_b = true"),
     "wgmma reads fp8 operands K-major only"),
    (("swizzle = 0", "swizzle = 16"), "swizzle is 0, 32, 64 or 128 bytes, not 16"),
    (("lbo = 128", "lbo = 120"), "lbo = 120 bytes"),
    (("pending = 0", "pending = -1"), "non-negative number of groups pending"),
    (("wgmma_desc(%sa", "wgmma_desc(%x"), "names shared memory, not global"),
])
def test_the_verifier_explains_bad_wgmma_ops(edit, message):
    text = wgmma_kernel(16, A, B).replace(*edit, 1)
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))


def test_reading_an_accumulator_before_the_wait_is_refused():
    with pytest.raises(CompilationError, match="store_at reads %c0, an accumulator of a "
                       "wgmma_commit_group still in flight") as info:
        verify(parse_kernel(wgmma_kernel(16, A, B, wait=False)))
    assert info.value.line == 9



def test_a_wait_that_keeps_groups_pending_gives_values_still_in_flight():
    """wgmma_wait_group 1 may leave the group that writes them pending."""
    text = wgmma_kernel(16, A, B).replace("{pending = 0}", "{pending = 1}")
    with pytest.raises(CompilationError, match="store_at reads %w0, an accumulator of a "
                       "wgmma_wait_group still in flight"):
        verify(parse_kernel(text))


def test_in_flight_accumulators_may_stay_in_their_registers():
    """A store into private memory keeps them (gemm_async(wait=False) leaves them there for
    the next K step); a load of them gives plain values, which wgmma-groups guards."""
    regs = ("  %regs = alloc {scope = local, dtype = f32, shape = [8]} : "
            "buffer<local, f32, [8]> loc(3:4)\n")
    text = wgmma_kernel(16, A, B, wait=False).replace("  sync loc(4:4)", regs + "  sync loc(4:4)")
    for i in range(8):
        text = text.replace(f"store_at(%d, %c{i}, %p{i})", f"store_at(%regs, %c{i}, %k{i})")
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text


WAIT_TILE_IR = """kernel @k() loc("/src/k.py":1:0) {{
  %acc = alloc {{scope = {scope}, dtype = {dtype}, shape = [64, 32]}} : buffer<{scope}, {dtype}, [64, 32]> loc(2:4)
  wgmma_wait(%acc) {{pending = {pending}}} loc(3:4)
}}"""


def test_the_tile_wait_round_trips():
    text = WAIT_TILE_IR.format(scope="fragment", dtype="f32", pending=1)
    assert str(verify(parse_kernel(text))) == text


@pytest.mark.parametrize("fields, message", [
    (dict(scope="shared", dtype="f32", pending=0), "accumulator 0 is f32 in shared memory, "
                                                     "not an f32 fragment"),
    (dict(scope="fragment", dtype="f16", pending=0), "accumulator 0 is f16 in fragment"),
    (dict(scope="fragment", dtype="f32", pending=-1), "non-negative number of groups"),
])
def test_the_verifier_explains_bad_tile_waits(fields, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(WAIT_TILE_IR.format(**fields)))
    assert info.value.line == 3


def setmaxnreg_kernel(count=232, action="inc") -> str:
    return ('kernel @k() {num_warps = 8} loc("/src/k.py":1:0) {\n'
            f'  setmaxnreg {{count = {count}, action = {action}}} loc(2:4)\n}}')


def test_setmaxnreg_round_trips():
    text = setmaxnreg_kernel()
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    (op,) = [op for op in kernel.walk() if op.name == "setmaxnreg"]
    assert (op.attrs["count"], op.attrs["action"]) == (232, "inc")


@pytest.mark.parametrize("count, action, message", [
    (20, "dec", r"a multiple of 8 registers in \[24, 256\] per thread, not 20"),
    (236, "inc", "not 236"),
    (264, "inc", "not 264"),
    (232, "up", "one of inc dec"),
])
def test_the_verifier_explains_bad_setmaxnreg(count, action, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(setmaxnreg_kernel(count, action)))
    assert info.value.line == 2


def carried_kernel(body_read: str = "", after: str = "%v0") -> str:
    """A loop keeping one m64n8k16 group in flight across iterations (wait_group 1), the
    last retired after it; ``body_read``: a line read in the body; ``after``: the value
    stored after the loop."""
    acc = ", ".join(["f32"] * 4)

    def values(prefix):
        return ", ".join(f"%{prefix}{i}" for i in range(4))
    return "\n".join([
        'kernel @k(%x: buffer<global, f32, [?], strides=[1]>) loc("/src/k.py":1:0) {',
        "  %z = const {value = 0.0} : f32 loc(2:4)",
        "  %d = const {value = 0} : i64 loc(2:4)",
        "  %lb = const {value = 0} : i32 loc(2:4)",
        "  %ub = const {value = 4} : i32 loc(2:4)",
        "  %st = const {value = 1} : i32 loc(2:4)",
        f"  {values('r')} = for(%lb, %ub, %st, %z, %z, %z, %z) : {acc} loc(3:4) {{",
        f"  ^(%i: i32, {', '.join(f'%a{i}: f32' for i in range(4))}):",
        *([body_read] if body_read else []),
        f"    {values('f')} = wgmma_fence({values('a')}) : {acc} loc(5:8)",
        f"    {values('m')} = wgmma_mma_async(%d, %d, {values('f')}) {{n = 8, a_type = f16}} : "
        f"{acc} loc(6:8)",
        f"    {values('c')} = wgmma_commit_group({values('m')}) : {acc} loc(7:8)",
        f"    {values('w')} = wgmma_wait_group({values('c')}) {{pending = 1}} : {acc} loc(8:8)",
        f"    yield({values('w')}) loc(9:8)",
        "  }",
        f"  {values('v')} = wgmma_wait_group({values('r')}) {{pending = 0}} : {acc} loc(10:4)",
        f"  store_at(%x, {after}, %lb) loc(11:4)",
        "}"])


def test_a_group_carried_by_a_loop_is_followed():
    text = carried_kernel()
    assert str(verify(parse_kernel(text))) == text


@pytest.mark.parametrize("body_read, after, message, line", [
    ("    %s = binary(%a0, %a1) {op = add} : f32 loc(4:8)", "%v0",
     "binary reads %a0, an accumulator of a wgmma_wait_group still in flight", 4),
    ("", "%r0", "store_at reads %r0, an accumulator of a wgmma_wait_group still in flight", 11),
])
def test_a_read_of_a_loop_carried_accumulator_is_refused(body_read, after, message, line):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(carried_kernel(body_read, after)))
    assert info.value.line == line


def register_a_kernel(a_type: str = "f16", a_values: int = 8, n: int = 8) -> str:
    """One m64nNk16 multiply with A from registers: ``a_values`` A operands of ``a_type``,
    then the N / 2 accumulators, waited on and stored."""
    acc = ", ".join(["f32"] * (n // 2))

    def values(prefix, count=n // 2):
        return ", ".join(f"%{prefix}{i}" for i in range(count))
    return "\n".join([
        'kernel @k(%x: buffer<global, f32, [?], strides=[1]>) loc("/src/k.py":1:0) {',
        "  %z = const {value = 0.0} : f32 loc(2:4)",
        f"  %h = const {{value = 1.0}} : {a_type} loc(2:4)",
        "  %d = const {value = 0} : i64 loc(2:4)",
        "  %i = const {value = 0} : i32 loc(2:4)",
        f"  {values('m')} = wgmma_mma_async_reg_a(%d, {', '.join(['%h'] * a_values)}, "
        f"{', '.join(['%z'] * (n // 2))}) {{n = {n}, a_type = {a_type}}} : {acc} loc(3:4)",
        f"  {values('c')} = wgmma_commit_group({values('m')}) : {acc} loc(4:4)",
        f"  {values('w')} = wgmma_wait_group({values('c')}) {{pending = 0}} : {acc} loc(5:4)",
        "  store_at(%x, %w0, %i) loc(6:4)",
        "}"])


@pytest.mark.parametrize("a_type", ["f16", "bf16"])
def test_the_register_a_multiply_round_trips(a_type):
    text = register_a_kernel(a_type)
    assert str(verify(parse_kernel(text))) == text


@pytest.mark.parametrize("a_type, a_values, message", [
    ("f8e4m3", 8, "wgmma_mma_async_reg_a reads A from registers as f16 or bf16 here, not "
                  "f8e4m3"),
    ("f16", 7, "wgmma_mma_async_reg_a produces f32, f32, f32, not f32, f32, f32, f32"),
    ("f32", 8, "reads A from registers as f16 or bf16 here, not f32"),
])
def test_the_register_a_multiply_refuses_what_the_isa_lacks(a_type, a_values, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(register_a_kernel(a_type, a_values)))
    assert info.value.line == 3


def test_a_register_a_multiply_is_in_flight_until_the_wait():
    text = register_a_kernel().replace("store_at(%x, %w0, %i)", "store_at(%x, %c0, %i)")
    with pytest.raises(CompilationError, match="store_at reads %c0, an accumulator of a "
                                               "wgmma_commit_group still in flight"):
        verify(parse_kernel(text))
