"""Textual per-thread IR of one warpgroup's wgmma (m64nNk16), for the IR, CPU and cuda tests:
each of the 128 threads copies its share of ``x`` (A's shared bytes, in whatever layout the
test chose) and ``y`` (B's) into two shared buffers, then the warpgroup fences, multiplies
through descriptors once per k-step (each step's descriptors name the step's first
elements: ``steps`` holds their element offsets in A's and B's buffers), commits and
waits, and each thread stores its N / 2 accumulators to ``d`` at ``thread * N / 2 + i``.
The kernel has the default 4 warps: one warpgroup."""
from __future__ import annotations

from tilejit.ir.ops_wgmma import MatrixDescriptor, wgmma_accumulators

THREADS = 128


def wgmma_kernel(n: int, a: MatrixDescriptor, b: MatrixDescriptor, *, dtype: str = "f16",
                 a_elements: int = 1024, b_elements: int | None = None,
                 steps=((0, 0),), trans_a: bool = False, trans_b: bool = False,
                 wait: bool = True) -> str:
    """The kernel's text; ``a.start`` / ``b.start`` are the buffers' planned byte offsets."""
    b_elements = b_elements or 16 * n
    count = wgmma_accumulators(n)
    shared = max(a.start + 2 * a_elements, b.start + 2 * b_elements)
    lines = [f"kernel @wgmma(%x: buffer<global, {dtype}, [?], strides=[1]>, "
             f"%y: buffer<global, {dtype}, [?], strides=[1]>, "
             '%d: buffer<global, f32, [?], strides=[1]>) '
             f'{{distribution = "per_thread", shared_bytes = {shared}}} loc("/src/k.py":1:0) {{',
             "  %t = thread_index {kind = thread_id} : i32 loc(2:4)"]
    lines += staged_operands(dtype, a, a_elements, b, b_elements)
    lines += ["  sync loc(4:4)", "  %z = const {value = 0.0} : f32 loc(5:4)"]

    def values(prefix):
        return ", ".join(f"%{prefix}{i}" for i in range(count))
    types = ", ".join(["f32"] * count)
    flags = "".join(f", {name} = true" for name, on in (("trans_a", trans_a),
                                                          ("trans_b", trans_b)) if on)
    lines.append(f"  {values('f')} = wgmma_fence({', '.join(['%z'] * count)}) : {types} "
                 "loc(6:4)")
    previous = "f"
    for j, offsets in enumerate(steps):
        for side, desc, offset in (("a", a, offsets[0]), ("b", b, offsets[1])):
            lines += [f"  %o{side}{j} = const {{value = {offset}}} : i32 loc(5:4)",
                      f"  %d{side}{j} = wgmma_desc(%s{side}, %o{side}{j}) {{lbo = {desc.lbo}, "
                      f"sbo = {desc.sbo}, swizzle = {desc.swizzle}}} : i64 loc(5:4)"]
        lines.append(f"  {values(f'm{j}_')} = wgmma_mma_async(%da{j}, %db{j}, "
                     f"{values(previous)}) {{n = {n}, a_type = {dtype}{flags}}} : {types} "
                     "loc(6:4)")
        previous = f"m{j}_"
    lines.append(f"  {values('c')} = wgmma_commit_group({values(previous)}) : {types} loc(7:4)")
    result = "c"
    if wait:
        lines.append(f"  {values('w')} = wgmma_wait_group({values('c')}) {{pending = 0}} : "
                     f"{types} loc(8:4)")
        result = "w"
    lines += [f"  %per = const {{value = {count}}} : i32 loc(9:4)",
              "  %first = binary(%t, %per) {op = mul} : i32 loc(9:4)"]
    for i in range(count):
        lines += [f"  %k{i} = const {{value = {i}}} : i32 loc(9:4)",
                  f"  %p{i} = binary(%first, %k{i}) {{op = add}} : i32 loc(9:4)",
                  f"  store_at(%d, %{result}{i}, %p{i}) loc(9:4)"]
    return "\n".join(lines + ["}"])


def staged_operands(dtype: str, a: MatrixDescriptor, a_elements: int, b: MatrixDescriptor,
                    b_elements: int) -> list[str]:
    """The lines that give A and B their shared buffers (``%sa``, ``%sb`` at the
    descriptors' start offsets) and copy ``%x`` / ``%y`` into them, element ``t + 128 i``
    by thread ``t`` (``%t``)."""
    lines = []
    for name, src, size, desc in (("sa", "x", a_elements, a), ("sb", "y", b_elements, b)):
        lines.append(f"  %{name} = alloc {{scope = shared, dtype = {dtype}, shape = [{size}], "
                     f"offset = {desc.start}}} : buffer<shared, {dtype}, [{size}]> loc(3:4)")
        for i in range(-(-size // THREADS)):
            lines += [f"  %{name}c{i} = const {{value = {i * THREADS}}} : i32 loc(3:4)",
                      f"  %{name}o{i} = binary(%t, %{name}c{i}) {{op = add}} : i32 loc(3:4)",
                      f"  %{name}v{i} = load_at(%{src}, %{name}o{i}) : {dtype} loc(3:4)",
                      f"  store_at(%{name}, %{name}v{i}, %{name}o{i}) loc(3:4)"]
    return lines
