"""tma_load / tma_store (logical and flat), bulk_commit, bulk_wait and fence_proxy_async:
their text round-trips; the verifier checks the sides' memory, dtypes, index and
coordinate counts, root buffers, the box against cuTensorMapEncodeTiled's limits (dims
of at most 256, inner bytes a multiple of 16 and within the swizzle span) and the waited
group count."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.ir.ops_tma import swizzled_byte

HEAD = ('kernel @tma(%x: buffer<global, {t}, [?, ?], strides=[?, 1]>) '
        '{{distribution = "per_thread"}} loc("/src/k.py":1:0) {{\n')


def kernel(t="f16", box="[8, 64]", swizzle=128, indices=4, pending=0, read=True,
           flat=False, dst="%s", src="%x", shape="[8, 64]"):
    index = ", ".join(["%i"] * indices)
    attrs = f"{{box = {box}" + (f", swizzle = {swizzle}}}" if swizzle else "}")   # 0: default
    if flat:
        coords = ", ".join(["%i"] * (indices // 2))
        load = f"  tma_load_at({dst}, %o, {src}, %bar, %i, {coords}) {attrs} loc(5:4)"
        store = f"  tma_store_at({src}, {dst}, %o, {coords}) {attrs} loc(6:4)"
    else:
        load = f"  tma_load({dst}, {src}, %bar, %i, {index}) {attrs} loc(5:4)"
        store = f"  tma_store({src}, {dst}, {index}) {attrs} loc(6:4)"
    return HEAD.format(t=t) + "\n".join([
        f"  %s = alloc {{scope = shared, dtype = {t}, shape = {shape}}} : "
        f"buffer<shared, {t}, {shape}> loc(2:4)",
        "  %l = alloc {scope = local, dtype = f16, shape = [8, 64]} : "
        "buffer<local, f16, [8, 64]> loc(2:4)",
        "  %bar = alloc_barrier {count = 2} : barrier<2> loc(2:4)",
        "  %i = thread_index {kind = lane_id} : i32 loc(3:4)",
        "  %o = const {value = 0} : i64 loc(3:4)",
        load, "  fence_proxy_async loc(6:4)", store,
        "  bulk_commit loc(7:4)",
        f"  bulk_wait {{pending = {pending}" + (", read = true}" if read else "}")
        + " loc(8:4)"]) + "\n}"


@pytest.mark.parametrize("text", [
    kernel(), kernel("f32", "[8, 32]", 128), kernel("f16", "[8, 64]", 0, pending=1, read=False),
    kernel(flat=True), kernel("i8", "[8, 64]", 64, shape="[8, 64]", flat=True)],
    ids=["f16-128B", "f32-128B", "f16-none", "flat-f16", "flat-i8-64B"])
def test_tma_ops_round_trip(text):
    kernel_ir = verify(parse_kernel(text))
    assert str(kernel_ir) == text
    names = [op.name for op in kernel_ir.walk()]
    assert names[-4:] == ["fence_proxy_async", names[-3], "bulk_commit", "bulk_wait"]
    assert names[-3].startswith("tma_store") and names[-5].startswith("tma_load")


@pytest.mark.parametrize("text, message", [
    (kernel(box="[8, 300]"), r"TMA box dims lie in \[1, 256\], got \[8, 300\]"),
    (kernel(box="[8, 4]", swizzle=0), "inner dim spans a multiple of 16 bytes, not 8"),
    (kernel(box="[8, 128]"), "inner dim of 256 bytes exceeds its 128-byte swizzle span"),
    (kernel(swizzle=48), "TMA swizzles 0, 32, 64 or 128 bytes, not 48"),
    (kernel(box="[8, 8, 64]"), r"box has one dim per dim of its tensor \(2\)"),
    (kernel(indices=3), "takes dst's 2 then src's 2 indices, got 3"),
    (kernel(dst="%l"), "box lies in shared memory, not local"),
    (kernel(src="%s"), "tensor lies in global memory, not shared"),
    (kernel("f32").replace("dtype = f32, shape", "dtype = f16, shape")
     .replace("<shared, f32", "<shared, f16"), "copies bytes: shared holds f16, the tensor f32"),
    (kernel(flat=True, indices=6), r"one coordinate per dim of its tensor \(2\), got 3"),
    (kernel(pending=-1), "keeps a non-negative number of groups pending, not -1"),
], ids=["box-256", "inner-16", "swizzle-span", "swizzle-mode", "box-rank", "indices", "local",
        "shared-src", "dtypes", "coords", "pending"])
def test_the_verifier_checks_tma_ops(text, message):
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))


def test_a_flat_tma_copy_needs_root_buffers():
    text = kernel(flat=True).replace(
        "  tma_load_at(%s", "  %r = region(%s, %i, %i) {sizes = [8, 64], keep = [true, true]} : "
        "region<buffer<shared, f16, [8, 64]>, [8, 64]> loc(5:4)\n  tma_load_at(%r")
    with pytest.raises(CompilationError, match="operand .dst. of tma_load_at must be a buffer"):
        verify(parse_kernel(text))


def test_swizzle_permutes_chunks_within_each_row_of_128_bytes():
    # 128B: byte 16 * c of row r lands in chunk c ^ (r % 8); none leaves bytes in place
    assert [swizzled_byte(128 * r, 128) for r in range(9)] == \
        [128 * r + 16 * (r % 8) for r in range(9)]
    assert swizzled_byte(128 * 3 + 16 * 5 + 2, 128) == 128 * 3 + 16 * (5 ^ 3) + 2
    assert swizzled_byte(128 * 3 + 16, 64) == 128 * 3 + 16 * (1 ^ 3)
    assert swizzled_byte(128 * 3 + 16, 32) == 128 * 3 + 16 * (1 ^ 1)
    assert swizzled_byte(1234, 0) == 1234
