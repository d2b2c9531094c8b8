"""cp_async (logical and flat), cp_async_commit, cp_async_wait and mbarrier_complete_tx:
their text round-trips; the verifier checks the sides' memory, dtypes, chunk size,
index count, root buffers and the waited group count."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @cp(%x: buffer<global, {t}, [?, ?], strides=[?, 1]>) '
        '{{distribution = "per_thread"}} loc("/src/k.py":1:0) {{\n')
SHARED = "buffer<shared, {t}, [4, 8]>"


def kernel(t="f32", nbytes=16, dst="%s", src="%x", indices=4, pending=1, flat=False):
    index = ", ".join(["%i"] * indices)
    access = (f"  cp_async_at({dst}, %i, {src}, %o, %n) {{bytes = {nbytes}}} loc(5:4)" if flat
              else f"  cp_async({dst}, {src}, %n, {index}) {{bytes = {nbytes}}} loc(5:4)")
    return HEAD.format(t=t) + "\n".join([
        f"  %s = alloc {{scope = shared, dtype = {t}, shape = [4, 8]}} : "
        f"{SHARED.format(t=t)} loc(2:4)",
        "  %l = alloc {scope = local, dtype = f32, shape = [4, 8]} : "
        "buffer<local, f32, [4, 8]> loc(2:4)",
        "  %bar = alloc_barrier {count = 2} : barrier<2> loc(2:4)",
        "  %i = thread_index {kind = lane_id} : i32 loc(3:4)",
        "  %o = const {value = 8} : i64 loc(3:4)",
        "  %n = const {value = 12} : i32 loc(4:4)",
        access,
        "  cp_async_commit loc(6:4)",
        f"  cp_async_wait {{pending = {pending}}} loc(7:4)",
        "  mbarrier_complete_tx(%bar, %i, %n) loc(8:4)"]) + "\n}"


@pytest.mark.parametrize("text", [kernel(), kernel("f16", 8), kernel("f64", 8, pending=0),
                                  kernel(flat=True), kernel("i8", 4, flat=True)],
                         ids=["f32x16", "f16x8", "f64x8-wait0", "flat-f32", "flat-i8x4"])
def test_async_copies_round_trip(text):
    kernel_ir = verify(parse_kernel(text))
    assert str(kernel_ir) == text
    names = [op.name for op in kernel_ir.walk()]
    assert names[-3:] == ["cp_async_commit", "cp_async_wait", "mbarrier_complete_tx"]


@pytest.mark.parametrize("text, message", [
    (kernel(nbytes=12), "cp.async moves 4, 8 or 16 bytes, not 12"),
    (kernel("f64", 4), "4 bytes are not whole f64 elements"),
    (kernel(indices=3), "takes dst's 2 then src's 2 indices, got 3"),
    (kernel(dst="%l", src="%x"), "cp_async writes shared memory, not local"),
    (kernel(dst="%s", src="%s"), "cp_async reads global memory, not shared"),
    (kernel("f16").replace("strides=[?, 1]>)", "strides=[?, 1]>)", 1)
     .replace("dtype = f16, shape", "dtype = f32, shape").replace("<shared, f16", "<shared, f32"),
     "copies bytes: dst holds f32, src f16"),
    (kernel(pending=-1), "keeps a non-negative number of groups pending, not -1"),
], ids=["12-bytes", "f64x4", "three-indices", "local-dst", "shared-src", "dtypes", "pending"])
def test_the_verifier_checks_async_copies(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))


def test_a_flat_copy_needs_root_buffers():
    text = kernel(flat=True).replace(
        "  cp_async_at(%s", "  %r = region(%s, %i, %i) {sizes = [4, 8], keep = [true, true]} : "
        "region<buffer<shared, f32, [4, 8]>, [4, 8]> loc(5:4)\n  cp_async_at(%r")
    with pytest.raises(CompilationError, match="operand .dst. of cp_async_at must be a buffer"):
        verify(parse_kernel(text))
