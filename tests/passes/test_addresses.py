"""place-fragments and lower-addresses: where a per-thread kernel's elements live, and their
addresses as integer IR checked against the layout algebra."""
from __future__ import annotations

import operator

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.errors import CompilationError, LaunchError, SourceLocation
from tilejit.ir import Builder, KernelIR, parse_kernel, verify
from tilejit.ir.addressing import Addressing, Storage
from tilejit.ir.core import walk
from tilejit.ir.storage import layout_reach, reaches_threads, storage_elements
from tilejit.ir.types import BufferType, MemScope, TeamKind, f32, i32
from tilejit.layout import S, Axis, ComposeLayout, Iter, TileLayout, laneid
from tilejit.passes import addresses, shared_plan

FILE = "/src/addr.py"
PER_THREAD = {"num_warps": 4, "distribution": "per_thread"}


def _kernel(attrs=PER_THREAD, params=("x",), types=None):
    b = Builder(SourceLocation(FILE, 1, 0))
    types = types or [BufferType(f32, (None, None), MemScope.GLOBAL, strides=(None, 1))]
    k = KernelIR.new("addr", list(params), types, dict(attrs), b.loc)
    return k, b


def _ops(kernel, name):
    return [op for op in walk(kernel.body) if op.name == name]


def evaluate(value, env):
    """The integer a lowered offset computes, the block arguments' values taken from
    ``env`` (value -> int): const, cast and binary ops only."""
    if value in env:
        return env[value]
    op = value.owner
    if op.name == "const":
        return op.attrs["value"]
    if op.name == "cast":
        return evaluate(op.operands[0], env)
    a, b = (evaluate(v, env) for v in op.operands)
    return getattr(operator, {"add": "add", "mul": "mul", "floordiv": "floordiv", "mod": "mod",
                              "and": "and_", "or": "or_", "xor": "xor", "shl": "lshift",
                              "shr": "rshift"}[op.attrs["op"]])(a, b)


# ----------------------------------------------------------------------------- text
LOWERED_REGION = """\
kernel @addr(%x: buffer<global, f32, [?, ?], strides=[?, 1]>) {num_warps = 4, distribution = "per_thread"} loc("/src/addr.py":1:0) {
  %r0 = thread_index {kind = cta_id} : i32 loc(2:4)
  %c = thread_index {kind = lane_id} : i32 loc(2:4)
  %t = region(%x, %r0, %c) {sizes = [4, 8], keep = [true, true]} : region<buffer<global, f32, [?, ?], strides=[?, 1]>, [4, 8]> loc(3:4)
  %v = load(%t, %c, %r0) : f32 loc(4:4)
}"""


def test_a_load_through_a_region_becomes_a_checked_flat_load_with_its_strides():
    lowered = addresses.lower_addresses(parse_kernel(LOWERED_REGION))
    verify(lowered)
    text = str(lowered)
    assert "load(" not in text.replace("load_at(", "")
    (check,), (load,) = _ops(lowered, "bounds_check"), _ops(lowered, "load_at")
    assert check.attrs["buffer"] == "x" and check.attrs["access"] == "load"
    assert [op.name for op in _ops(lowered, "buffer_stride")] == ["buffer_stride"]  # dim 0 only
    assert load.operands[0] is lowered.params[0] and load.operands[1].type.bits == 64
    # offset = (r0 + c) * stride0 + (c + r0), with the run-time stride
    row0, col = (op.result for op in _ops(lowered, "thread_index"))
    stride = _ops(lowered, "buffer_stride")[0].result
    assert evaluate(load.operands[1], {row0: 3, col: 5, stride: 100}) == 8 * 100 + 8
    assert str(parse_kernel(text)) == text   # the flat ops round-trip


def test_team_once_kernels_pass_through_unchanged():
    kernel = parse_kernel(LOWERED_REGION.replace(', distribution = "per_thread"', ""))
    assert addresses.lower_addresses(kernel) is kernel
    assert addresses.place_fragments(kernel) is kernel


# ----------------------------------------------------------------------------- fragments
def test_a_team_fragment_becomes_shared_with_a_copy_per_team_and_a_laid_out_one_private():
    k, b = _kernel()
    with b.insert_into(k.body):
        cta = b.alloc(MemScope.FRAGMENT, f32, (4, 8))
        laid_out = b.alloc(MemScope.FRAGMENT, f32, (32,), TileLayout(S[32:1 @ laneid]))
        _, body = b.team(TeamKind.WARP)
        with b.insert_into(body):
            warp = b.alloc(MemScope.FRAGMENT, f32, (2, 2))
            one = b.const(1, i32)
            b.store(warp, b.const(2.0, f32), [one, one])
            b.yield_()
        _, body = b.team(TeamKind.THREAD)
        with b.insert_into(body):
            own = b.alloc(MemScope.FRAGMENT, f32, (3,))
            b.yield_()
    cta.name_hint, laid_out.name_hint, warp.name_hint, own.name_hint = \
        "tile", "lanes", "mine", "own"
    placed = addresses.place_fragments(k)
    verify(placed)
    scopes = {op.result.name_hint: (op.attrs["scope"], op.attrs["per_team"])
              for op in _ops(placed, "alloc")}
    assert scopes == {"tile": (MemScope.SHARED, None), "lanes": (MemScope.LOCAL, None),
                      "mine": (MemScope.SHARED, TeamKind.WARP), "own": (MemScope.LOCAL, None)}
    planned = shared_plan.run(placed)
    assert planned.attrs["shared_bytes"] >= 4 * 8 * 4 + 4 * (2 * 2 * 4)   # 4 warps' copies
    # a thread reaches its own warp's copy: warp_id times the copy's 4 elements, plus 3
    (store,) = _ops(addresses.lower_addresses(planned), "store_at")
    (warp_id,) = _warp_ids(store.operands[2])
    assert evaluate(store.operands[2], {warp_id: 3}) == 3 * 4 + 3


def _warp_ids(value):
    """The warp_id op an offset reads."""
    op = value.owner
    if getattr(op, "name", None) == "thread_index":
        return [value]
    return [w for v in getattr(op, "operands", ()) for w in _warp_ids(v)][:1]


# ----------------------------------------------------------------------------- layouts
@st.composite
def memory_layouts(draw):
    """(shape, layout) of an on-chip tile laid out over memory only: a permuted row-major
    order, optionally padded, optionally swizzled."""
    rows, cols = draw(st.sampled_from([1, 2, 3, 4, 8])), draw(st.sampled_from([4, 8, 16]))
    pad = draw(st.sampled_from([0, 1, 4]))
    if draw(st.booleans()):
        tile = TileLayout(S[(rows, cols):(cols + pad, 1)])
    else:
        tile = TileLayout(S[(rows, cols):(1, rows + pad)])
    if draw(st.booleans()) and pad == 0 and rows * cols >= 64:
        return (rows, cols), ComposeLayout.for_mode(draw(st.sampled_from(["B32", "B64"])),
                                                    4, tile)
    return (rows, cols), tile


@settings(max_examples=40, deadline=None, derandomize=True)
@given(memory_layouts(), st.data())
def test_on_chip_offsets_are_the_layouts_memory_coordinates(shaped, data):
    (rows, cols), layout = shaped
    k, b = _kernel()
    with b.insert_into(k.body):
        row, col = b.thread_index("warp_id"), b.thread_index("lane_id")
        buf = b.alloc(MemScope.SHARED, f32, (rows, cols), layout)
        start = data.draw(st.integers(0, rows - 1))
        sub = b.region(buf, [b.const(start, i32), b.const(0, i32)], (rows - start, cols))
        b.store(sub, b.const(1.0, f32), [row, col])
    lowered = addresses.lower_addresses(k)
    verify(lowered)
    (store,) = _ops(lowered, "store_at")
    assert store.operands[0] is _ops(lowered, "alloc")[0].result
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    low = layout_reach(tile)["m"][0]
    row_value, col_value = (op.result for op in _ops(lowered, "thread_index"))
    for i in range(rows - start):
        for j in range(cols):
            expected = layout.apply(start + i, j, shape=(rows, cols))["m"] - low
            got = evaluate(store.operands[2], {row_value: i, col_value: j})
            assert got == expected, (i, j)


def nested_strides(draw, extents, axes) -> list[int]:
    """Strides nesting each axis's iters in a random order, with gaps of 2 between some of
    ``m``'s (memory): thread axes stay dense, each thread one element of them."""
    strides = [0] * len(extents)
    for axis in dict.fromkeys(axes):   # first-appearance order: a set's would follow
        # the process's string-hash seed, and the draws with it
        step = 1
        for i in draw(st.permutations([i for i, a in enumerate(axes) if a == axis])):
            step *= draw(st.sampled_from([1, 2])) if axis == "m" else 1
            strides[i] = step
            step *= extents[i]
    return strides


@st.composite
def thread_layouts(draw):
    """(shape, layout) of a tile laid out over lanes, warps, threads of a warpgroup and
    memory: each dimension split into two iters on random axes, each axis's iters nested in
    a random order (with gaps and an offset on ``m``), sometimes a replica over lanes."""
    shape = (draw(st.sampled_from([1, 2, 3, 4, 6])), draw(st.sampled_from([2, 4, 8, 12])))
    extents = []
    for n in shape:
        outer = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        extents += [outer, n // outer]
    axes = [draw(st.sampled_from(["m", "m", "laneid", "warpid", "tid_in_wg"]))
            for _ in extents]
    strides = nested_strides(draw, extents, axes)
    shard = [Iter(e, s, Axis(a)) for e, s, a in zip(extents, strides, axes)]
    replica = [Iter(2, 16, Axis("laneid"))] if draw(st.booleans()) else []
    offset = {"m": draw(st.integers(0, 3))}
    return shape, TileLayout.from_iters(shard, replica, offset)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(thread_layouts())
def test_a_private_tile_over_threads_is_stored_over_its_memory_axis_alone(shaped):
    (rows, cols), layout = shaped
    assume(reaches_threads(layout))
    k, b = _kernel()
    with b.insert_into(k.body):
        row, col = b.thread_index("warp_id"), b.thread_index("lane_id")
        buf = b.alloc(MemScope.FRAGMENT, f32, (rows, cols), layout)
        b.store(buf, b.const(1.0, f32), [row, col])
    if _two_elements_in_one_place(layout, (rows, cols)):   # laneid and tid_in_wg meet
        with pytest.raises(CompilationError, match="at one place"):
            addresses.place_fragments(k)
        return
    lowered = addresses.lower_addresses(addresses.place_fragments(k))
    verify(lowered)
    (alloc,), (store,) = _ops(lowered, "alloc"), _ops(lowered, "store_at")
    assert alloc.attrs["scope"] is MemScope.LOCAL and alloc.attrs["layout"] == layout
    assert not _ops(lowered, "store") and store.operands[0] is alloc.result
    low, high = layout_reach(layout)["m"]
    private = Addressing.from_layout(layout, (rows, cols), thread_private=True)
    assert private.span == storage_elements((rows, cols), layout, thread_private=True) \
        == high - low + 1
    row_value, col_value = (op.result for op in _ops(lowered, "thread_index"))
    for i in range(rows):
        for j in range(cols):
            expected = layout.apply(i, j, shape=(rows, cols))["m"] - low
            assert evaluate(store.operands[2], {row_value: i, col_value: j}) == expected


def _two_elements_in_one_place(layout, shape) -> bool:
    """By enumeration: whether one thread holds two elements at one memory coordinate."""
    seen = {}
    for i in range(shape[0]):
        for j in range(shape[1]):
            for loc in layout.locations(i, j, shape=shape):
                tid = loc.get("tid_in_wg", 0)
                key = (loc.get("laneid", 0) + tid % 32, loc.get("warpid", 0) + tid // 32,
                       loc["m"])
                if seen.setdefault(key, (i, j)) != (i, j):
                    return True
    return False


def test_a_layout_giving_a_thread_two_elements_at_one_place_is_refused_at_its_alloc():
    # lane 1 holds element 1 (laneid 1) and element 2 (tid_in_wg 1), both at m 0
    k, b = _kernel()
    with b.insert_into(k.body):
        b.loc = SourceLocation(FILE, 7, 4)
        b.alloc(MemScope.FRAGMENT, f32, (2, 2), TileLayout.parse("(2,2):(1@tid_in_wg,1@laneid)"))
    with pytest.raises(CompilationError, match=r"gives thread \(lane, warp\) \(1, 0\) "
                                               r"elements \[0, 1\] and \[1, 0\] at one place") as err:
        addresses.place_fragments(k)
    assert (err.value.file, err.value.line) == (FILE, 7)


@pytest.mark.parametrize("scope", [MemScope.FRAGMENT, MemScope.LOCAL])
def test_memory_axes_other_than_m_are_stored_like_m_per_thread(scope):
    """Trainium's partition and free axes are memory: per thread, a CTA's fragment over
    them is shared memory and a private buffer over them is private memory, each stored
    over all the axes its layout reaches and addressed flat like any other."""
    layout = TileLayout.parse("(2,1,2,2):(1@m,1@P,2@F,4@m) + 5@P - 3@F + 3@m")
    k, b = _kernel()
    with b.insert_into(k.body):
        index = b.thread_index("thread_id")
        buf = b.alloc(scope, f32, (2, 4), layout)
        b.load(buf, [b.const(1, i32), index])
    lowered = addresses.lower_addresses(shared_plan.run(addresses.place_fragments(k)))
    verify(lowered)
    (alloc,) = _ops(lowered, "alloc")
    assert alloc.attrs["scope"] is (MemScope.SHARED if scope is MemScope.FRAGMENT else scope)
    (load,) = _ops(lowered, "load_at")
    tid = _ops(lowered, "thread_index")[0].result
    storage = Storage.of(layout_reach(layout))   # m innermost, then P and F
    assert storage.size == storage_elements((2, 4), layout) == 9 * 1 * 3   # m [0, 8], P [5], F [-3, -1]
    offsets = set()
    for j in range(4):
        place = layout.apply(1, j, shape=(2, 4))
        offsets.add(evaluate(load.operands[1], {tid: j}))
        assert evaluate(load.operands[1], {tid: j}) == sum(
            weight * (place.get(name, 0) - low) for name, low, _, weight in storage.axes)
    assert len(offsets) == 4


def test_a_reshaping_view_of_a_laid_out_buffer_goes_through_its_logical_shape():
    layout = TileLayout(S[(4, 8):(1, 4)])            # column-major 4x8
    k, b = _kernel()
    with b.insert_into(k.body):
        flat_index = b.thread_index("thread_id")
        buf = b.alloc(MemScope.SHARED, f32, (4, 8), layout)
        flat = b.view(buf, (32,))
        b.load(flat, [flat_index])
    lowered = addresses.lower_addresses(k)
    (load,) = _ops(lowered, "load_at")
    index = _ops(lowered, "thread_index")[0].result
    for n in range(32):
        assert evaluate(load.operands[1], {index: n}) == layout.apply(n // 8, n % 8, shape=(4, 8))["m"]


def test_accesses_of_tiles_laid_out_over_threads_keep_their_logical_indices():
    k, b = _kernel()
    with b.insert_into(k.body):
        lane = b.thread_index("lane_id")
        frag = b.alloc(MemScope.FRAGMENT, f32, (64,), TileLayout(S[64:1 @ laneid]))
        shared = b.alloc(MemScope.SHARED, f32, (64,))
        b.load(b.region(frag, [lane], (32,)), [lane])
        # the same index math for a buffer it lowers: built anew, not taken from the
        # declined access (whose ops the rewriter dropped)
        b.load(b.region(shared, [lane], (32,)), [lane])
    lowered = addresses.lower_addresses(k)
    verify(lowered)
    assert len(_ops(lowered, "load")) == 1 and len(_ops(lowered, "load_at")) == 1


# ----------------------------------------------------------------------------- e2e
@tj.kernel
def _shift_rows(x, out, N: tj.constexpr):
    s = tj.alloc_shared((N,), tj.float32)
    t = tj.thread_id()
    for i in range(t, N, 128):                # 4 warps
        s[i] = x[tj.cta_id(0), i]
    tj.sync()
    for i in range(t, N, 128):
        out[tj.cta_id(0), i] = s[(i + 1) % N] * 2.0


def test_the_cpu_runs_the_lowered_ir_per_thread():
    x = torch.randn(5, 200)
    out = torch.empty_like(x)
    compiled = _shift_rows.compile(x, out, N=200, simt=True)
    assert "load_at(" in compiled.asm["lowered"] and "bounds_check(" in compiled.asm["lowered"]
    _shift_rows[(5,)](x, out, N=200, simt=True)
    torch.testing.assert_close(out, torch.roll(x, -1, dims=1) * 2.0)


@tj.kernel
def _reads_past_the_end(x, out):
    t = tj.thread_id()
    out[t] = x[t + 1]


def test_a_flat_access_past_the_end_is_a_launch_error_naming_the_buffer_and_line():
    x, out = torch.zeros(128), torch.zeros(128)
    with pytest.raises(LaunchError, match=r"out-of-bounds load of global buffer 'x': "
                                          r"index \[128\] outside shape \[128\]") as info:
        _reads_past_the_end[(1,)](x, out, simt=True)
    assert info.value.loc.line == _reads_past_the_end.fn.__code__.co_firstlineno + 3
