"""Sample kernels built through the Builder, shared by the IR tests."""
from tilejit.errors import SourceLocation
from tilejit.ir import Builder, FilterSpec, KernelIR
from tilejit.ir.types import BufferType, MemScope, TeamKind, f16, f32, i1, i32

FILE = "/src/kernels.py"
GLOBAL = MemScope.GLOBAL


def vector_1d(dtype=f32):
    return BufferType(dtype, (None,), GLOBAL, strides=(1,))


def matrix(dtype):
    return BufferType(dtype, (None, None), GLOBAL, strides=(None, 1))


def _named(value, name):
    value.name_hint = name
    return value


def vector_add(block=1024) -> KernelIR:
    b = Builder(SourceLocation(FILE, 3, 0))
    k = KernelIR.new("add", ["x", "y", "out", "n"], [vector_1d(), vector_1d(), vector_1d(), i32],
                     {"num_warps": 4, "constexprs": {"BLOCK": block}}, b.loc)
    x, y, out, _ = k.params
    with b.insert_into(k.body):
        b.loc = SourceLocation(FILE, 5, 11)
        base = _named(b.binary("mul", b.thread_index("cta_id"), b.const(block, i32)), "base")
        b.loc = SourceLocation(FILE, 6, 8)
        a = _named(b.alloc(MemScope.FRAGMENT, f32, (block,)), "a")
        c = _named(b.alloc(MemScope.FRAGMENT, f32, (block,)), "c")
        b.loc = SourceLocation(FILE, 8, 4)
        b.tile("copy", a, b.region(x, [base], (block,)))
        b.tile("copy", c, b.region(y, [base], (block,)))
        b.loc = SourceLocation(FILE, 9, 4)
        b.tile("pointwise", c, a, c, op="add")
        b.tile("copy", b.region(out, [base], (block,)), c)
    return k


def softmax_like(block=256) -> KernelIR:
    """Row max over column blocks: a `for` carrying the running max, with tile.reduce."""
    b = Builder(SourceLocation(FILE, 20, 0))
    k = KernelIR.new("row_max", ["x", "out", "n_cols"], [matrix(f32), vector_1d(), i32],
                     {}, b.loc)
    x, out, n_cols = k.params
    with b.insert_into(k.body):
        row = _named(b.thread_index("cta_id"), "row")
        tile = _named(b.alloc(MemScope.FRAGMENT, f32, (block,)), "tile")
        part = _named(b.alloc(MemScope.FRAGMENT, f32, (1,)), "part")
        b.loc = SourceLocation(FILE, 24, 4)
        loop, body = b.for_(b.const(0, i32), n_cols, b.const(block, i32),
                            [b.const(float("-inf"), f32)], pipeline=2)
        _named(loop.result, "m")
        with b.insert_into(body):
            col, m = body.args
            _named(col, "col")
            b.loc = SourceLocation(FILE, 25, 8)
            b.tile("copy", tile, b.region(x, [row, col], (1, block), (False, True)))
            b.loc = SourceLocation(FILE, 26, 8)
            b.tile("reduce", part, tile, op="max", axis=0)
            zero = b.const(0, i32)
            b.yield_([_named(b.binary("max", m, b.load(part, [zero])), "m_next")])
        b.loc = SourceLocation(FILE, 28, 4)
        b.store(out, loop.result, [row])
    return k


def gemm(bm=128, bn=128, bk=32) -> KernelIR:
    b = Builder(SourceLocation(FILE, 40, 0))
    k = KernelIR.new("gemm", ["A", "B", "C", "K"], [matrix(f16), matrix(f16), matrix(f32), i32],
                     {"num_warps": 8, "arch": "sm_90a"}, b.loc)
    A, B, C, K = k.params
    with b.insert_into(k.body):
        m0 = _named(b.binary("mul", b.thread_index("cta_id", 0), b.const(bm, i32)), "m0")
        n0 = _named(b.binary("mul", b.thread_index("cta_id", 1), b.const(bn, i32)), "n0")
        a_s = _named(b.alloc(MemScope.SHARED, f16, (bm, bk)), "a_s")
        b_s = _named(b.alloc(MemScope.SHARED, f16, (bk, bn)), "b_s")
        acc = _named(b.alloc(MemScope.FRAGMENT, f32, (bm, bn)), "acc")
        b.tile("pointwise", acc, b.const(0.0, f32), op="fill")
        b.loc = SourceLocation(FILE, 46, 4)
        loop, body = b.for_(b.const(0, i32), K, b.const(bk, i32))
        with b.insert_into(body):
            kk = _named(body.args[0], "k")
            b.loc = SourceLocation(FILE, 47, 8)
            b.tile("copy", a_s, b.region(A, [m0, kk], (bm, bk)), dispatch="cp_async")
            b.tile("copy", b_s, b.region(B, [kk, n0], (bk, bn)))
            b.sync()
            b.loc = SourceLocation(FILE, 49, 8)
            b.tile("gemm", acc, a_s, b_s, config={"shape": (64, 128, 16)})
            b.sync()
            b.yield_()
        b.loc = SourceLocation(FILE, 51, 4)
        b.tile("copy", b.region(C, [m0, n0], (bm, bn)), acc)
    return k


def warp_specialized(stages=2, bm=64, bk=64) -> KernelIR:
    """Producer warpgroup loads with TMA-like async copies; consumer runs gemm_async."""
    b = Builder(SourceLocation(FILE, 60, 0))
    k = KernelIR.new("ws", ["A", "C", "K"], [matrix(f16), matrix(f32), i32],
                     {"num_warps": 8, "cluster": (2, 1, 1)}, b.loc)
    A, C, K = k.params
    with b.insert_into(k.body):
        full = _named(b.alloc_barrier(stages), "full")
        empty = _named(b.alloc_barrier(stages), "empty")
        a_s = _named(b.alloc(MemScope.SHARED, f16, (bm, bk)), "a_s")
        acc = _named(b.alloc(MemScope.FRAGMENT, f32, (bm, bm)), "acc")
        zero, one = b.const(0, i32), b.const(1, i32)
        tid = _named(b.thread_index("thread_id"), "tid")
        b.loc = SourceLocation(FILE, 66, 4)
        init, then_, else_ = b.if_(b.cmp("eq", tid, zero), filter=FilterSpec("thread", 0, 1))
        with b.insert_into(then_):
            b.mbarrier_init(full, zero, one)
            b.mbarrier_init(empty, zero, b.const(128, i32))
            b.yield_()
        with b.insert_into(else_):
            b.yield_()
        b.sync()
        wg = _named(b.thread_index("warpgroup_id"), "wg")
        b.loc = SourceLocation(FILE, 70, 4)
        role, producer, consumer = b.if_(b.cmp("lt", wg, one), filter=FilterSpec("warpgroup", 0, 1))
        with b.insert_into(producer):
            loop, body = b.for_(zero, K, b.const(bk, i32), unroll=1)
            with b.insert_into(body):
                kk = _named(body.args[0], "k")
                b.mbarrier_wait(empty, zero, zero)
                b.loc = SourceLocation(FILE, 73, 12)
                _, elected, other = b.if_(b.elect_sync(), filter=FilterSpec("elect"))
                with b.insert_into(elected):
                    b.mbarrier_expect_tx(full, zero, b.const(bm * bk * 2, i32), arrive=True)
                    b.tile("copy_async", a_s, b.region(A, [zero, kk], (bm, bk)), full, zero)
                    b.yield_()
                with b.insert_into(other):
                    b.yield_()
                b.yield_()
            b.yield_()
        with b.insert_into(consumer):
            b.loc = SourceLocation(FILE, 78, 8)
            team, team_body = b.team(TeamKind.WARPGROUP, [i1])
            with b.insert_into(team_body):
                b.mbarrier_wait(full, zero, zero)
                b.tile("gemm_async", acc, a_s, a_s, transpose_b=True, accum=False)
                b.mbarrier_arrive(empty, zero)
                b.yield_([b.const(True, i1)])
            b.yield_()
        b.loc = SourceLocation("/src/other.py", 90, 2)
        b.tile("copy", b.region(C, [zero, zero], (bm, bm)), acc, team=TeamKind.WARPGROUP)
    return k


ALL = {"vector_add": vector_add, "softmax_like": softmax_like, "gemm": gemm,
       "warp_specialized": warp_specialized}
