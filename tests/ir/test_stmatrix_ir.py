"""stmatrix and its flat form: a warp's collective store of 8x8 matrices of 16-bit elements
to shared memory, each lane naming one matrix row and passing 2 * num values. Their text
round-trips; the verifier checks the matrix count, the storage (shared, 16-bit), the values
(which precede one index per dim); the effects analysis sees the write."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.ops_native import WRITING_ACCESSES
from tilejit.passes.effects import root_buffer

HEAD = ('kernel @stm(%x: buffer<global, {dtype}, [?], strides=[1]>) '
        '{{num_warps = 1, distribution = "per_thread"}} loc("/src/k.py":1:0) {{\n')


def kernel(num=4, trans=False, dtype="f16", scope="shared", flat=False, values=None,
           value_type=None):
    buffer = f"buffer<{scope}, {dtype}, [16, 16]>"
    values = 2 * num if values is None else values
    names = [f"%v{k}" for k in range(values)]
    index = ["%i"] * 2
    operands = ", ".join(["%s", "%o", *names] if flat else ["%s", *names, *index])
    lines = [f"  %s = alloc {{scope = {scope}, dtype = {dtype}, shape = [16, 16]}} : {buffer} "
             "loc(2:4)",
             "  %i = thread_index {kind = lane_id} : i32 loc(3:4)",
             "  %o = const {value = 8} : i32 loc(3:4)"]
    lines += [f"  {name} = load(%x, %i) : {value_type or dtype} loc(3:4)" for name in names]
    lines.append(f"  {'stmatrix_at' if flat else 'stmatrix'}({operands}) "
                 f"{{num = {num}{', trans = true' if trans else ''}}} loc(4:4)")
    return HEAD.format(dtype=value_type or dtype) + "\n".join(lines) + "\n}"


@pytest.mark.parametrize("text", [kernel(), kernel(2, True), kernel(1, dtype="bf16"),
                                  kernel(flat=True), kernel(2, True, flat=True)],
                         ids=["x4", "x2-trans", "x1-bf16", "flat-x4", "flat-x2-trans"])
def test_stmatrix_round_trips_and_writes_its_buffer(text):
    parsed = verify(parse_kernel(text))
    assert str(parsed) == text
    (op,) = [op for op in parsed.walk() if op.name.startswith("stmatrix")]
    assert not op.results and op.name in WRITING_ACCESSES
    assert root_buffer(op.operands[0]).owner.name == "alloc"


@pytest.mark.parametrize("text, message", [
    (kernel(num=3), "stmatrix stores 1, 2 or 4 matrices, not 3"),
    (kernel(dtype="f32"), "stmatrix moves 16-bit elements, not f32"),
    (kernel(scope="local"), "stmatrix writes shared memory, not local"),
    (kernel(values=6), "stmatrix.x4 stores 8 values per lane, got 6"),
    (kernel(flat=True, values=2), "stmatrix.x4 stores 8 values per lane, got 2"),
    (kernel(dtype="bf16", value_type="f16"), "stored value is f16, buffer holds bf16"),
], ids=["x3", "f32", "local", "too-few-values", "flat-too-few", "value-type"])
def test_the_verifier_checks_count_storage_and_values(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))
