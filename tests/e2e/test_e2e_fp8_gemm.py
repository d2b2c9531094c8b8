"""kernels.hopper_gemm.fp8_gemm: the warp-specialized GEMM on fp8 (e4m3, e5m2 and a mixed
pair) with per-tensor and block (1 x 128 / 128 x 128) scales, against torch on the CPU at
ragged shapes (M, N and K not multiples of the tile; both lowerings, the per-thread one
executing the IR the cuda target prints); ``scaled_mm`` on torch._scaled_mm's column-major
B; its sm_90a build through NVRTC (k32 e4m3 / e5m2 wgmma, TMA, the promotion's fma, no
spills); and the errors of its entry points.

The tolerance: every product of two fp8 values is exact in f32 (4 significant bits at most
each; their exponents, e5m2's down to 2**-16, stay far inside f32's)
and the reference sums them exactly (float64; at these sizes every partial sum is exact),
so the kernel differs only by rounding its f32 sums (and the scale products): each output
is within ``(terms + 4) * 2**-24`` of the sum of its terms' magnitudes (the standard bound
for a recursive f32 sum of ``terms`` values plus the scale multiplications and the
promotion's fma), plus half a unit in the last place of C's dtype when C is 16-bit."""
import importlib
import inspect

import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, wgmma_groups_in_flight
from support.gpu import needs_nvdisasm, needs_nvrtc, sass

import tilejit as tj
from tilejit.kernels import fp8_gemm, scaled_mm
from tilejit.kernels.hopper_gemm import fp8_gemm_config, hopper_gemm_kernel

# the module itself (the package's attribute of its name is the hopper_gemm function)
hopper_gemm_module = importlib.import_module("tilejit.kernels.hopper_gemm")

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
PTX_KIND = {E4M3: "e4m3", E5M2: "e5m2"}
UNIT = {torch.float32: 0.0, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _operands(m, n, k, seed, a_type=E4M3, b_type=E4M3):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) * 3).to(a_type)
    b = (torch.randn(n, k, generator=gen) * 3).to(b_type)
    return a, b, gen


def _block_scales(m, n, k, gen):
    blocks = -(-k // 128)
    return (torch.rand(m, blocks, generator=gen) + 0.25,
            torch.rand(-(-n // 128), blocks, generator=gen) + 0.25)


def _expanded(scale_a, scale_b, m, n, k):
    """The block scales as one factor per (row, k) of A and per (column, k) of B."""
    return (scale_a.double().repeat_interleave(128, 1)[:, :k],
            scale_b.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k])


def _reference(a, b, scale_a, scale_b):
    """(exact sum, sum of the terms' magnitudes) in float64: the dequantized inputs times
    their scales, which for block scales differ per K block (so per K column here)."""
    (m, k), n = a.shape, b.shape[0]
    a64, b64 = a.double(), b.double()
    if scale_a.numel() == 1:
        factor = scale_a.double() * scale_b.double()
        return (a64 @ b64.T) * factor, (a64.abs() @ b64.abs().T) * factor.abs()
    sa, sb = _expanded(scale_a, scale_b, m, n, k)
    terms = a64[:, None, :] * b64[None, :, :] * sa[:, None, :] * sb[None, :, :]
    return terms.sum(-1), terms.abs().sum(-1)


def _assert_within_f32_rounding(out, a, b, scale_a, scale_b):
    exact, magnitude = _reference(a, b, scale_a, scale_b)
    bound = (a.shape[1] + 4) * 2.0 ** -24 * magnitude + UNIT[out.dtype] * exact.abs()
    error = (out.double() - exact).abs()
    assert torch.all(error <= bound), f"worst excess {(error - bound).max().item()}"
    assert exact.abs().max() > 10      # the check compares values, not zeros


# small tiles keep the CPU runs short; the BN of block scaling divides 128
SMALL = dict(block_m=64, block_n=32, stages=2)


@pytest.mark.parametrize("out_dtype, fp8_type", [(torch.bfloat16, E4M3), (torch.float32, E5M2)])
def test_per_tensor_scales_on_a_ragged_shape(out_dtype, fp8_type):
    """M = 70, N = 40 (two tiles each, the second clipped) and K = 208 (the second K step's
    last 48 columns are TMA's zero fill); 0-d scales as torch._scaled_mm takes them; the
    4 tiles over 3 persistent CTAs; both operands e4m3, or both e5m2."""
    a, b, _ = _operands(70, 40, 208, seed=0, a_type=fp8_type, b_type=fp8_type)
    scale_a, scale_b = torch.tensor(0.375), torch.tensor(1.75)
    name = str(out_dtype).removeprefix("torch.")
    out, whole = guarded((70, 40), name, pad=8)      # rows of 48 elements: 16-byte multiples
    assert fp8_gemm(a, b, scale_a, scale_b, out=out, sm_count=3, **SMALL) is out
    _assert_within_f32_rounding(out, a, b, scale_a, scale_b)
    assert_guard_intact(whole, (70, 40), name)


def test_block_scales_on_a_ragged_shape():
    """N = 200: two 128-column scale blocks of B, tiles of 64 (four a block, the last cut at
    N); K = 336: three 128-wide scale blocks, the last partial; M = 70: A's scales past M
    are masked off. 8 tiles over 3 persistent CTAs: a CTA's second tile starts mid-ring."""
    a, b, gen = _operands(70, 200, 336, seed=1)
    scale_a, scale_b = _block_scales(70, 200, 336, gen)
    out = fp8_gemm(a, b, scale_a, scale_b, out_dtype=torch.float32, block_m=64, block_n=64,
                   stages=2, sm_count=3)
    assert out.dtype == torch.float32 and out.shape == (70, 200)
    _assert_within_f32_rounding(out, a, b, scale_a, scale_b)


def test_block_scales_with_two_consumer_warpgroups_and_a_wrapping_ring():
    """block_m = 128: warpgroups 1 and 2 each read the A scales of their own 64 rows (the
    second's rows 128..149 partly past M = 150); 3 K steps through 2 stages; C in f16."""
    a, b, gen = _operands(150, 40, 384, seed=2)
    scale_a, scale_b = _block_scales(150, 40, 384, gen)
    out = fp8_gemm(a, b, scale_a, scale_b, out_dtype=torch.float16, block_m=128, block_n=32,
                   stages=2)
    _assert_within_f32_rounding(out, a, b, scale_a, scale_b)


def test_block_scales_in_2x1_clusters_walking_tiles():
    """B [N, K] split by rows between the pair (each CTA multicasts its 16 of BN = 32);
    3 M tiles (odd) by 2 N tiles, 2 K steps, over one persistent cluster; a mixed pair,
    e4m3 A by e5m2 B."""
    a, b, gen = _operands(130, 40, 256, seed=5, b_type=E5M2)
    scale_a, scale_b = _block_scales(130, 40, 256, gen)
    out = fp8_gemm(a, b, scale_a, scale_b, out_dtype=torch.float32, sm_count=2, cluster_m=2,
                   **SMALL)
    _assert_within_f32_rounding(out, a, b, scale_a, scale_b)


def test_block_scales_differ_per_k_block():
    """A scale that only one K block carries changes only that block's products: zeroing
    scale_b's second K block leaves the first block's sum (a check that would pass if the
    kernel applied one scale to all of K fails here)."""
    a, b, gen = _operands(64, 32, 256, seed=3)
    scale_a, scale_b = _block_scales(64, 32, 256, gen)
    scale_b[:, 1] = 0.0
    out = fp8_gemm(a, b, scale_a, scale_b, out_dtype=torch.float32, **SMALL)
    first = (a.double()[:, :128] * scale_a.double()[:, :1]) @ b.double()[:, :128].T
    torch.testing.assert_close(out.double(), first * scale_b.double()[0, 0], rtol=1e-5,
                               atol=1e-4)


def test_scaled_mm_takes_torchs_column_major_b_without_a_copy(monkeypatch):
    """torch._scaled_mm's b [K, N] is column-major: scaled_mm hands fp8_gemm its transpose,
    the [N, K] row-major view of b's own storage (no copy), and C is a @ b; e5m2 A by
    e4m3 B, one ragged tile."""
    a, b_nk, _ = _operands(50, 24, 96, seed=6, a_type=E5M2)
    b = b_nk.T      # [K, N] with strides (1, K), as _scaled_mm wants it
    given = []

    def spy(a, b, *args, **options):
        given.append((b.data_ptr(), b.stride()))
        return fp8_gemm(a, b, *args, **options)

    monkeypatch.setattr(hopper_gemm_module, "fp8_gemm", spy)
    scale_a, scale_b = torch.tensor(0.5), torch.tensor(3.0)
    out = scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32, **SMALL)
    assert given == [(b.data_ptr(), (96, 1))]
    assert out.shape == (50, 24)
    _assert_within_f32_rounding(out, a, b_nk, scale_a, scale_b)


@pytest.mark.parametrize("scaling, a_scale_reads", [("tensor", 0), ("block", 1)])
def test_the_dispatch_picks_tma_k32_wgmma_and_reads_the_scales(scaling, a_scale_reads):
    a, b, gen = _operands(64, 32, 128, seed=4)
    # per tensor, the kernel reads element 0 of each scale: fp8_gemm passes 0-d ones as [1]
    scales = _block_scales(64, 32, 128, gen) if scaling == "block" else (torch.ones(1),) * 2
    grid, options = fp8_gemm_config(a, b, *scales, **SMALL)
    assert options["SCALING"] == scaling and options["B_NK"] and options["BK"] == 128
    out = torch.empty(64, 32, dtype=torch.bfloat16)
    compiled = hopper_gemm_kernel.compile(a, b, out, 128, SA=scales[0],
                                          SB=scales[1], simt=True, **options)
    rules = [(r.primitive, r.rule, tuple(r.shape)) for r in compiled.dispatch_log]
    # per tensor a tile's first K step has its own site (accum=False); block scales
    # multiply each step into a fresh fragment at one site
    sites = 1 if scaling == "block" else 2
    assert rules.count(("gemm_async", "wgmma", (64, 32, 32))) == sites
    assert sum(rule[:2] == ("copy_async", "tma") for rule in rules) == 3
    # block: the masked read of A's scales for the consumer's own rows, each K step
    reads = [r for r in compiled.dispatch_log if r.primitive == "copy" and r.line ==
             _kernel_line("tj.copy(row_scale")]
    assert len(reads) == a_scale_reads
    assert grid == (1,)


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
@pytest.mark.parametrize("scaling, a_type, b_type", [
    ("tensor", E4M3, E4M3), ("block", E4M3, E4M3),
    ("tensor", E5M2, E4M3)])    # the kind spells A's type first, then B's
def test_the_sm90a_build_holds_k32_wgmma_tma_and_the_scaling_without_spills(scaling, a_type,
                                                                            b_type):
    compiled = _sm90a_build(scaling, a_type, b_type)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    wgmma = [line for line in ptx if line.startswith("wgmma.mma_async")]
    # BK = 128 is four k32 steps, for each of the two consumers (twice per tensor: a
    # tile's first K step has its own site)
    kind = f".m64n128k32.f32.{PTX_KIND[a_type]}.{PTX_KIND[b_type]}"
    assert len(wgmma) == (8 if scaling == "block" else 16) and all(kind in w for w in wgmma)
    assert any(line.startswith("cp.async.bulk.tensor.2d.shared::cluster.global") and
               "mbarrier::complete_tx::bytes" in line for line in ptx)
    assert sum(line.startswith("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
               for line in ptx) == 4
    scale_loads = sum(line.startswith("ld.global.nc.f32") for line in ptx)
    fmas = sum(line.startswith("fma.rn.f32") for line in ptx)
    if scaling == "block":
        # a consumer thread's 64 accumulators promoted by one fma each; its two rows'
        # A scales and the tile's B scale read per K step. The promotion reads each step's
        # products: its group is retired at once (wait_group 0), none stays in flight
        assert fmas == 2 * 64 and scale_loads == 2 * 3
        assert not any(line.startswith("wgmma.wait_group.sync.aligned 1") for line in ptx)
    else:
        assert wgmma_groups_in_flight(compiled) == []
        assert fmas == 0 and scale_loads == 2 * 2      # scale_a[0], scale_b[0] once
        assert sum(line.startswith("mul.f32") for line in ptx) == 2 * (64 + 1)
    meta = compiled.metadata
    assert meta["spill_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    assert meta["registers"] == 168
    assert [(t["param"], t["box"], t["swizzle"]) for t in meta["tensor_maps"]] == [
        ("A", [128, 128], 128), ("B", [128, 128], 128), ("C", [64, 64], 128)]


@needs_nvrtc
@needs_nvdisasm
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
@pytest.mark.parametrize("scaling, a_type, b_type", [("block", E4M3, E4M3),
                                                     ("tensor", E5M2, E4M3)])
def test_the_sm90a_sass_holds_qgmma_of_the_operand_kinds_and_utmaldg(tmp_path, scaling,
                                                                      a_type, b_type):
    """The PTX test's builds (compiled once: the second build hits the kernel cache)."""
    text = sass(_sm90a_build(scaling, a_type, b_type).asm["cubin"], tmp_path)
    kind = f"{PTX_KIND[a_type]}.{PTX_KIND[b_type]}".upper()
    assert f"QGMMA.64x128x32.F32.{kind}" in text and "UTMALDG" in text


def _zeros(*shape, dtype=E4M3):
    return torch.zeros(*shape, dtype=dtype)


ONE = torch.tensor(1.0)


@pytest.mark.parametrize("args, options, error, message", [
    ((_zeros(64, 64, dtype=torch.half), _zeros(64, 64), ONE, ONE), {}, TypeError,
     r"float8_e4m3fn or float8_e5m2 matrices \(in any mix\), got torch.float16 and "
     r"torch.float8_e4m3fn"),
    ((_zeros(64, 64), _zeros(64, 32), ONE, ONE), {}, ValueError,
     r"B given as \[N, K\] \(wgmma reads fp8 K-major\), got \(64, 64\) and \(64, 32\)"),
    ((_zeros(64, 40), _zeros(32, 40), ONE, ONE), {}, ValueError,
     r"K = 40: an fp8 row must be a multiple of 16 bytes"),
    ((_zeros(64, 64), _zeros(32, 64), ONE, ONE), dict(out_dtype=torch.int32), TypeError,
     r"writes bfloat16, float16 or float32, not torch.int32"),
    ((_zeros(64, 64), _zeros(32, 64), ONE.half(), ONE), {}, TypeError,
     r"scales must be float32, got torch.float16 and torch.float32"),
    ((_zeros(64, 256), _zeros(32, 256), torch.ones(64, 2), ONE), {}, ValueError,
     r"block scales for M, N, K = 64, 32, 256 are scale_a \(64, 2\) \(1 x 128\) and "
     r"scale_b \(1, 2\) \(128 x 128\), got \(64, 2\) and \(\)"),
    ((_zeros(64, 256), _zeros(32, 256), torch.ones(64, 2), torch.ones(1, 2)),
     dict(block_k=64), ValueError, r"block_k = 128 \(one scale per K step\) and a block_n "
                                   r"dividing 128 \(one B scale per tile\), got block_k=64"),
    ((_zeros(64, 256), _zeros(256, 256), torch.ones(64, 2), torch.ones(2, 2)),
     dict(block_n=256), ValueError, r"got block_k=128, block_n=256"),
    ((_zeros(64, 64), _zeros(32, 64), ONE, ONE), dict(block_m=96, consumers=2), ValueError,
     r"multiple of 64 rows"),
])
def test_bad_arguments_are_explained(args, options, error, message):
    with pytest.raises(error, match=message):
        fp8_gemm(*args, **options)


@pytest.mark.parametrize("entry, a, b, message", [
    # the transpose of a row-major [K, N]: its K strided, a copy away from K-major
    (fp8_gemm, _zeros(64, 64), _zeros(64, 32).T,
     r"fp8_gemm reads b \(32, 64\) K-major \(wgmma's fp8 operands\), but its strides "
     r"\(1, 32\) leave K \(dim 1\) strided: b.contiguous\(\) makes the K-major copy"),
    (fp8_gemm, _zeros(64, 64).T, _zeros(32, 64), r"fp8_gemm reads a \(64, 64\) K-major"),
    # torch._scaled_mm refuses a row-major b too; scaled_mm says which copy would do
    (scaled_mm, _zeros(64, 64), _zeros(64, 32),
     r"scaled_mm takes b \[K, N\] column-major \(K contiguous, as torch._scaled_mm does\): "
     r"b \(64, 32\) has strides \(32, 1\); b.T.contiguous\(\).T makes the column-major"),
    (scaled_mm, _zeros(64, 64), _zeros(32, 64),
     r"scaled_mm multiplies a \[M, K\] by b \[K, N\], got \(64, 64\) and \(32, 64\)"),
])
def test_operand_layouts_that_need_a_copy_are_refused(entry, a, b, message):
    with pytest.raises(ValueError, match=message):
        entry(a, b, ONE, ONE)


@pytest.mark.parametrize("change, message, check", [
    (dict(SCALING="blocks"), "SCALING is none, tensor or block", "static_assert(SCALING in"),
    (dict(BK=64), "block scales take BK = 128 .a K step is a scale block. and BN dividing 128",
     'static_assert(SCALING != "block"'),
])
def test_the_kernel_refuses_options_it_cannot_honour_at_their_line(change, message, check):
    """Launched directly (not through fp8_gemm), the kernel's own checks name the line."""
    a, b, gen = _operands(64, 32, 128, seed=5)
    scales = _block_scales(64, 32, 128, gen)
    _, options = fp8_gemm_config(a, b, *scales, **SMALL)
    with pytest.raises(tj.CompilationError, match=message) as info:
        hopper_gemm_kernel.compile(a, b, torch.empty(64, 32, dtype=torch.bfloat16), 128,
                                   SA=scales[0], SB=scales[1], **{**options, **change})
    assert info.value.line == _kernel_line(check)


def _kernel_line(text):
    lines, first = inspect.getsourcelines(hopper_gemm_kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _sm90a_build(scaling, a_type=E4M3, b_type=E4M3):
    m, n, k = 8192, 4096, 4096      # meta tensors and specs: nothing is allocated
    if scaling == "block":
        scale_shapes = ((m, k // 128), (n // 128, k // 128))
    else:
        scale_shapes = ((1,), (1,))
    meta = [torch.empty(shape, device="meta") for shape in scale_shapes]
    _, options = fp8_gemm_config(torch.empty(m, k, dtype=a_type, device="meta"),
                                 torch.empty(n, k, dtype=b_type, device="meta"), *meta)
    scales = [tj.TensorSpec(shape, tj.float32, device="cuda") for shape in scale_shapes]
    dtypes = {E4M3: tj.float8_e4m3, E5M2: tj.float8_e5m2}
    specs = [tj.TensorSpec(shape, dt, device="cuda")
             for shape, dt in (((m, k), dtypes[a_type]), ((n, k), dtypes[b_type]),
                               ((m, n), tj.bfloat16))]
    return hopper_gemm_kernel.compile(*specs, k, SA=scales[0], SB=scales[1], target="cuda",
                                      arch="sm_90a", **options)
