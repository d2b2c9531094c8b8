"""The launch configuration of ``hopper_gemm_kernel`` (``hopper_gemm``): the grid, the
constexpr options of a tile config (swizzled ring layouts, setmaxnreg's register split,
the shared memory it needs), the persistent grid's CTA count and the tile configs the
autotuner chooses from; the checks of both entry points' arguments."""
import torch

import tilejit as tj
from tilejit.layout import SwizzleMode, smem_layout

_SWIZZLES = {128: SwizzleMode.B128, 64: SwizzleMode.B64, 32: SwizzleMode.B32}
SM_REGISTERS, MAX_THREAD_REGS = 65536, 255      # Hopper: 64K 32-bit registers per SM
WARPGROUP_THREADS = 128
PRODUCER_REGS, CONSUMER_REGS = 40, 232           # setmaxnreg's limits (see register_split)
SCALE_BLOCK = 128       # fp8 block scales (DeepSeek-V3): A's 1 x 128, B's 128 x 128
FP8_TYPES = (torch.float8_e4m3fn, torch.float8_e5m2)    # wgmma's k32 kinds, mixed freely
SHARED_BYTES = 227 * 1024   # a CTA's shared memory on sm_90
# hopper_gemm's tile configs (hopper_gemm_config's options): the first runs when none is
# given on the CPU; on a GPU the autotuner times them all per (M, N, K) bucket. Each
# compiles without spills (ptxas allocates the whole kernel at the 168 registers a thread
# of 384 threads, setmaxnreg or not: single-CTA 128 x 256 and 256 x 128 tiles, 128
# accumulators a consumer thread, spill 56 bytes there and are left out)
TILE_CONFIGS = (
    dict(block_m=128, block_n=128, block_k=64, stages=4),
    dict(block_m=128, block_n=128, block_k=64, stages=5),
    dict(block_m=128, block_n=128, block_k=64, stages=4, cluster_m=2),
    dict(block_m=128, block_n=256, block_k=64, stages=3, cluster_m=2),
)


def register_split(consumers: int) -> tuple[int, int]:
    """The per-thread register limits ``(producer, consumer)`` that ``setmaxnreg`` sets: the
    producer warpgroup, issuing TMA copies, keeps 40; each consumer, holding a 64 x BN f32
    accumulator (BN / 2 registers a thread), takes 232. They must fit the CTA's pool: its
    ``1 + consumers`` warpgroups of 128 threads launch with the SM's registers shared out
    (a multiple of 8 a thread, at most 255: what ptxas gives a kernel that uses setmaxnreg,
    168 for three warpgroups), and setmaxnreg only moves registers within that pool."""
    threads = WARPGROUP_THREADS * (1 + consumers)
    pool = threads * (min(MAX_THREAD_REGS, SM_REGISTERS // threads) // 8 * 8)
    used = WARPGROUP_THREADS * (PRODUCER_REGS + consumers * CONSUMER_REGS)
    if used > pool:
        raise ValueError(f"{consumers} consumer warpgroups at {CONSUMER_REGS} registers a thread "
                         f"and a producer at {PRODUCER_REGS} need {used} registers: the CTA's "
                         f"pool holds {pool}")
    return PRODUCER_REGS, CONSUMER_REGS


def ring_layout(stages: int | None, rows: int, cols: int, dtype):
    """The swizzled shared ring of ``stages`` tiles [rows, cols] (cols contiguous; one tile
    when ``stages`` is None): the widest swizzle whose span divides a row, so TMA and wgmma
    access it alike."""
    row_bytes = cols * dtype.itemsize
    for span, mode in _SWIZZLES.items():
        if row_bytes % span == 0:
            return smem_layout((rows, cols) if stages is None else (stages, rows, cols), dtype,
                               mode)
    raise ValueError(f"a tile row of {cols} x {dtype} is {row_bytes} bytes: the shared ring "
                     f"needs a multiple of 32 bytes for a wgmma swizzle")


def hopper_gemm_config(a, b, *, block_m=128, block_n=128, block_k=64, stages=4,
                       consumers=None, out_dtype=None, ctas=None, cluster_m=1):
    """The launch grid and the kernel's constexpr options for ``a @ b`` into a C of
    ``out_dtype`` (default: the operands'), at most ``ctas`` CTAs (None: one a tile)."""
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype:
        raise TypeError(f"hopper_gemm takes two float16 or two bfloat16 matrices, got "
                        f"{a.dtype} and {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"hopper_gemm multiplies [M, K] by [K, N], got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    _check_k(a.shape[1])
    return tile_config(a.shape[0], b.shape[1], a.dtype, out_dtype or a.dtype, block_m,
                        block_n, block_k, stages, consumers, b_nk=False, ctas=ctas,
                        cluster_m=cluster_m)


def _check_k(k):
    if k == 0:      # a tile's first K step starts its accumulator: there must be one
        raise ValueError("K = 0: the kernel multiplies at least one K step (C would be "
                         "zeros: torch.zeros makes it)")


def persistent_ctas(device, persistent=True, sm_count=None):
    """How many CTAs a persistent launch on ``device`` keeps (None: one CTA a tile). Each
    CTA walks its tiles, so its barrier setup and register split happen once and a tile's
    TMA store overlaps the next tile's loads and multiplies; one CTA an SM (a CTA takes
    most of an SM's shared memory and all its registers) keeps every SM busy without a
    second wave's tail. ``sm_count`` defaults to the CUDA device's SM count (132 on an
    H100 / H200 SXM); the CPU has none to fill: pass it to run the tile walk there."""
    if not persistent:
        return None
    if sm_count is None and torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    if sm_count is not None and sm_count < 1:
        raise ValueError(f"sm_count={sm_count}: a persistent launch needs at least one CTA")
    return sm_count


def tile_config(m, n, dtype, out_dtype, block_m, block_n, block_k, stages, consumers, b_nk,
                 ctas, cluster_m):
    """The grid and options of either entry point: A [M, K] and B ([N, K] when ``b_nk``,
    else [K, N]) of ``dtype`` in shared rings, C of ``out_dtype``; each of the grid's CTAs
    walks the tiles ``cta, cta + grid, ...`` (one each when ``ctas`` is None)."""
    consumers = consumers_of(block_m, consumers)
    if block_m % (64 * consumers):
        raise ValueError(f"block_m={block_m} must give each of the {consumers} consumer "
                         f"warpgroup(s) a multiple of 64 rows (wgmma's M)")
    producer_regs, consumer_regs = register_split(consumers)
    if cluster_m not in (1, 2):
        raise ValueError(f"cluster_m={cluster_m}: hopper_gemm runs clusters of 1 or 2 CTAs "
                         f"along M (2: the pair shares B's tiles by TMA multicast)")
    if cluster_m == 2 and (block_n if b_nk else block_k) % 16:
        raise ValueError(f"cluster_m=2 splits B's {'block_n' if b_nk else 'block_k'} rows "
                         f"between the pair: it must be a multiple of 16 (two halves of whole "
                         f"8-row swizzle periods)")
    grid = launch_grid(m, n, block_m, block_n, cluster_m, ctas)
    shared = (stages * (block_m + block_n) * block_k * dtype.itemsize      # the rings
              + block_m * block_n * out_dtype.itemsize                   # C's staging
              + 8 * (2 * stages + 2 * consumers))                        # the mbarriers
    if shared > SHARED_BYTES:
        raise ValueError(f"{stages} stages of {block_m} x {block_k} and {block_k} x {block_n} "
                         f"tiles plus C's {block_m} x {block_n} staging need {shared} bytes of "
                         f"shared memory: a CTA has {SHARED_BYTES}")
    b_tile = (block_n, block_k) if b_nk else (block_k, block_n)
    options = dict(STAGES=stages, BM=block_m, BN=block_n, BK=block_k, CONSUMERS=consumers,
                   LA=ring_layout(stages, block_m, block_k, dtype),
                   LB=ring_layout(stages, *b_tile, dtype),
                   LC=ring_layout(None, block_m, block_n, out_dtype),
                   PRODUCER_REGS=producer_regs, CONSUMER_REGS=consumer_regs, B_NK=b_nk,
                   num_warps=4 * (1 + consumers), CLUSTER_M=cluster_m)
    if cluster_m > 1:
        options["cluster"] = (cluster_m, 1, 1)
    return grid, options


def launch_grid(m, n, block_m, block_n, cluster_m, ctas):
    """One CTA a tile, or at most ``ctas`` in whole clusters, each walking its units."""
    units = tj.cdiv(m, block_m * cluster_m) * tj.cdiv(n, block_n)
    if ctas is not None:
        units = min(units, max(1, ctas // cluster_m))
    return (units * cluster_m,)


def _check_k_major(name, operand):
    """wgmma reads fp8 operands K-major only and TMA copies rows of contiguous elements: an
    operand [rows, K] whose K is strided (e.g. the transpose of a row-major [K, rows]) would
    need a transposing copy, which fp8_gemm does not make behind the caller's back."""
    if operand.shape[1] > 1 and operand.stride(1) != 1:
        raise ValueError(f"fp8_gemm reads {name} {tuple(operand.shape)} K-major (wgmma's fp8 "
                         f"operands), but its strides {tuple(operand.stride())} leave K (dim "
                         f"1) strided: {name}.contiguous() makes the K-major copy it needs")


def consumers_of(block_m, consumers):
    return consumers if consumers is not None else 2 if block_m >= 128 else 1


def fp8_gemm_config(a, b, scale_a, scale_b, *, block_m=128, block_n=128, block_k=128,
                    stages=4, consumers=None, out_dtype=torch.bfloat16, ctas=None,
                    cluster_m=1):
    """The grid and the kernel's options for ``fp8_gemm``, the scaling mode among them
    ("tensor" when both scales hold one value, else "block")."""
    if a.dtype not in FP8_TYPES or b.dtype not in FP8_TYPES:
        raise TypeError(f"fp8_gemm takes float8_e4m3fn or float8_e5m2 matrices (in any mix), "
                        f"got {a.dtype} and {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"fp8_gemm multiplies A [M, K] by B given as [N, K] (wgmma reads "
                         f"fp8 K-major), got {tuple(a.shape)} and {tuple(b.shape)}")
    for name, operand in (("a", a), ("b", b)):
        _check_k_major(name, operand)
    (m, k), n = a.shape, b.shape[0]
    _check_k(k)
    if k % 16:
        raise ValueError(f"K = {k}: an fp8 row must be a multiple of 16 bytes (a tensor "
                         f"map's stride)")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"fp8_gemm writes bfloat16, float16 or float32, not {out_dtype}")
    scales = (scale_a, scale_b)
    if any(s.dtype != torch.float32 for s in scales):
        raise TypeError(f"the scales must be float32, got {scale_a.dtype} and {scale_b.dtype}")
    if all(s.numel() == 1 for s in scales):
        scaling = "tensor"
    else:
        scaling = "block"
        blocks = tj.cdiv(k, SCALE_BLOCK)
        wanted = ((m, blocks), (tj.cdiv(n, SCALE_BLOCK), blocks))
        if tuple(scale_a.shape) != wanted[0] or tuple(scale_b.shape) != wanted[1]:
            raise ValueError(f"block scales for M, N, K = {m}, {n}, {k} are scale_a {wanted[0]} "
                             f"(1 x 128) and scale_b {wanted[1]} (128 x 128), got "
                             f"{tuple(scale_a.shape)} and {tuple(scale_b.shape)} (per-tensor "
                             f"scales hold one value each)")
        if block_k != SCALE_BLOCK or SCALE_BLOCK % block_n:
            raise ValueError(f"block scales need block_k = 128 (one scale per K step) and a "
                             f"block_n dividing 128 (one B scale per tile), got "
                             f"block_k={block_k}, block_n={block_n}")
    # the rings sized and swizzled by a's dtype: either fp8 kind is a byte
    grid, options = tile_config(m, n, a.dtype, out_dtype, block_m, block_n, block_k,
                                 stages, consumers, b_nk=True, ctas=ctas,
                                 cluster_m=cluster_m)
    return grid, dict(options, SCALING=scaling)
