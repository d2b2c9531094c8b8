"""load_vec/store_vec and their flat forms: a run of count elements along the last dim in
one access. Their text round-trips; the verifier checks count, types, indices and (flat)
the root buffer."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @vec(%x: buffer<global, {t}, [?, ?], strides=[?, 1]>) '
        '{{distribution = "per_thread"}} loc("/src/k.py":1:0) {{\n')


def logical(dtype="f32", count=4, stored=4, indices=2):
    index = ", ".join(["%i"] * indices)
    names = ", ".join(f"%v{k}" for k in range(count))
    values = ", ".join(f"%v{k % count}" for k in range(stored))
    return HEAD.format(t=dtype) + "\n".join([
        "  %i = thread_index {kind = lane_id} : i32 loc(2:4)",
        f"  {names} = load_vec(%x, {index}) {{count = {count}}} : "
        f"{', '.join([dtype] * count)} loc(3:4)",
        f"  store_vec(%x, {values}, {index}) {{count = {count}}} loc(4:4)"]) + "\n}"


def flat(count=4, stored=4, buffer="%x"):
    names = ", ".join(f"%v{k}" for k in range(count))
    values = ", ".join(f"%v{k % count}" for k in range(stored))
    return HEAD.format(t="f32") + "\n".join([
        "  %o = const {value = 8} : i64 loc(2:4)",
        "  %r = region(%x, %o, %o) {sizes = [4, 4], keep = [true, true]} : "
        "region<buffer<global, f32, [?, ?], strides=[?, 1]>, [4, 4]> loc(2:4)",
        f"  {names} = load_vec_at(%x, %o) {{count = {count}}} : "
        f"{', '.join(['f32'] * count)} loc(3:4)",
        f"  store_vec_at({buffer}, %o, {values}) {{count = {count}}} loc(4:4)"]) + "\n}"


@pytest.mark.parametrize("text", [logical(), logical("f16", 8, 8), logical("bf16", 2, 2),
                                  flat(), flat(2, 2)],
                         ids=["f32x4", "f16x8", "bf16x2", "flat-f32x4", "flat-f32x2"])
def test_vector_accesses_round_trip(text):
    kernel = verify(parse_kernel(text))
    assert str(kernel) == text
    loads = [op for op in kernel.walk() if op.name.startswith("load_vec")]
    assert len(loads[0].results) == loads[0].attrs["count"]


@pytest.mark.parametrize("text, message", [
    (logical(count=3, stored=3), "a power of two of at least 2 elements, not 3"),
    (logical("f16", 16, 16), "16 f16 elements are 32 bytes, more than one access moves"),
    (logical("f64", 4, 4), "32 bytes"),
    (logical(stored=3), "stored value is i32"),   # an index taken for the fourth value
    (logical(indices=1), "needs 2 indices, got 1"),
    (flat(stored=3), "of 4 elements takes 4 values, got 3"),
    (flat(buffer="%r"), "operand .buf. of store_vec_at must be a buffer"),
], ids=["count3", "f16x16", "f64x4", "three-values", "one-index", "flat-three-values",
        "flat-region"])
def test_the_verifier_checks_count_types_indices_and_root(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))


def test_a_stored_value_of_another_type_is_named():
    text = logical().replace("store_vec(%x, %v0", "store_vec(%x, %i")
    with pytest.raises(CompilationError, match="stored value is i32, buffer holds f32"):
        verify(parse_kernel(text))
