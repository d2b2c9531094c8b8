"""The CPU instructions as typed ops (``tilejit/targets/cpu/ops.py``): their text form
round-trips, the verifier names what a malformed one gets wrong, and the CPU families
lower the example kernels to them -- never to an untyped ``intrinsic`` op."""
import pytest
import torch

import tilejit as tj
from tilejit.errors import CompilationError
from tilejit.examples import matmul, row_softmax
from tilejit.ir import parse_kernel, verify
from tilejit.passes.effects import written_parameters
from tilejit.targets.cpu.ops import row_reduce_operands   # (and the cpu.* ops registered)

HEAD = ('kernel @ops(%x: buffer<global, f32, [?, ?], strides=[?, 1]>) loc("/src/k.py":1:0) {\n'
        "  %i = thread_index {kind = cta_id} : i32 loc(2:4)\n"
        "  %z = const {value = 0} : i32 loc(2:4)\n"
        "  %a = alloc {scope = fragment, dtype = f32, shape = [8, 16]} : "
        "buffer<fragment, f32, [8, 16]> loc(3:4)\n"
        "  %b = alloc {scope = fragment, dtype = f32, shape = [16, 32]} : "
        "buffer<fragment, f32, [16, 32]> loc(3:4)\n"
        "  %c = alloc {scope = fragment, dtype = f32, shape = [8, 32]} : "
        "buffer<fragment, f32, [8, 32]> loc(3:4)\n"
        "  %m = alloc {scope = fragment, dtype = i1, shape = [8, 16]} : "
        "buffer<fragment, i1, [8, 16]> loc(3:4)\n"
        "  %f = load(%x, %i, %z) : f32 loc(4:4)\n")


def kernel(body: str) -> str:
    return HEAD + body + "\n}"


def test_every_cpu_op_round_trips():
    text = kernel(
        "  %bits = cpu.bitcast(%f) {to = i32} : i32 loc(5:4)\n"
        "  %g = cpu.ldexp(%f, %bits) : f32 loc(6:4)\n"
        "  cpu.store_streaming(%x, %g, %i, %z) loc(7:4)\n"
        "  cpu.gemm_block(%c, %a, %b, %z, %z) {mr = 8, nr = 32, k = 16, lanes = 16, "
        "transpose_a = false, accum = true} loc(8:4)\n"
        "  %s = cpu.row_reduce(%a, %z, %z) {op = max, length = 16, lanes = 8} : f32 loc(9:4)\n"
        # select(m, a - s, a) summed: a bool tile and a scalar as further sources
        "  %t = cpu.row_reduce(%a, %i, %z, %m, %i, %z, %s) {op = sum, length = 16, lanes = 8, "
        "steps = [[sub, f32, 0, 2], [select, f32, 1, 3, 0]]} : f32 loc(10:4)")
    parsed = verify(parse_kernel(text))
    assert str(parsed) == text
    (reduce,) = [op for op in parsed.walk() if op.attrs.get("steps")]
    start, sources = row_reduce_operands(reduce)
    assert [v.name_hint for v in start] == ["i", "z"]
    assert [(v.name_hint, [i.name_hint for i in at]) for v, at in sources] == \
        [("m", ["i", "z"]), ("s", [])]


@pytest.mark.parametrize("body", [
    "  cpu.store_streaming(%x, %f, %i, %z) loc(5:4)",
    "  cpu.gemm_block(%x, %a, %b, %z, %z) {mr = 8, nr = 16, k = 16, lanes = 16, "
    "transpose_a = false, accum = true} loc(5:4)",
])
def test_a_cpu_op_writing_a_parameter_makes_it_written(body):
    """The read-only-argument check (``written_params``) counts the CPU's own stores."""
    assert written_parameters(verify(parse_kernel(kernel(body)))) == ["x"]
    assert written_parameters(verify(parse_kernel(kernel("")))) == []


@pytest.mark.parametrize("body, message", [
    ("  %r = cpu.bitcast(%f) {to = f16} : f16 loc(5:4)",
     "two types of one width \\(not bool\\), got f32 and f16"),
    ("  %n = buffer_dim(%x) {dim = 0} : i64 loc(4:4)\n"
     "  %r = cpu.ldexp(%f, %n) : f32 loc(5:4)", "takes an f32 and an i32, got f32 and i64"),
    ("  cpu.store_streaming(%x, %i, %i, %z) loc(5:4)", "stored value is i32, buffer holds f32"),
    ("  cpu.gemm_block(%c, %a, %b, %z, %z) {mr = 8, nr = 32, k = 16, lanes = 12, "
     "transpose_a = false, accum = true} loc(5:4)", "lanes must be a power of two, not 12"),
    ("  cpu.gemm_block(%c, %a, %b, %z, %z) {mr = 9, nr = 32, k = 16, lanes = 16, "
     "transpose_a = false, accum = true} loc(5:4)", "block needs 9 rows of C, which has 8"),
    ("  %r = cpu.row_reduce(%a, %z) {op = sum, length = 16, lanes = 8} : f32 loc(5:4)",
     "needs 2 integer start indices of a rank-2 tile, got 1"),
    ("  %r = cpu.row_reduce(%a, %z, %z, %f) {op = sum, length = 16, lanes = 8} : f32 loc(5:4)",
     "reads more than src only through steps"),
    ("  %r = cpu.row_reduce(%a, %z, %z, %f) {op = sum, length = 16, lanes = 8, "
     "steps = [[select, f32, 1, 0, 0]]} : f32 loc(5:4)", "source 1 is f32, its chain reads i1"),
    ("  %r = cpu.row_reduce(%a, %z, %z) {op = sum, length = 32, lanes = 8} : f32 loc(5:4)",
     "a row of 32 elements does not fit src's innermost extent 16"),
])
def test_the_verifier_names_what_a_cpu_op_gets_wrong(body, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(kernel(body)))
    assert info.value.line == 5


def test_a_chain_step_row_reduce_cannot_compute_is_refused_by_its_attribute():
    with pytest.raises(CompilationError, match="step op must be one of add sub mul div"):
        parse_kernel(kernel("  %r = cpu.row_reduce(%a, %z, %z) {op = sum, length = 16, "
                            "lanes = 8, steps = [[exp, f32, 0]]} : f32 loc(5:4)"))


@tj.kernel
def masked_chain_sum(x, y, out, flags, BM: tj.constexpr, BN: tj.constexpr):
    """A row sum whose fused chain reads a bool tile, an f32 tile and scalars."""
    t = tj.fragment((BM, BN), tj.float32)
    u = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[0:BM, 0:BN])
    tj.copy(u, y[0:BM, 0:BN])
    c = u > 0.0
    tj.copy(flags[0:BM, 0:BN], c)      # c is stored: the sum reads it, a bool source
    m = tj.max(t, axis=1, keep_dims=True)
    tj.copy(out[0:BM], tj.sum(tj.where(c, t * u - m, t - 1.5), axis=1))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEJIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def test_the_cpu_families_lower_to_typed_ops_only(cache):
    """softmax with streaming stores (row_reduce, the exp polynomial's bitcast and ldexp,
    store_streaming), a GEMM tile (gemm_block), a sum over a fused chain of three further
    sources: their lowered IR round-trips and holds no ``intrinsic`` op."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 77, generator=gen), torch.randn(6, 77, generator=gen)
    out, flags = torch.empty(6), torch.empty(6, 77, dtype=torch.bool)
    kernels = [
        (row_softmax.warmup(x, torch.empty_like(x), BM=2, BN=77, CACHE="stream"),
         {"cpu.row_reduce", "cpu.bitcast", "cpu.ldexp", "cpu.store_streaming"}),
        (matmul.warmup(torch.randn(64, 64), torch.randn(64, 64), torch.empty(64, 64)),
         {"cpu.gemm_block"}),
        (masked_chain_sum.warmup(x, y, out, flags, BM=6, BN=77), {"cpu.row_reduce"})]
    for compiled, expected in kernels:
        text = compiled.asm["lowered"]
        lowered = verify(parse_kernel(text))
        assert str(lowered) == text
        names = {op.name for op in lowered.walk()}
        assert "intrinsic" not in names
        assert {name for name in names if name.startswith("cpu.")} == expected
    masked_chain_sum[(1,)](x, y, out, flags, BM=6, BN=77)
    m = x.amax(dim=1, keepdim=True)
    torch.testing.assert_close(out, torch.where(y > 0, x * y - m, x - 1.5).sum(dim=1),
                               rtol=1e-5, atol=1e-5)
