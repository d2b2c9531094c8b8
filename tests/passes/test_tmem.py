"""lower-tmem on textual per-thread IR: a tensor-memory alloc becomes warp 0's allocation of
a power of two of columns into a shared slot, fenced barriers, every thread's load of the
address (in place of tmem_address), and warp 0's free at the end; one relinquish after the
last allocation; an alloc inside control flow is a located error; team_once kernels are
left alone."""
import re

import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify
from tilejit.passes import tmem


def kernel(widths=(48,), nested=False, distribution="per_thread"):
    lines = [f'kernel @k() {{distribution = "{distribution}"}} loc("/src/k.py":1:0) {{']
    for i, width in enumerate(widths):
        alloc = (f"%acc{i} = alloc {{scope = tmem, dtype = f32, shape = [128, {width}]}} : "
                 f"buffer<tmem, f32, [128, {width}]> loc({2 + i}:4)")
        if nested:
            lines += ["  %c = const {value = true} : i1 loc(2:4)", "  if(%c) loc(2:4) {",
                      "  ^():", f"    {alloc}", "    yield loc(2:4)", "  } {", "  ^():",
                      "    yield loc(2:4)", "  }"]
            continue
        lines += [f"  {alloc}",
                  f"  %a{i} = tmem_address(%acc{i}) : i32 loc(9:4)"]
    return verify(parse_kernel("\n".join(lines + ["}"])))


def ops(kernel_ir) -> list[str]:
    return re.findall(r"^\s*(?:%[^=]*= )?(\w+)", str(kernel_ir), re.MULTILINE)[1:]


def test_an_allocation_and_its_free():
    lowered = verify(tmem.run(kernel()))
    text = str(lowered)
    assert "tmem_address" not in text and "scope = tmem" not in text
    assert "tcgen05_alloc(%acc0_slot) {cols = 64}" in text
    assert "filter = {axis = warp, lo = 0, hi = 1}" in text
    names = [n for n in ops(lowered) if n.startswith(("tcgen05", "sync", "load"))]
    assert names == ["tcgen05_alloc", "tcgen05_relinquish_alloc_permit", "tcgen05_fence",
                     "sync", "tcgen05_fence", "load", "tcgen05_fence", "sync", "tcgen05_fence",
                     "tcgen05_dealloc"]
    assert "tcgen05_dealloc(%acc0_addr) {cols = 64}" in text


def test_one_relinquish_after_the_last_of_two_allocations():
    text = str(verify(tmem.run(kernel((32, 200)))))
    assert [int(c) for c in re.findall(r"tcgen05_alloc\(%\w+\) \{cols = (\d+)\}", text)] == \
        [32, 256]
    assert text.count("tcgen05_relinquish_alloc_permit") == 1
    assert text.index("tcgen05_relinquish") > text.rindex("tcgen05_alloc(")
    assert text.count("tcgen05_dealloc(") == 2


def test_an_allocation_inside_control_flow_is_a_located_error():
    with pytest.raises(CompilationError, match="call tj.alloc_tmem at the kernel's top level") \
            as info:
        tmem.run(kernel(nested=True))
    assert info.value.line == 2


def test_team_once_kernels_keep_their_tensor_memory():
    source = kernel(distribution="team_once")
    assert tmem.run(source) is source
