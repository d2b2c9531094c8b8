"""The packed ops: pairs of f16/bf16 values computed as one (a GPU's f16x2/bf16x2). Their
text form round-trips; the verifier checks the pair's types."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @pairs(%x: buffer<global, f32, [?], strides=[1]>) {distribution = '
        '"per_thread"} loc("/src/k.py":1:0) {\n'
        "  %i = thread_index {kind = lane_id} : i32 loc(2:4)\n"
        "  %f = load(%x, %i) : f32 loc(3:4)\n")


def kernel(body: str) -> str:
    return HEAD + body + "\n}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_packed_ops_round_trip(dtype, op):
    text = kernel(f"  %h0, %h1 = packed_cast(%f, %f) {{to = {dtype}}} : {dtype}, {dtype} "
                  "loc(4:4)\n"
                  f"  %r0, %r1 = packed_binary(%h0, %h1, %h1, %h0) {{op = {op}}} : {dtype}, "
                  f"{dtype} loc(5:4)")
    parsed = verify(parse_kernel(text))
    assert str(parsed) == text
    (pair,) = [o for o in parsed.walk() if o.name == "packed_binary"]
    assert [r.type.name for r in pair.results] == [dtype, dtype]


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_packed_unary_round_trips(op):
    text = kernel("  %h0, %h1 = packed_cast(%f, %f) {to = bf16} : bf16, bf16 loc(4:4)\n"
                  f"  %r0, %r1 = packed_unary(%h0, %h1) {{op = {op}}} : bf16, bf16 loc(5:4)")
    assert str(verify(parse_kernel(text))) == text


@pytest.mark.parametrize("body, message", [
    ("  %g = cast(%f) {to = f16} : f16 loc(4:4)\n"
     "  %h = cast(%f) {to = bf16} : bf16 loc(4:4)\n"
     "  %r0, %r1 = packed_binary(%g, %g, %h, %h) {op = add} : f16, f16 loc(5:4)",
     "pairs of one type \\(a0, a1, b0, b1\\), got f16, f16, bf16, bf16"),
    ("  %r0, %r1 = packed_unary(%f, %f) {op = neg} : f32, f32 loc(5:4)",
     "packed_unary computes pairs of f16 or bf16, not f32"),
    ("  %r0, %r1 = packed_binary(%f, %f, %f, %f) {op = add} : f32, f32 loc(5:4)",
     "pairs of f16 or bf16, not f32"),
    ("  %g = cast(%f) {to = f16} : f16 loc(4:4)\n"
     "  %r0, %r1 = packed_cast(%g, %g) {to = bf16} : bf16, bf16 loc(5:4)",
     "rounds a pair of f32 values, got f16, f16"),
    ("  %r0, %r1 = packed_cast(%f, %f) {to = f8e4m3} : f8e4m3, f8e4m3 loc(5:4)",
     "rounds to f16 or bf16, not f8e4m3"),
])
def test_the_verifier_names_what_a_pair_cannot_be(body, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(kernel(body)))
    assert info.value.line == 5


def test_only_the_packed_ops_ptx_has_are_accepted():
    with pytest.raises(CompilationError, match="op"):
        parse_kernel(kernel("  %r0, %r1 = packed_binary(%f, %f, %f, %f) {op = div} : "
                            "f32, f32 loc(5:4)"))
