"""mma_sync on the CPU's per-thread units: every lane of a warp builds its A, B and C
fragments by hand, at the places the PTX ISA's fragment formulas give (restated here:
groupID g = lane >> 2, threadID_in_group t = lane % 4), and D must be A @ B + C computed in
f32, for f16 and bf16 inputs (m16n8k16) and e4m3/e5m2 ones in any mix (m16n8k32)."""
import pytest
import torch
from cpu_kernels import KernelBuilder, vector

from tilejit.errors import CompilationError
from tilejit.ir.types import bf16, f8e4m3, f8e5m2, f16

NUM_WARPS, CTAS = 2, 3
M, N, K = 16, 8, 16

# (row, col) of fragment element i as (constant part, g coefficient, t coefficient).
C_PLACES = lambda i: ((8 * (i >> 1), 1, 0), (i & 1, 0, 2))  # noqa: E731
PLACES = {
    "m16n8k16": {
        "a": lambda i: ((8 * ((i >> 1) & 1), 1, 0), ((i & 1) + 8 * (i >> 2), 0, 2)),
        "b": lambda i: (((i & 1) + 8 * (i >> 1), 0, 2), (0, 1, 0)),
        "c": C_PLACES,
    },
    "m16n8k32": {   # four 8-bit values to a register
        "a": lambda i: ((8 * ((i >> 2) & 1), 1, 0), ((i & 3) + 16 * (i >> 3), 0, 4)),
        "b": lambda i: (((i & 3) + 16 * (i >> 2), 0, 4), (0, 1, 0)),
        "c": C_PLACES,
    },
}
DEPTH = {"m16n8k16": K, "m16n8k32": 32}


def mma_kernel(dtype, num_warps=NUM_WARPS, filtered=False, shape="m16n8k16", b_dtype=None):
    """Warp w of CTA c multiplies matrices number ``c * NUM_WARPS + w`` of x (16xK) and
    y (Kx8) and adds z's (16x8), each stored row-major one after the other; d as z."""
    depth = DEPTH[shape]
    with KernelBuilder("mma", num_warps=num_warps, x=vector(dtype), y=vector(b_dtype or dtype),
                       z=vector(), d=vector()) as kb:
        lane = kb.tid("lane_id")
        warp = kb.op("add", kb.op("mul", kb.tid("cta_id"), kb.c(num_warps)), kb.tid("warp_id"))
        g, t = kb.op("shr", lane, kb.c(2)), kb.op("and", lane, kb.c(3))

        def coordinate(const, g_times, t_times):
            return kb.op("add", kb.c(const), kb.op("add", kb.op("mul", g, kb.c(g_times)),
                                                   kb.op("mul", t, kb.c(t_times))))

        def index(which, i, rows, cols):
            row, col = (coordinate(*part) for part in PLACES[shape][which](i))
            first = kb.op("mul", warp, kb.c(rows * cols))
            return kb.op("add", first, kb.op("add", kb.op("mul", row, kb.c(cols)), col))

        def fragment(buf, which, count, rows, cols):
            return [kb.load(buf, [index(which, i, rows, cols)]) for i in range(count)]

        def body():
            a = fragment(kb.p["x"], "a", M * depth // 32, M, depth)
            b = fragment(kb.p["y"], "b", depth * N // 32, depth, N)
            c = fragment(kb.p["z"], "c", 4, M, N)
            for i, value in enumerate(kb.mma_sync(a, b, c, shape)):
                kb.store(kb.p["d"], value, [index("c", i, M, N)])

        if filtered:
            with kb.when(kb.filter("lane_id", 0, 16), "lane", 0, 16):
                body()
        else:
            body()
    return kb


@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
def test_every_lane_gets_its_part_of_a_times_b_plus_c(dtype):
    gen = torch.Generator().manual_seed(3)
    count = CTAS * NUM_WARPS
    x = torch.randn(count, M, K, generator=gen).to(dtype.torch_dtype())
    y = torch.randn(count, K, N, generator=gen).to(dtype.torch_dtype())
    z = torch.randn(count, M, N, generator=gen)
    d = torch.zeros(count, M, N)
    module = mma_kernel(dtype).run(CTAS, [v.reshape(-1) for v in (x, y, z, d)])
    assert module.meta["granularity"] == "thread"
    expected = x.double() @ y.double() + z.double()
    torch.testing.assert_close(d.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_type, b_type", [(f8e4m3, f8e4m3), (f8e4m3, f8e5m2),
                                            (f8e5m2, f8e5m2)], ids=str)
def test_fp8_lanes_get_their_part_of_a_times_b_plus_c_exactly(a_type, b_type):
    """Products of 8-bit floats are exact in f32; with integer-valued C these sums happen
    to be exact too (the data is fixed), so D must equal the f64 result bit for bit."""
    gen = torch.Generator().manual_seed(4)
    count = CTAS * NUM_WARPS
    x = (torch.randn(count, M, 32, generator=gen) * 4).to(a_type.torch_dtype())
    y = (torch.randn(count, 32, N, generator=gen) * 4).to(b_type.torch_dtype())
    z = torch.randint(-8, 8, (count, M, N), generator=gen).float()
    d = torch.zeros(count, M, N)
    module = mma_kernel(a_type, shape="m16n8k32", b_dtype=b_type).run(
        CTAS, [v.reshape(-1) for v in (x, y, z, d)])
    assert module.meta["granularity"] == "thread"
    expected = x.double() @ y.double() + z.double()
    assert torch.equal(d.double(), expected)


def test_a_warp_with_inactive_lanes_is_refused():
    with pytest.raises(CompilationError, match="mma_sync needs all 32 lanes of its warp"):
        mma_kernel(f16, filtered=True).compile()
