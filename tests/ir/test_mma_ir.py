"""The mma_sync op: a warp's m16n8k16 (f16/bf16) or m16n8k32 (e4m3/e5m2) multiply-accumulate
on per-lane fragment values. Its text form round-trips; the verifier checks the fragment
counts and types."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @mma(%x: buffer<global, f16, [?], strides=[1]>, %y: buffer<global, f32, [?], '
        'strides=[1]>) {distribution = "per_thread"} loc("/src/k.py":1:0) {\n')


CASTS = {"bf16": "%g", "f8e4m3": "%e", "f8e5m2": "%r"}


def mma_kernel(a_type="f16", b_type="f16", c_type="f32", a_count=8, b_count=4, c_count=4,
               results=4, shape="m16n8k16"):
    lines = ["  %i = thread_index {kind = lane_id} : i32 loc(2:4)",
             "  %h = load(%x, %i) : f16 loc(3:4)",
             "  %f = load(%y, %i) : f32 loc(3:4)"]
    for t, name in CASTS.items():
        if t in (a_type, b_type):
            lines.append(f"  {name} = cast(%h) {{to = {t}}} : {t} loc(3:4)")
    value = {"f16": "%h", "f32": "%f", **CASTS}
    operands = [value[a_type]] * a_count + [value[b_type]] * b_count + [value[c_type]] * c_count
    names = ", ".join(f"%d{i}" for i in range(results))
    lines.append(f"  {names} = mma_sync({', '.join(operands)}) {{shape = {shape}, "
                 f"a_type = {a_type}, b_type = {b_type}, c_type = {c_type}}} : "
                 f"{', '.join([c_type] * results)} loc(4:4)")
    lines.append("  store(%y, %d3, %i) loc(5:4)")
    return HEAD + "\n".join(lines) + "\n}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mma_sync_round_trips_and_prints_its_attributes(dtype):
    text = mma_kernel(dtype, dtype)
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    (op,) = [op for op in kernel.walk() if op.name == "mma_sync"]
    assert len(op.operands) == 16 and len(op.results) == 4
    assert (op.attrs["a_layout"], op.attrs["b_layout"]) == ("row", "col")  # defaults, unprinted
    assert op.opdef.group.value == "sync"


@pytest.mark.parametrize("a_type, b_type", [("f8e4m3", "f8e4m3"), ("f8e4m3", "f8e5m2"),
                                            ("f8e5m2", "f8e4m3"), ("f8e5m2", "f8e5m2")])
def test_the_8_bit_float_shape_takes_16_a_and_8_b_values_of_any_mix(a_type, b_type):
    text = mma_kernel(a_type, b_type, a_count=16, b_count=8, shape="m16n8k32")
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    (op,) = [op for op in kernel.walk() if op.name == "mma_sync"]
    assert len(op.operands) == 28 and len(op.results) == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(a_count=7), "takes 8 A, 4 B and 4 C values per lane"),
    (dict(c_count=5), "takes 8 A, 4 B and 4 C values per lane"),
    (dict(a_type="f16", b_type="bf16"), "m16n8k16 does not multiply f16 by bf16: it "
                                        "multiplies f16 or bf16 tiles of one type"),
    (dict(a_type="f32", b_type="f32"), "f16 or bf16 tiles of one type"),
    (dict(a_type="f8e4m3", b_type="f8e4m3"), "m16n8k16 does not multiply f8e4m3 by f8e4m3"),
    (dict(a_type="f16", b_type="f16", a_count=16, b_count=8, shape="m16n8k32"),
     "m16n8k32 does not multiply f16 by f16: .* or e4m3/e5m2 tiles \\(m16n8k32\\)"),
    (dict(a_type="f8e4m3", b_type="f8e5m2", shape="m16n8k32"),
     "takes 16 A, 8 B and 4 C values per lane"),
    (dict(c_type="f16"), "accumulates in f32, not f16"),
])
def test_the_verifier_checks_fragment_counts_and_types(kwargs, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(mma_kernel(**kwargs)))


def test_an_operand_of_the_wrong_type_is_named():
    text = mma_kernel().replace("mma_sync(%h, %h", "mma_sync(%f, %h")
    with pytest.raises(CompilationError, match="operand 0 is f32, its fragment holds f16"):
        verify(parse_kernel(text))


def test_only_the_shapes_and_layouts_ptx_has_are_accepted():
    with pytest.raises(CompilationError, match="shape"):
        parse_kernel(mma_kernel().replace("m16n8k16", "m16n8k8"))
    with pytest.raises(CompilationError, match="b_layout"):
        parse_kernel(mma_kernel().replace("c_type = f32}", "c_type = f32, b_layout = row}"))
