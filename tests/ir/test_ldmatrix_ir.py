"""ldmatrix and its flat form: a warp's collective load of 8x8 matrices of 16-bit elements
(8x16 of 8-bit ones) from shared memory, each lane naming one matrix row. Their text round-trips; the verifier
checks the matrix count, the storage (shared, 16-bit) and the indices."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @ldm(%x: buffer<global, f16, [?], strides=[1]>) '
        '{num_warps = 1, distribution = "per_thread"} loc("/src/k.py":1:0) {\n')


def kernel(num=4, trans=False, dtype="f16", scope="shared", indices=2, flat=False):
    buffer = f"buffer<{scope}, {dtype}, [16, 16]>"
    count = num * (4 if dtype.startswith("f8") else 2)   # one 32-bit register per matrix
    names = ", ".join(f"%v{k}" for k in range(count))
    index = ", ".join(["%i"] * indices)
    access = ("ldmatrix_at(%s, %o)" if flat else f"ldmatrix(%s, {index})")
    return HEAD + "\n".join([
        f"  %s = alloc {{scope = {scope}, dtype = {dtype}, shape = [16, 16]}} : {buffer} "
        "loc(2:4)",
        "  %i = thread_index {kind = lane_id} : i32 loc(3:4)",
        "  %o = const {value = 8} : i32 loc(3:4)",
        f"  {names} = {access} {{num = {num}{', trans = true' if trans else ''}}} : "
        f"{', '.join([dtype] * count)} loc(4:4)"]) + "\n}"


@pytest.mark.parametrize("text", [kernel(), kernel(2, True), kernel(1, dtype="bf16"),
                                  kernel(flat=True), kernel(2, True, flat=True),
                                  kernel(dtype="f8e4m3"), kernel(2, dtype="f8e5m2", flat=True)],
                         ids=["x4", "x2-trans", "x1-bf16", "flat-x4", "flat-x2-trans",
                              "x4-e4m3", "flat-x2-e5m2"])
def test_ldmatrix_round_trips(text):
    parsed = verify(parse_kernel(text))
    assert str(parsed) == text
    (op,) = [op for op in parsed.walk() if op.name.startswith("ldmatrix")]
    per_register = 4 // op.operands[0].type.dtype.itemsize
    assert len(op.results) == per_register * op.attrs["num"]


@pytest.mark.parametrize("text, message", [
    (kernel(num=3), "ldmatrix loads 1, 2 or 4 matrices, not 3"),
    (kernel(dtype="f32"), "ldmatrix moves 16-bit elements, or 8-bit ones without .trans, "
                          "not f32"),
    (kernel(trans=True, dtype="f8e4m3"), r"ldmatrix.trans moves 16-bit elements, or 8-bit "
                                         r"ones without .trans, not f8e4m3"),
    (kernel(scope="local"), "ldmatrix reads shared memory, not local"),
    (kernel(indices=1), "needs 2 indices, got 1"),
], ids=["x3", "f32", "trans-e4m3", "local", "one-index"])
def test_the_verifier_checks_count_storage_and_indices(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))
