"""On-chip buffers addressed through layouts: swizzles, column-major and split dimensions,
views and regions; every address comes from the layout's coordinates on all of its axes
(``m`` innermost)."""
import numpy as np
import pytest

import tilejit as tj
from cpu_kernels import FRAGMENT, SHARED, KernelBuilder, matrix, vector

from tilejit.ir.types import f16, f32, i32, i64
from tilejit.layout import ComposeLayout, S, TileLayout


def write_through_layout_read_linear(layout, shape, dtype=f32) -> np.ndarray:
    """Store element (i, j) = i * cols + j through ``layout``; return the raw memory, read
    through an identity view."""
    rows, cols = shape
    span = layout.span()
    with KernelBuilder("layout", num_warps=1, out=vector(dtype)) as kb:
        tile = kb.alloc(SHARED, dtype, shape, layout)
        with kb.loop(kb.c(0), kb.c(rows)) as (i,):
            with kb.loop(kb.c(0), kb.c(cols)) as (j,):
                flat = kb.op("add", kb.op("mul", i, kb.c(cols)), j)
                kb.store(tile, kb.cast(flat, dtype), [i, j])
        raw = kb.view(tile, (span,), TileLayout(S[span]))
        with kb.loop(kb.c(0), kb.c(span)) as (m,):
            kb.store(kb.p["out"], kb.load(raw, [m]), [m])
    out = np.full(span, -1, dtype.numpy_dtype())
    kb.run(1, [out], debug=True)
    return out


def expected_memory(layout, shape) -> np.ndarray:
    memory = np.full(layout.span(), -1.0)
    for i in range(shape[0]):
        for j in range(shape[1]):
            memory[layout.apply(i, j, shape=shape)["m"]] = i * shape[1] + j
    return memory


@pytest.mark.parametrize("mode", ["B32", "B64", "B128"])
def test_swizzled_shared_memory(mode):
    shape = (8, 64)
    layout = ComposeLayout.for_mode(mode, 2, TileLayout(S[shape]))
    memory = write_through_layout_read_linear(layout, shape, f16)
    np.testing.assert_array_equal(memory, expected_memory(layout, shape))
    assert not np.array_equal(memory, np.arange(512))  # the swizzle moved something


@pytest.mark.parametrize("layout", [
    TileLayout(S[(6, 10):(1, 6)]),               # column-major
    TileLayout(S[(3, 2, 10):(10, 30, 1)]),       # rows split into two iters
    TileLayout(S[(2, 3, 10):(3, 1, 6)]),         # and interleaved with the columns
], ids=str)
def test_affine_layouts(layout):
    memory = write_through_layout_read_linear(layout, (6, 10))
    np.testing.assert_array_equal(memory, expected_memory(layout, (6, 10)))


def test_view_without_layout_reshapes_logically_and_region_offsets():
    """A column-major tile viewed as (60,) keeps logical order; a region reads a window."""
    layout = TileLayout(S[(6, 10):(1, 6)])
    with KernelBuilder("views", num_warps=1, out=vector(i32), window=vector(i32)) as kb:
        tile = kb.alloc(SHARED, i32, (6, 10), layout)
        with kb.loop(kb.c(0), kb.c(6)) as (i,):
            with kb.loop(kb.c(0), kb.c(10)) as (j,):
                kb.store(tile, kb.op("add", kb.op("mul", i, kb.c(10)), j), [i, j])
        flat = kb.view(tile, (60,))
        with kb.loop(kb.c(0), kb.c(60)) as (m,):
            kb.store(kb.p["out"], kb.load(flat, [m]), [m])
        window = kb.region(tile, [kb.c(2), kb.c(3)], (3, 4))
        with kb.loop(kb.c(0), kb.c(3)) as (i,):
            with kb.loop(kb.c(0), kb.c(4)) as (j,):
                kb.store(kb.p["window"], kb.load(window, [i, j]),
                         [kb.op("add", kb.op("mul", i, kb.c(4)), j)])
    out, window = np.zeros(60, np.int32), np.zeros(12, np.int32)
    kb.run(1, [out, window], debug=True)
    np.testing.assert_array_equal(out, np.arange(60))
    np.testing.assert_array_equal(window, np.arange(60).reshape(6, 10)[2:5, 3:7].ravel())


def test_region_of_global_with_dropped_dimension_and_strides():
    with KernelBuilder("row_of_matrix", a=matrix(), out=vector()) as kb:
        row = kb.region(kb.p["a"], [kb.c(2, i64), kb.c(1, i64)], (1, 4), keep=(False, True))
        with kb.loop(kb.c(0), kb.c(4)) as (j,):
            kb.store(kb.p["out"], kb.load(row, [j]), [j])
        kb.store(kb.p["out"], kb.cast(kb.buffer_stride(row, 0), f32), [kb.c(4)])
    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    out = np.zeros(5, np.float32)
    kb.run(1, [a, out], debug=True)
    np.testing.assert_array_equal(out, [15, 16, 17, 18, 1])


def test_a_layout_less_view_of_a_laid_out_fragment_keeps_logical_order():
    with KernelBuilder("frag", num_warps=1, out=vector(i32)) as kb:
        frag = kb.alloc(FRAGMENT, i32, (4, 3), TileLayout(S[(4, 3):(1, 4)]))
        with kb.loop(kb.c(0), kb.c(12)) as (k,):
            kb.store(kb.view(frag, (12,)), k, [k])
        with kb.loop(kb.c(0), kb.c(4)) as (i,):
            kb.store(kb.p["out"], kb.load(frag, [i, kb.c(2)]), [i])
    out = np.zeros(4, np.int32)
    kb.run(1, [out])
    np.testing.assert_array_equal(out, [2, 5, 8, 11])


def test_a_view_reinterprets_storage_on_thread_axes():
    """A (4, 3) fragment on lanes x registers (with warp replicas) viewed as (3, 4) with
    the axes swapped: view[j, i] is the element stored at lane i, register j."""
    layout = TileLayout.parse("(4,3):(1@laneid,1@m) + R[2:1@warpid]")
    with KernelBuilder("lanes", num_warps=1, out=vector(i32)) as kb:
        frag = kb.alloc(FRAGMENT, i32, (4, 3), layout)
        with kb.loop(kb.c(0), kb.c(4)) as (i,):
            with kb.loop(kb.c(0), kb.c(3)) as (j,):
                kb.store(frag, kb.op("add", kb.op("mul", i, kb.c(3)), j), [i, j])
        swapped = kb.view(frag, (3, 4), TileLayout.parse("(3,4):(1@m,1@laneid)"))
        with kb.loop(kb.c(0), kb.c(3)) as (j,):
            with kb.loop(kb.c(0), kb.c(4)) as (i,):
                flat = kb.op("add", kb.op("mul", j, kb.c(4)), i)
                kb.store(kb.p["out"], kb.load(swapped, [j, i]), [flat])
    out = np.full(12, -1, np.int32)
    kb.run(1, [out])
    np.testing.assert_array_equal(out.reshape(3, 4), np.arange(12).reshape(4, 3).T)


def test_a_view_reaching_outside_its_buffer_is_refused():
    with KernelBuilder("outside", num_warps=1, out=vector(i32)) as kb:
        frag = kb.alloc(FRAGMENT, i32, (4, 3), TileLayout.parse("(4,3):(1@laneid,1@m)"))
        kb.view(frag, (12,), TileLayout.parse("12:1@m"))
    with pytest.raises(tj.CompilationError, match=r"reaches m \[0, 11\], outside"):
        kb.run(1, [np.zeros(4, np.int32)])
