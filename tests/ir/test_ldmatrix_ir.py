"""ldmatrix and its flat form: a warp's collective load of 8x8 matrices of 16-bit elements
from shared memory, each lane naming one matrix row. Their text round-trips; the verifier
checks the matrix count, the storage (shared, 16-bit) and the indices."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @ldm(%x: buffer<global, f16, [?], strides=[1]>) '
        '{num_warps = 1, distribution = "per_thread"} loc("/src/k.py":1:0) {\n')


def kernel(num=4, trans=False, dtype="f16", scope="shared", indices=2, flat=False):
    buffer = f"buffer<{scope}, {dtype}, [16, 16]>"
    names = ", ".join(f"%v{k}" for k in range(2 * num))
    index = ", ".join(["%i"] * indices)
    access = (f"ldmatrix_at(%s, %o)" if flat else f"ldmatrix(%s, {index})")
    return HEAD + "\n".join([
        f"  %s = alloc {{scope = {scope}, dtype = {dtype}, shape = [16, 16]}} : {buffer} "
        "loc(2:4)",
        "  %i = thread_index {kind = lane_id} : i32 loc(3:4)",
        "  %o = const {value = 8} : i32 loc(3:4)",
        f"  {names} = {access} {{num = {num}{', trans = true' if trans else ''}}} : "
        f"{', '.join([dtype] * (2 * num))} loc(4:4)"]) + "\n}"


@pytest.mark.parametrize("text", [kernel(), kernel(2, True), kernel(1, dtype="bf16"),
                                  kernel(flat=True), kernel(2, True, flat=True)],
                         ids=["x4", "x2-trans", "x1-bf16", "flat-x4", "flat-x2-trans"])
def test_ldmatrix_round_trips(text):
    parsed = verify(parse_kernel(text))
    assert str(parsed) == text
    (op,) = [op for op in parsed.walk() if op.name.startswith("ldmatrix")]
    assert len(op.results) == 2 * op.attrs["num"]


@pytest.mark.parametrize("text, message", [
    (kernel(num=3), "ldmatrix loads 1, 2 or 4 matrices, not 3"),
    (kernel(dtype="f32"), "ldmatrix moves 16-bit elements, not f32"),
    (kernel(scope="local"), "ldmatrix reads shared memory, not local"),
    (kernel(indices=1), "needs 2 indices, got 1"),
], ids=["x3", "f32", "local", "one-index"])
def test_the_verifier_checks_count_storage_and_indices(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))
