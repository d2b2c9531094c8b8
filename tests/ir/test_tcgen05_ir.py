"""The tcgen05 ops: the shared-memory descriptor's version-1 bit fields (PTX ISA 9.7.16.4.1
"Shared Memory Descriptor", Table 40) and the kind::f16 instruction descriptor (PTX ISA
9.7.16.4.2 "Instruction Descriptor", Table 42), field by field; the ops' text round trip;
the verifier's refusals."""
import re

import pytest
from support.tcgen05_kernels import tcgen05_kernel

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.ops_tcgen05 import InstructionDescriptor, tmem_address
from tilejit.ir.ops_wgmma import MatrixDescriptor
from tilejit.ir.types import bf16, f16, f32

A = MatrixDescriptor(0, 128, 256, version=1)
B = MatrixDescriptor(4096, 16, 1024, swizzle=128, version=1)


def test_the_tcgen05_descriptor_fields_sit_at_the_ptx_bits():
    bits = MatrixDescriptor(start=0x1230, lbo=0x40, sbo=0x400, swizzle=128, base_offset=5,
                            version=1).encode()
    assert bits & 0x3FFF == 0x123            # start >> 4, bits 0-13
    assert bits >> 16 & 0x3FFF == 0x4        # leading byte offset >> 4, bits 16-29
    assert bits >> 32 & 0x3FFF == 0x40       # stride byte offset >> 4, bits 32-45
    assert bits >> 46 & 7 == 0b001           # the fixed constant, bits 46-48
    assert bits >> 49 & 7 == 5               # matrix base offset, bits 49-51
    assert bits >> 52 & 1 == 0               # leading dimension stride mode: relative
    assert bits >> 53 & 0xFF == 0            # fixed 0, bits 53-60
    assert bits >> 61 == 2                   # swizzle, bits 61-63: 128B is 2
    for swizzle, code in ((0, 0), (64, 4), (32, 6)):
        assert MatrixDescriptor(0, 16, 16, swizzle, version=1).encode() >> 61 == code
    # wgmma's (version 0) leaves bits 46-48 clear and codes the swizzle at 62-63
    assert MatrixDescriptor(0, 16, 16, 128).encode() >> 46 & 7 == 0


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("version", [0, 1])
def test_decode_tells_the_versions_apart(swizzle, version):
    fields = MatrixDescriptor(0x3FFF0, 0x10, 0x3FFF0, swizzle, 3, version)
    assert MatrixDescriptor.decode(fields.encode()) == fields


def test_a_descriptor_version_beyond_one_is_refused():
    assert "version is 0 (wgmma) or 1 (tcgen05), not 2" in \
        MatrixDescriptor(0, 16, 16, version=2).problem()


def test_the_instruction_descriptor_fields_sit_at_the_ptx_bits():
    bits = InstructionDescriptor(128, 208, bf16, bf16, f32, trans_a=True,
                                 trans_b=False).encode()
    assert bits & 0xF == 0                   # sparsity selector, sparsity, saturate: 0
    assert bits >> 4 & 3 == 1                # D type, bits 4-5: f32 is 1
    assert bits >> 7 & 7 == 1                # A type, bits 7-9: bf16 is 1
    assert bits >> 10 & 7 == 1               # B type, bits 10-12
    assert bits >> 13 & 3 == 0               # negate A / B, bits 13-14
    assert bits >> 15 & 1 == 1               # transpose A (MN-major), bit 15
    assert bits >> 16 & 1 == 0               # transpose B, bit 16
    assert bits >> 17 & 0x3F == 208 >> 3     # N >> 3, bits 17-22
    assert bits >> 23 & 1 == 0               # reserved
    assert bits >> 24 & 0x1F == 128 >> 4     # M >> 4, bits 24-28
    assert bits >> 29 == 0                   # reserved, max shift (.ws only)
    f16_bits = InstructionDescriptor(64, 8, f16, f16, f32, trans_b=True).encode()
    assert f16_bits == 1 << 4 | 1 << 16 | 1 << 17 | 4 << 24


@pytest.mark.parametrize("fields", [InstructionDescriptor(128, 256, f16, f16),
                                    InstructionDescriptor(64, 8, bf16, bf16, f16, True, True)])
def test_instruction_decode_inverts_encode(fields):
    assert InstructionDescriptor.decode(fields.encode()) == fields


@pytest.mark.parametrize("fields, message", [
    (InstructionDescriptor(256, 64, f16, f16), "M = 64 or 128, not 256"),
    (InstructionDescriptor(128, 24, f16, f16), r"multiple of 16 in \[16, 256\], not 24"),
    (InstructionDescriptor(64, 264, f16, f16), r"multiple of 8 in \[8, 256\], not 264"),
    (InstructionDescriptor(128, 64, f32, f32), "multiplies f16 or bf16, not A f32"),
    (InstructionDescriptor(128, 64, f16, bf16), "multiplies f16 by f16, not bf16"),
])
def test_the_instruction_descriptor_explains_bad_shapes(fields, message):
    assert re.search(message, fields.problem())


def test_the_store_direction_round_trips():
    text = ('kernel @k() {distribution = "per_thread"} loc("/src/k.py":1:0) {\n'
            "  %a = const {value = 0} : i32 loc(2:4)\n"
            "  %v = const {value = 0.0} : f32 loc(2:4)\n"
            "  tcgen05_st(%a, %v, %v) {num = 2} loc(3:4)\n"
            "  tcgen05_wait_st loc(4:4)\n}")
    assert str(verify(parse_kernel(text))) == text


def test_a_tmem_address_holds_the_lane_high_and_the_column_low():
    assert tmem_address(96, 40) == 96 << 16 | 40


def kernel(**options):
    return tcgen05_kernel(16, A, B, **options)


@pytest.mark.parametrize("options", [{}, dict(m=64, trans_b=True), dict(dtype="bf16"),
                                     dict(steps=((0, 64), (16, 8)))])
def test_the_ops_round_trip(options):
    text = kernel(**options)
    kernel_ir = verify(parse_kernel(text))
    assert str(kernel_ir) == text
    names = [op.name for op in kernel_ir.walk()]
    for name in ("tcgen05_alloc", "tcgen05_relinquish_alloc_permit", "tcgen05_fence",
                 "tcgen05_desc", "tcgen05_mma", "tcgen05_commit", "tcgen05_ld",
                 "tcgen05_wait_ld", "tcgen05_dealloc"):
        assert name in names


@pytest.mark.parametrize("text, message", [
    (kernel(cols=48), r"tcgen05_alloc takes a power of two of columns in \[32, 512\], not 48"),
    (kernel(cols=1024), "not 1024"),
    (kernel(m=256), "M = 64 or 128, not 256"),
    (kernel(dtype="f32"), "multiplies f16 or bf16, not A f32"),
    (kernel().replace("tcgen05_alloc(%slot)", "tcgen05_alloc(%sa)"),
     "writes the TMEM address to a 32-bit integer shared buffer"),
    (kernel().replace("swizzle = 128", "swizzle = 48"), "swizzle is 0, 32, 64 or 128"),
    ('kernel @k() {distribution = "per_thread"} loc("/src/k.py":1:0) {\n'
     "  %a = const {value = 0} : i32 loc(2:4)\n"
     "  %l0, %l1, %l2 = tcgen05_ld(%a) {num = 3} : f32, f32, f32 loc(3:4)\n}",
     "reads 1, 2, 4, ... 128 columns per thread, not 3"),
    (kernel().replace("store_at(%d, %v0,", "store_at(%d, %l0,"),
     "store_at reads %l0, a value of a tcgen05_ld still in flight: read it after "
     "tcgen05_wait_ld"),
    ('kernel @k() {distribution = "per_thread"} loc("/src/k.py":1:0) {\n'
     "  %a = const {value = 0} : i32 loc(2:4)\n"
     "  %v = const {value = 0.0} : f32 loc(2:4)\n"
     "  tcgen05_st(%a, %v, %v) {num = 4} loc(3:4)\n}",
     "tcgen05_st writes 1, 2, 4, ... 128 columns per thread, num = 4 with 2 values"),
], ids=["cols", "cols-1024", "m", "dtype", "slot", "swizzle", "num", "in-flight", "st-num"])
def test_the_verifier_checks_tcgen05_ops(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))
