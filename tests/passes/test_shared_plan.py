"""The plan-shared-memory pass: sizes, alignment, reuse by liveness, capacity, text form."""
from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.errors import CompilationError, SourceLocation
from tilejit.ir import Builder, FilterSpec, KernelIR, parse_kernel, verify
from tilejit.ir.storage import storage_bytes
from tilejit.ir.types import BufferType, MemScope, TeamKind, f16, f32, i1, i32, u8
from tilejit.layout import R, S, ComposeLayout, TileLayout, laneid, warpid
from tilejit.passes import shared_plan
from tilejit.passes.pipeline import run_pipeline

SHARED = MemScope.SHARED
FILE = "/src/plan.py"


class Kernel:
    """A kernel under construction: ``alloc`` shared buffers, ``use`` them (a store of 0 at
    index 0), ``sync``, and nest ``loop`` / ``if_`` bodies; each op on its own line."""

    def __init__(self, target: str | None = None):
        self.b = Builder(SourceLocation(FILE, 1, 0))
        attrs = {"num_warps": 4} if target is None else {"num_warps": 4, "target": target}
        self.k = KernelIR.new("plan", ["x"], [BufferType(f32, (None,), MemScope.GLOBAL,
                                                         strides=(1,))], attrs, self.b.loc)
        self.blocks = [self.k.body]
        self.line = 1

    def _next(self):
        self.line += 1
        self.b.loc = SourceLocation(FILE, self.line, 4)
        return self.b.insert_into(self.blocks[-1])

    def alloc(self, name, shape=(32,), dtype=f32, layout=None):
        with self._next():
            value = self.b.alloc(SHARED, dtype, shape, layout)
        value.name_hint = name
        return value

    def use(self, buf):
        with self._next():
            zero = self.b.const(0, i32)
            t = buf.type.dtype
            self.b.store(buf, self.b.const(False if t == i1 else 0.0 if t.is_float else 0, t),
                         [zero] * buf.type.rank)

    def sync(self):
        with self._next():
            self.b.sync()

    def loop(self):
        with self._next():
            _, body = self.b.for_(self.b.const(0, i32), self.b.const(4, i32), self.b.const(1, i32))
        return self._nested(body)

    def _nested(self, block):
        kernel = self

        class Nested:
            def __enter__(self):
                kernel.blocks.append(block)

            def __exit__(self, *exc):
                with kernel._next():
                    kernel.b.yield_()
                kernel.blocks.pop()
        return Nested()

    def build(self) -> KernelIR:
        return verify(self.k)


def planned(k: KernelIR, capacity=None) -> tuple[KernelIR, dict[str, int]]:
    out = verify(shared_plan.run(k, capacity))
    offsets = {op.result.name_hint: op.attrs["offset"] for op in out.walk()
               if op.name == "alloc" and op.attrs["scope"] is SHARED}
    return out, offsets


# ----------------------------------------------------------------------------- placement
def test_buffers_live_together_get_disjoint_aligned_offsets():
    k = Kernel()
    a, b = k.alloc("a", (5,)), k.alloc("b", (3,))        # 20 and 12 bytes
    k.use(a)
    k.use(b)
    k.use(a)
    out, offsets = planned(k.build())
    assert offsets == {"a": 0, "b": 128}
    assert out.attrs["shared_bytes"] == 128 + 12


def test_buffers_used_one_after_the_other_behind_a_barrier_share_bytes():
    k = Kernel()
    a, b = k.alloc("a", (64,)), k.alloc("b", (16,))
    k.use(a)
    k.sync()
    k.use(b)
    out, offsets = planned(k.build())
    assert offsets == {"a": 0, "b": 0} and out.attrs["shared_bytes"] == 256


def test_without_a_barrier_between_them_buffers_do_not_share():
    # Another thread may still read a while this one writes b: no reuse without a barrier.
    k = Kernel()
    a, b = k.alloc("a", (64,)), k.alloc("b", (16,))
    k.use(a)
    k.use(b)
    assert planned(k.build())[1] == {"a": 0, "b": 256}


def test_a_buffer_other_ctas_reach_is_reused_only_behind_a_cluster_barrier():
    """Another CTA may still write a through tj.remote after this CTA's sync: b may take
    a's bytes only behind a cluster_sync."""
    for barrier, offsets in (("sync", {"a": 0, "b": 256}), ("cluster_sync", {"a": 0, "b": 0})):
        k = Kernel()
        a, b = k.alloc("a", (64,)), k.alloc("b", (16,))
        with k._next():
            remote = k.b.create("cluster_map", (a, k.b.const(1, i32))).result
        k.use(remote)
        with k._next():
            k.b.create(barrier)
        k.use(b)
        assert planned(k.build())[1] == offsets, barrier


def test_the_largest_buffer_goes_first():
    k = Kernel()
    small, big = k.alloc("small", (4,)), k.alloc("big", (100,))
    k.use(small)
    k.use(big)
    assert planned(k.build())[1] == {"big": 0, "small": 512}


def test_a_use_inside_a_loop_holds_the_buffer_over_the_whole_loop():
    k = Kernel()
    a, b = k.alloc("a"), k.alloc("b")
    with k.loop():
        k.use(a)
        k.sync()
        k.use(b)      # in the next iteration a is written again while b may be read
        k.sync()
    assert planned(k.build())[1] == {"a": 0, "b": 128}


def test_buffers_allocated_in_a_loop_body_share_within_an_iteration():
    k = Kernel()
    with k.loop():
        a = k.alloc("a")
        k.use(a)
        k.sync()
        b = k.alloc("b")
        k.use(b)
        k.sync()      # every thread is done with b before the next iteration writes a
    assert planned(k.build())[1] == {"a": 0, "b": 0}


def test_a_buffer_in_a_loop_body_without_a_closing_barrier_lives_past_the_loop():
    k = Kernel()
    with k.loop():
        a = k.alloc("a")
        k.use(a)
        k.sync()
        b = k.alloc("b")
        k.use(b)      # no barrier: the next iteration's a would race with this b
    assert planned(k.build())[1] == {"a": 0, "b": 128}


def test_a_barrier_under_a_thread_filter_does_not_release_a_buffer():
    k = Kernel()
    a, b = k.alloc("a"), k.alloc("b")
    k.use(a)
    with k._next():
        cond = k.b.const(True, i1)
        _, then, orelse = k.b.if_(cond, filter=FilterSpec("warp", 0, 1))
    with k._nested(then):
        k.sync()      # only warp 0 passes it
    with k.b.insert_into(orelse):
        k.b.yield_()
    k.use(b)
    assert planned(k.build())[1] == {"a": 0, "b": 128}


def test_a_team_once_single_region_of_the_cta_is_a_barrier():
    k = Kernel()
    a, b = k.alloc("a"), k.alloc("b")
    k.use(a)
    with k._next():
        _, body = k.b.single(TeamKind.CTA)
    with k._nested(body):
        k.use(b)      # runs after every thread arrived, so after every use of a
    assert planned(k.build())[1] == {"a": 0, "b": 0}


def test_a_warp_single_region_is_no_barrier():
    k = Kernel()
    a, b = k.alloc("a"), k.alloc("b")
    k.use(a)
    with k._next():
        _, body = k.b.single(TeamKind.WARP)   # only one warp's threads have arrived
    with k._nested(body):
        k.use(b)
    assert planned(k.build())[1] == {"a": 0, "b": 128}


def test_references_through_views_and_yields_keep_the_buffer_live():
    k = Kernel()
    a, b, c = k.alloc("a"), k.alloc("b"), k.alloc("c")
    with k._next():
        view = k.b.view(a, (4, 8))
        cond = k.b.const(True, i1)
        choice, then, orelse = k.b.if_(cond, [b.type])
    with k.b.insert_into(then):
        k.b.yield_([b])
    with k.b.insert_into(orelse):
        k.b.yield_([c])
    chosen = choice.results[0]
    k.sync()
    k.use(view)       # a, through its view
    k.use(chosen)     # b or c, through the if's result
    assert len(set(planned(k.build())[1].values())) == 3


def test_a_reference_carried_by_a_loop_is_live_over_the_loop():
    k = Kernel()
    a, b = k.alloc("a"), k.alloc("b")
    with k._next():
        _, body = k.b.for_(k.b.const(0, i32), k.b.const(4, i32), k.b.const(1, i32), [a])
    with k.b.insert_into(body):
        k.b.store(body.args[1], k.b.const(0.0, f32), [k.b.const(0, i32)])
        k.b.yield_([body.args[1]])
    k.sync()
    k.use(b)
    k.sync()
    assert planned(k.build())[1] == {"a": 0, "b": 0}   # a's loop ends before the barrier
    k2 = Kernel()
    a, b = k2.alloc("a"), k2.alloc("b")
    with k2._next():
        loop, body = k2.b.for_(k2.b.const(0, i32), k2.b.const(4, i32), k2.b.const(1, i32), [a])
    with k2.b.insert_into(body):
        k2.b.yield_([body.args[1]])
    k2.sync()
    k2.use(b)
    k2.use(loop.results[0])                           # a again, through the loop's result
    assert planned(k2.build())[1] == {"a": 0, "b": 128}


# ----------------------------------------------------------------------------- sizes
def test_a_128_byte_swizzled_tile_is_aligned_to_1024_bytes():
    swizzled = ComposeLayout.for_mode("B128", 2, TileLayout(S[(64, 64):(64, 1)]))
    k = Kernel()
    a, s = k.alloc("a", (3,)), k.alloc("s", (64, 64), f16, swizzled)
    for buf in (a, s, a):
        k.use(buf)
    out, offsets = planned(k.build())
    assert offsets == {"s": 0, "a": 8192}
    k = Kernel()
    big, s = k.alloc("big", (300,)), k.alloc("s", (64, 64), f16, swizzled)
    for buf in (big, s, big):
        k.use(buf)
    assert planned(k.build())[1] == {"big": 8192, "s": 0}
    k = Kernel()
    big, s = k.alloc("big", (3000,)), k.alloc("s", (64, 64), f16, swizzled)  # 12000 bytes
    for buf in (big, s, big):
        k.use(buf)
    assert planned(k.build())[1] == {"big": 0, "s": 12288}      # 12 KiB: a multiple of 1 KiB


@pytest.mark.parametrize("dtype,shape,layout", [
    (f32, (8, 8), None),
    (u8, (5,), None),
    (f32, (8, 8), TileLayout(S[(8, 8):(16, 1)])),                       # padded rows
    (f16, (16, 16), TileLayout(S[(16, 16):(1, 16)])),                   # column-major
    (f16, (64, 64), ComposeLayout.for_mode("B128", 2, TileLayout(S[(64, 64):(64, 1)]))),
    (f32, (16, 16), ComposeLayout.for_mode("B64", 4, TileLayout(S[(16, 16):(16, 1)]))),
    (f32, (8, 8), TileLayout(S[(8, 2, 4):(4 @ laneid, 1 @ warpid, 1)] + R[2:4 @ warpid])),
    (f32, (4, 8), TileLayout(S[(4, 8):(-8, 1)] + 3 @ laneid)),
])
def test_sizes_agree_with_the_cpu_storage(dtype, shape, layout):
    from tilejit.ir.addressing import Addressing
    addressing = Addressing.row_major(shape) if layout is None else \
        Addressing.from_layout(layout, shape)
    assert storage_bytes(dtype, shape, layout) == addressing.span * dtype.itemsize


# ----------------------------------------------------------------------------- capacity
def test_more_than_the_capacity_is_an_error_naming_every_buffer():
    k = Kernel()
    a, b = k.alloc("a_tile", (256,)), k.alloc("b_tile", (512,))
    k.use(a)
    k.use(b)
    with pytest.raises(CompilationError) as info:
        planned(k.build(), capacity=2048)
    text = str(info.value)
    assert "needs 3 KiB (3072 bytes)" in text and "at most 2 KiB (2048 bytes)" in text
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+\w+_tile\s", line)]
    assert rows == [["a_tile", "2", "1", "KiB", "2048"], ["b_tile", "3", "2", "KiB", "0"]]
    assert info.value.loc.line == 2        # a_tile: the buffer that crosses the limit


def test_the_capacity_comes_from_the_target():
    shared_plan.register_capacity("tiny", 1024)
    try:
        k = Kernel(target="tiny")
        k.use(k.alloc("tile", (512,)))
        with pytest.raises(CompilationError, match=r"the TINY target gives a CTA at most 1 KiB"):
            run_pipeline(k.build(), dump=(), passes=["plan-shared-memory"])
        k = Kernel(target="tiny")
        k.use(k.alloc("tile", (256,)))
        out, _ = run_pipeline(k.build(), dump=(), passes=["plan-shared-memory"])
        assert out.attrs["shared_bytes"] == 1024
    finally:
        shared_plan.unregister_capacity("tiny")


def test_the_cpu_registers_its_capacity():
    from tilejit.targets.backend import get_backend
    cpu = get_backend("cpu")
    cpu.register()
    kernel = Kernel(target="cpu").build()
    assert shared_plan.capacity_for(kernel) == cpu.capabilities.shared_memory_per_cta


# ----------------------------------------------------------------------------- text form
def test_the_plan_prints_parses_back_and_is_verified():
    k = Kernel()
    a, b = k.alloc("a", (5,)), k.alloc("b", (3,))
    k.use(a)
    k.use(b)
    out, _ = planned(k.build())
    text = str(out)
    assert "{shared_bytes = 140}" in text.splitlines()[0]
    assert ("%b = alloc {scope = shared, dtype = f32, shape = [3], offset = 128} : "
            "buffer<shared, f32, [3]>") in text
    assert str(verify(parse_kernel(text))) == text
    with pytest.raises(CompilationError, match="not a non-negative multiple of 128"):
        verify(parse_kernel(text.replace("offset = 128", "offset = 64")))
    with pytest.raises(CompilationError, match="only shared buffers have a planned offset"):
        verify(parse_kernel(text.replace("scope = shared, dtype = f32, shape = [3]",
                                         "scope = local, dtype = f32, shape = [3]")
                            .replace("buffer<shared, f32, [3]>", "buffer<local, f32, [3]>")))


def test_the_plan_is_in_the_dump(capsys):
    k = Kernel()
    k.use(k.alloc("a"))
    run_pipeline(k.build(), dump={"plan-shared-memory"})
    err = capsys.readouterr().err
    assert "IR after plan-shared-memory" in err and "offset = 0" in err


# ----------------------------------------------------------------------------- property
@st.composite
def programs(draw):
    """Straight-line steps over up to 6 buffers: ('alloc', i, elements, dtype), ('use', i),
    ('sync',), with some steps inside a loop."""
    count = draw(st.integers(1, 6))
    steps = [("alloc", i, draw(st.integers(1, 400)), draw(st.sampled_from([f32, f16, u8])))
             for i in range(count)]
    for _ in range(draw(st.integers(0, 16))):
        steps.append(draw(st.sampled_from([("sync",)] + [("use", i) for i in range(count)])))
    loop = sorted(draw(st.lists(st.integers(count, len(steps)), min_size=2, max_size=2)))
    return steps, (loop if draw(st.booleans()) else None)


def _conflict(steps, loop, i, j) -> bool:
    """Whether buffers i and j may be in use at the same time: no barrier separates the
    last use of one from the first use of the other (a loop counts as one step here)."""
    order = []   # (position, kind, buffer) with the loop collapsed to one position
    for pos, step in enumerate(steps):
        at = loop[0] if loop and loop[0] <= pos < loop[1] else pos
        order.append((at, step))
    uses = {b: [at for at, s in order if s[0] == "use" and s[1] == b] for b in (i, j)}
    if not uses[i] or not uses[j]:
        return False
    for first, second in ((i, j), (j, i)):
        last, begin = max(uses[first]), min(uses[second])
        if any(s == ("sync",) and last < at < begin for at, s in order):
            return False
    return True


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_buffers_in_use_together_never_share_bytes_and_all_are_aligned(program):
    steps, loop = program
    k, bufs = Kernel(), {}
    stack = None
    for pos, step in enumerate(steps):
        if loop and pos == loop[0]:
            stack = k.loop()
            stack.__enter__()
        if loop and pos == loop[1] and stack is not None:
            stack.__exit__(None, None, None)
            stack = None
        if step[0] == "alloc":
            bufs[step[1]] = k.alloc(f"b{step[1]}", (step[2],), step[3])
        elif step[0] == "use":
            k.use(bufs[step[1]])
        else:
            k.sync()
    if stack is not None:
        stack.__exit__(None, None, None)
    out, offsets = planned(k.build())
    sizes = {f"b{s[1]}": s[2] * s[3].itemsize for s in steps if s[0] == "alloc"}
    assert all(offset % 128 == 0 for offset in offsets.values())
    assert out.attrs["shared_bytes"] == max(offsets[n] + sizes[n] for n in offsets)
    for i in bufs:
        for j in bufs:
            if i < j and _conflict(steps, loop, i, j):
                a, b = f"b{i}", f"b{j}"
                assert offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]


# ----------------------------------------------------------------------------- end to end
def test_matmul_reports_its_shared_memory_and_stays_correct():
    from tilejit.examples.kernels import matmul
    a, b = torch.randn(96, 80), torch.randn(80, 72)
    c = torch.zeros(96, 72)
    matmul[(3, 3)](a, b, c, BM=32, BN=32, BK=16)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    compiled = matmul.compile(a, b, c, BM=32, BN=32, BK=16)
    assert compiled.metadata["shared_bytes"] == (32 * 16 + 16 * 32) * 4   # both live in the loop
    assert "offset = 0" in compiled.asm["lowered"] and "offset = 2048" in compiled.asm["lowered"]


@tj.kernel
def two_phases(x, out, N: tj.constexpr):
    first = tj.alloc_shared((N,), tj.float32)
    second = tj.alloc_shared((N,), tj.float32)
    t = tj.thread_id()
    if t < N:
        first[t] = x[t] * 2.0
    tj.sync()
    if t < N:
        out[t] = first[N - 1 - t]
    tj.sync()                                  # every thread is done with first
    if t < N:
        second[t] = x[t] + 1.0
    tj.sync()
    if t < N:
        out[N + t] = second[N - 1 - t]


def test_reused_shared_bytes_run_correctly_with_a_unit_per_thread():
    x, out = torch.randn(64), torch.zeros(128)
    two_phases[(1,)](x, out, N=64)
    assert torch.equal(out[:64], x.flip(0) * 2.0) and torch.equal(out[64:], x.flip(0) + 1.0)
    compiled = two_phases.compile(x, out, N=64)
    assert compiled.metadata["shared_bytes"] == 256       # the two buffers share their bytes
    assert compiled.asm["lowered"].count("offset = 0") == 2
