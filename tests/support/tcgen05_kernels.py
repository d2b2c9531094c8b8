"""Textual per-thread IR of one CTA's tcgen05 gemm (cta_group::1, kind::f16), for the IR,
CPU and cuda tests. Four warps (one warpgroup): each thread copies its share of ``x``
(A's shared bytes, in whatever layout the test chose) and ``y`` (B's) into two shared
buffers; warp 0 allocates ``cols`` TMEM columns (their address through the shared
``slot``) and relinquishes the permit; thread 0 initializes the mbarrier; fence, barrier,
fence; thread 0 issues one tcgen05_mma per k-step (``steps``: the element offsets of each
step's first elements in A's and B's buffers; the first step overwrites D unless
``accumulate_first``) and commits to the barrier; every thread waits on it, reads its
lane's N columns with tcgen05_ld (warp w: lanes 32w..32w+31; one load per power of two
in N) and stores them to ``d`` at
``thread * N + i``; then fence, barrier, and warp 0 frees the columns."""
from __future__ import annotations

from tilejit.ir.ops_wgmma import MatrixDescriptor

from .wgmma_kernels import staged_operands

THREADS = 128


def tcgen05_kernel(n: int, a: MatrixDescriptor, b: MatrixDescriptor, *, m: int = 128,
                   dtype: str = "f16", cols: int | None = None, a_elements: int = 2048,
                   b_elements: int | None = None, steps=((0, 0),), trans_a: bool = False,
                   trans_b: bool = False, wait: bool = True, slot_offset: int = 0) -> str:
    """The kernel's text; ``a.start`` / ``b.start`` are the buffers' planned byte offsets,
    the slot's 4 bytes and the barrier's 8 lie after both."""
    b_elements = b_elements or 16 * n
    cols = cols or max(32, 1 << (n - 1).bit_length())
    shared = max(a.start + 2 * a_elements, b.start + 2 * b_elements)
    slot_offset = slot_offset or -(-shared // 8) * 8
    lines = [f"kernel @tcgen05(%x: buffer<global, {dtype}, [?], strides=[1]>, "
             f"%y: buffer<global, {dtype}, [?], strides=[1]>, "
             '%d: buffer<global, f32, [?], strides=[1]>) '
             f'{{distribution = "per_thread", shared_bytes = {slot_offset + 16}}} '
             'loc("/src/k.py":1:0) {',
             "  %t = thread_index {kind = thread_id} : i32 loc(2:4)",
             "  %w = thread_index {kind = warp_id} : i32 loc(2:4)",
             "  %zero = const {value = 0} : i32 loc(2:4)",
             "  %one = const {value = 1} : i32 loc(2:4)"]
    lines += staged_operands(dtype, a, a_elements, b, b_elements)
    lines += [f"  %slot = alloc {{scope = shared, dtype = i32, shape = [1], "
              f"offset = {slot_offset}}} : buffer<shared, i32, [1]> loc(4:4)",
              "  %bar = alloc_barrier {count = 1} : barrier<1> loc(4:4)",
              "  %warp0 = cmp(%w, %zero) {pred = eq} : i1 loc(5:4)",
              "  if(%warp0) {filter = {axis = warp, lo = 0, hi = 1}} loc(5:4) {",
              "  ^():",
              f"    tcgen05_alloc(%slot) {{cols = {cols}}} loc(5:4)",
              "    tcgen05_relinquish_alloc_permit loc(5:4)",
              "    yield loc(5:4)", "  } {", "  ^():", "    yield loc(5:4)", "  }",
              "  %first = cmp(%t, %zero) {pred = eq} : i1 loc(6:4)",
              "  if(%first) {filter = {axis = thread, lo = 0, hi = 1}} loc(6:4) {",
              "  ^():", "    mbarrier_init(%bar, %zero, %one) loc(6:4)", "    yield loc(6:4)",
              "  } {", "  ^():", "    yield loc(6:4)", "  }",
              "  tcgen05_fence {kind = before_thread_sync} loc(7:4)", "  sync loc(7:4)",
              "  tcgen05_fence {kind = after_thread_sync} loc(7:4)",
              "  %taddr = load_at(%slot, %zero) : i32 loc(8:4)",
              "  if(%first) {filter = {axis = thread, lo = 0, hi = 1}} loc(9:4) {", "  ^():"]
    flags = "".join(f", {name} = true" for name, on in (("trans_a", trans_a),
                                                          ("trans_b", trans_b)) if on)
    for j, offsets in enumerate(steps):
        for side, desc, offset in (("a", a, offsets[0]), ("b", b, offsets[1])):
            lines += [f"    %o{side}{j} = const {{value = {offset}}} : i32 loc(9:4)",
                      f"    %d{side}{j} = tcgen05_desc(%s{side}, %o{side}{j}) "
                      f"{{lbo = {desc.lbo}, sbo = {desc.sbo}, swizzle = {desc.swizzle}}} : "
                      "i64 loc(9:4)"]
        keep = "" if j else ", accumulate = false"
        lines.append(f"    tcgen05_mma(%taddr, %da{j}, %db{j}) {{m = {m}, n = {n}, "
                     f"a_type = {dtype}{flags}{keep}}} loc(10:4)")
    lines += ["    tcgen05_commit(%bar, %zero) loc(11:4)", "    yield loc(9:4)",
              "  } {", "  ^():", "    yield loc(9:4)", "  }"]
    if wait:
        lines.append("  mbarrier_wait(%bar, %zero, %zero) loc(12:4)")
    lines += ["  tcgen05_fence {kind = after_thread_sync} loc(12:4)",
              "  %lane = const {value = 2097152} : i32 loc(13:4)",   # 32 << 16: 32 lanes
              "  %wlane = binary(%w, %lane) {op = mul} : i32 loc(13:4)",
              "  %mine = binary(%taddr, %wlane) {op = add} : i32 loc(13:4)"]

    def values(prefix, first=0, count=n):
        return ", ".join(f"%{prefix}{i}" for i in range(first, first + count))

    def f32s(count):
        return ", ".join(["f32"] * count)
    first = 0   # one tcgen05_ld per power of two in N (at most 128), at its first column
    while first < n:
        width = min(128, 1 << (n - first).bit_length() - 1)
        lines += [f"  %c{first} = const {{value = {first}}} : i32 loc(13:4)",
                  f"  %at{first} = binary(%mine, %c{first}) {{op = add}} : i32 loc(13:4)",
                  f"  {values('l', first, width)} = tcgen05_ld(%at{first}) {{num = {width}}} : "
                  f"{f32s(width)} loc(13:4)"]
        first += width
    lines += [f"  {values('v')} = tcgen05_wait_ld({values('l')}) : {f32s(n)} loc(14:4)",
              f"  %per = const {{value = {n}}} : i32 loc(15:4)",
              "  %base = binary(%t, %per) {op = mul} : i32 loc(15:4)"]
    for i in range(n):
        lines += [f"  %k{i} = const {{value = {i}}} : i32 loc(15:4)",
                  f"  %p{i} = binary(%base, %k{i}) {{op = add}} : i32 loc(15:4)",
                  f"  store_at(%d, %v{i}, %p{i}) loc(15:4)"]
    lines += ["  tcgen05_fence {kind = before_thread_sync} loc(16:4)", "  sync loc(16:4)",
              "  if(%warp0) {filter = {axis = warp, lo = 0, hi = 1}} loc(17:4) {", "  ^():",
              f"    tcgen05_dealloc(%taddr) {{cols = {cols}}} loc(17:4)", "    yield loc(17:4)",
              "  } {", "  ^():", "    yield loc(17:4)", "  }"]
    return "\n".join(lines + ["}"])
