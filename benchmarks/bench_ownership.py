"""Ownership questions of the per-thread distribution on a 64x256 wgmma accumulator, in
closed form (``tilejit.passes.ownership.unowned_element`` / ``misread``) beside the
per-element enumeration they replaced (``*_enumerated``, kept as the tests' reference).

    python benchmarks/bench_ownership.py            # the table below, both columns
    python benchmarks/bench_ownership.py --repeat 9

Questions: "is every element on an active thread" (``Owned.analyze``), and "does every
thread that handles an element of the accumulator hold what it reads" for a pointwise op on
the accumulator itself, one broadcasting a row vector (64x1, replicated over the lanes of a
quad) along its columns, and a row reduction into that vector (which needs whole rows per
thread: declined, with the first element that is not held). "dispatch + lower" runs the
pointwise pair (fill, multiply by the row vector) through dispatch and lowering of a
per-thread target, each distribution question answered one way, then the other. Each
figure is the fastest of ``--repeat`` runs (``timeit`` convention).
"""
from __future__ import annotations

import argparse
import time

from tilejit.errors import SourceLocation
from tilejit.ir import Builder, KernelIR
from tilejit.ir.types import MemScope, TeamKind, f32
from tilejit.layout import TileLayout
from tilejit.layout.hw_nvidia import wgmma_acc_layout
from tilejit.passes import distribution, ownership, scope_analysis
from tilejit.passes.dispatch import PER_THREAD, DispatchContext, register_target
from tilejit.passes.dispatch import lower as lower_tiles
from tilejit.passes.dispatch import run as dispatch

SHAPE = (64, 256)
ACC = wgmma_acc_layout(256)
ROWS = TileLayout.parse("(4,2,8):(1@wid_in_wg,1@m,4@laneid) + R[4:1@laneid]")
ROWS_KEPT = TileLayout.parse("(4,2,8,1):(1@wid_in_wg,1@m,4@laneid,1@m) + R[4:1@laneid]")
WARPGROUP = {(lane, w) for lane in range(32) for w in range(4)}
SIMT = register_target(DispatchContext("bench-simt", distribution=PER_THREAD))


def questions(closed: bool):
    d = ownership
    unowned = d.unowned_element if closed else d.unowned_element_enumerated
    misread = d.misread if closed else d.misread_enumerated
    return {
        "every element on an active thread": lambda: unowned(ACC, SHAPE, WARPGROUP),
        "pointwise on the accumulator": lambda: misread(ACC, SHAPE, ACC, SHAPE,
                                                        lambda p: [p], WARPGROUP),
        "broadcast a 64x1 row vector": lambda: misread(ACC, SHAPE, ROWS_KEPT, (64, 1),
                                                       lambda p: [(p[0], 0)], WARPGROUP),
        "row reduction into it (declined)": lambda: misread(
            ROWS, (64,), ACC, SHAPE, lambda p: [(p[0], a) for a in range(256)], WARPGROUP),
    }


def kernel() -> KernelIR:
    k = KernelIR.new("acc", [], [], {"num_warps": 4, "target": None},
                     SourceLocation("bench_ownership.py", 1, 0))
    b = Builder(SourceLocation("bench_ownership.py", 2, 4))
    with b.insert_into(k.body):
        acc = b.alloc(MemScope.FRAGMENT, f32, SHAPE, ACC)
        row = b.alloc(MemScope.FRAGMENT, f32, (64, 1), ROWS_KEPT)
        b.tile("pointwise", acc, b.const(1.0, f32), op="fill", team=TeamKind.WARPGROUP)
        b.tile("pointwise", acc, acc, row, op="mul", team=TeamKind.WARPGROUP)
    return k


def dispatch_and_lower(closed: bool):
    d = distribution   # Owned looks the questions up in its own module
    saved = d.unowned_element, d.misread
    if not closed:
        d.unowned_element, d.misread = (ownership.unowned_element_enumerated,
                                        ownership.misread_enumerated)
    try:
        log: list = []
        k = dispatch(scope_analysis.run(kernel()), SIMT, log)
        lower_tiles.run(k, SIMT)
        assert [r.rule for r in log] == ["scalar", "scalar"], log
    finally:
        d.unowned_element, d.misread = saved


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    closed, enumerated = questions(True), questions(False)
    for name in closed:
        assert closed[name]() == enumerated[name](), name
        rows.append((name, best(enumerated[name], args.repeat), best(closed[name], args.repeat)))
    rows.append(("dispatch + lower (fill, broadcast multiply)",
                 best(lambda: dispatch_and_lower(False), args.repeat),
                 best(lambda: dispatch_and_lower(True), args.repeat)))
    print(f"64x256 wgmma accumulator, {args.repeat} runs each, fastest shown\n")
    print("| question | enumerated | closed form | speed-up |")
    print("|---|---|---|---|")
    for name, before, after in rows:
        print(f"| {name} | {before * 1e3:.1f} ms | {after * 1e3:.2f} ms | {before / after:.0f}x |")


if __name__ == "__main__":
    main()
