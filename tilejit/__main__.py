"""``python -m tilejit demo``: the main job a newcomer runs first."""
from __future__ import annotations

import argparse
import sys


def _layout_demo(picture: str | None) -> None:
    from tilejit.layout import R, S, TileLayout, laneid, pid, warpid

    examples = [
        ("tensor-core tile, 2 warps sharded, 2 replicated, offset 5 warps", (8, 16),
         TileLayout(S[(8, 2, 4, 2):(4 @ laneid, 1 @ warpid, 1 @ laneid, 1)]
                    + R[2:4 @ warpid] + 5 @ warpid)),
        ("64x128 over a 2x2 GPU mesh, S0S1", (64, 128),
         TileLayout(S[(2, 32, 2, 64):(1 @ pid, 128, 2 @ pid, 1)])),
        ("64x128 over a 2x2 GPU mesh, S0R", (64, 128),
         TileLayout(S[(2, 32, 128):(1 @ pid, 128, 1)] + R[2:2 @ pid])),
    ]
    print("== Layouts from the TIRx paper (logical index -> set of physical locations)")
    for title, shape, layout in examples:
        print(f"\n{title}\n  {layout}")
        for coord in [(0, 0), (1, 3), (shape[0] - 1, shape[1] - 1)]:
            places = ", ".join(
                " ".join(f"{k}={v}" for k, v in loc.items())
                for loc in layout.locations(*coord, shape=shape))
            print(f"  {coord} -> {{{places}}}")

    flat = TileLayout(S[(2, 4):(4, 1)])
    print("\n== Dispatch-oriented operations")
    print(f"  canonicalize {flat} -> {flat.canonicalize()}")
    print(f"  group {TileLayout(S[12:1])} by (3, 4) -> {TileLayout(S[12:1]).group((3, 4))}")
    sliced = TileLayout(S[(4, 4):(4, 1)]).slice((16,), (slice(4, 12),))
    print(f"  slice (4,4):(4,1) [4:12) -> {sliced}")
    if picture:
        examples[0][2].visualize(examples[0][1], picture)
        print(f"\nwrote {picture} (the tensor-core tile, replicas shown)")


def _kernel_demo() -> None:
    """Compile and run the example kernels on the default target, check them against torch."""
    import torch

    import tilejit as tj
    from tilejit.examples import (matmul, row_softmax, run_matmul, run_softmax,
                                  run_vector_add, vector_add)

    torch.manual_seed(0)
    n = 10_000_019
    x, y = torch.randn(n), torch.randn(n)
    rows, cols = 1024, 1000
    s = torch.randn(rows, cols)
    m, k, nn = 512, 384, 448
    a, b = torch.randn(m, k), torch.randn(k, nn)
    cases = [
        ("vector add", f"{n}", vector_add, lambda out: run_vector_add(x, y, out),
         torch.empty(n), lambda: x + y, 3 * n * 4, None),
        ("row softmax", f"{rows}x{cols}", row_softmax, lambda out: run_softmax(s, out),
         torch.empty(rows, cols), lambda: torch.softmax(s, dim=1), 2 * rows * cols * 4, None),
        ("tiled GEMM", f"{m}x{k}x{nn}", matmul, lambda out: run_matmul(a, b, out),
         torch.empty(m, nn), lambda: a @ b, None, 2 * m * k * nn),
    ]
    print("\n== Kernels on the CPU target (checked against torch)")
    print(f"{'kernel':12s} {'shape':>14s} {'ms':>9s} {'rate':>14s}  dispatch")
    for name, shape, kernel, run, out, reference, nbytes, flops in cases:
        run(out)
        tj.testing.assert_close(out, reference(), rtol=1e-4, atol=1e-4)
        ms = float(tj.testing.do_bench(lambda: run(out), warmup=20, rep=100))
        rate = f"{nbytes / ms / 1e6:8.1f} GB/s" if nbytes else f"{flops / ms / 1e6:6.1f} GFLOP/s"
        families = sorted({f"{r.primitive}:{r.rule}" for r in
                           kernel.compiled_kernels()[-1].dispatch_log})
        print(f"{name:12s} {shape:>14s} {ms:9.3f} {rate:>14s}  {', '.join(families)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilejit")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="show layouts and compile example kernels")
    demo.add_argument("--picture", default="tilejit_layout_demo.png",
                      help="where to write the layout picture ('' to skip)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        _layout_demo(args.picture or None)
        _kernel_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
