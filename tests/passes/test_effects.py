"""written_parameters: the parameters a kernel's stores and atomics reach."""
from tilejit.frontend import ArgSpec, LaunchOptions, compile_to_ir
from tilejit.frontend import language as tj
from tilejit.ir.types import f32, i32
from tilejit.passes.effects import written_parameters
from tilejit.passes.pipeline import run_pipeline

VECTOR = ArgSpec.tensor(f32, 1, unit_stride=True)


def written(fn, specs: dict) -> list[str]:
    kernel = compile_to_ir(fn, specs, {}, LaunchOptions(num_warps=4))
    return written_parameters(run_pipeline(kernel)[0])


def test_stores_through_regions_and_tile_primitives_count():
    def kernel(x, y, out, acc):
        tile = tj.fragment((8,), tj.float32)
        tj.copy(tile, x[0:8])                   # reads x
        tj.copy(out[0:8], tile)                 # writes out through a region
        acc[0] = y[0]                           # writes acc, reads y
    assert written(kernel, dict.fromkeys(["x", "y", "out", "acc"], VECTOR)) == ["out", "acc"]


def test_a_kernel_that_only_reads_writes_nothing():
    def kernel(x, n):
        total = 0.0
        for i in range(n):
            total += x[i]
    assert written(kernel, {"x": VECTOR, "n": ArgSpec.scalar(i32)}) == []
