"""A warp-specialized GEMM for Hopper (``sm_90a``): C = A @ B, A [M, K], B [K, N], bf16 /
fp16 (``hopper_gemm``); the same kernel multiplies scaled fp8, e4m3 or e5m2 (``fp8_gemm``,
below; ``scaled_mm`` in torch._scaled_mm's orientation).

The schedule, all of it explicit in the kernel (issue 14, "Kernels"):

- registers follow the work (``setmaxnreg``, ``register_split``): the producer warpgroup
  gives its registers back to the CTA's pool down to 40 a thread, each consumer claims up
  to 232 for its accumulator.
- warpgroup 0 is the producer: one elected thread of its warp 0 waits ``empty[s]``, arms
  ``full[s]`` with ``mbarrier_arrive_expect_tx`` for both tiles' bytes and issues the two TMA
  loads (``copy_async`` family ``tma``) of K step ``k`` into stage ``s = k % STAGES`` of two
  shared rings, swizzled as wgmma reads them (``smem_layout``, the widest swizzle the row
  allows). Edges of M, N and K are the hardware's out-of-bounds fill: zeros.
- warpgroups 1 .. CONSUMERS each own ``BM / CONSUMERS`` rows of the tile: they wait
  ``full[s]``, run ``gemm_async`` family ``wgmma`` into an f32 accumulator (wgmma's fragment
  layout, inferred) with ``wait=False``, so step k's group stays in flight while step k + 1
  waits for its stage: ``tj.wgmma_wait(1)`` retires step k - 1's, whose stage each consumer
  thread then releases on ``empty`` (``128 * CONSUMERS`` arrivals). A tile's first K step
  starts the accumulator (``accum=False``): a fill on the path around the K loop would be
  a write into a pending wgmma's registers to ptxas, which then serializes every wgmma.
- the TMA-store epilogue: each consumer writes its accumulator, cast to C's dtype, two
  columns at a time (dispatch ``copy -> vec``: ``st.shared.v2``), into its own rows of
  one swizzled shared tile [BM, BN] (slices at constant rows: the race
  check sees them apart), fences it for the asynchronous proxy
  (``fence_proxy_async``) and arrives on ``staged[c]``; an elected thread of the
  consumer's first warp waits there, stores the tile with a TMA ``copy_async`` (the box
  clipped at C's edges by the hardware), waits for its bulk group and arrives on
  ``stored[c]``, which the consumer waits for before it stages its next tile (phase 0 is
  completed at init, so the wait is on every path and no barrier is added for it).
- persistent tiles: each CTA walks the tiles ``cta, cta + grid, ...`` (M fastest; a grid
  of one CTA a tile walks one each), its ring steps ``j * num_k + k`` and their phases
  running on across its tiles; ``persistent_ctas`` sizes the grid to the SMs.
- 2 x 1 clusters (``CLUSTER_M = 2``, launched with ``cluster=(2, 1, 1)``): the pair takes
  two neighbouring M tiles of one N column (units of ``CLUSTER_M`` tiles walked in
  lockstep), each CTA loading its A tile and half of B's tile with ``multicast=0b11`` into
  both CTAs' rings; ``empty[s]`` counts the consumers of both CTAs (each thread arrives on
  its own and, by ``tj.remote``, on the other's). ``tj.cluster_sync()`` after the
  barriers' init and before the CTAs leave.
- tile configs: ``hopper_gemm`` without ``config`` autotunes ``TILE_CONFIGS`` on a GPU
  (``tj.autotune`` keyed by power-of-two buckets of M, N and K) and runs the first on the
  CPU.

fp8 (``fp8_gemm``; constexpr options of the one kernel): wgmma reads fp8 operands K-major
only, so B comes as [N, K] (``B_NK``: its ring holds [BN, BK] tiles, the gemm transposes
it), each operand e4m3 or e5m2 (the wgmma's kind follows the rings' dtypes).
torch._scaled_mm's column-major B [K, N] is that [N, K] transposed: ``scaled_mm`` passes
the view. ``SCALING`` says where the scales enter: "tensor" multiplies the accumulator
once by ``SA[0] * SB[0]`` before the epilogue; "block" (DeepSeek-V3's 1 x 128 scales of
A, 128 x 128 of B; BK = 128, so a K step is a scale block) runs each K step's wgmma into
a fresh f32 fragment ``part`` and promotes it,
``acc = part * (SA[row, k] * SB[n0 // SCALE_BLOCK, k]) + acc`` (one fma a value), each
consumer thread reading the scales of its own rows (those past M read as 0: the copy's
bounds check). The tile's BN divides 128, so one B scale covers it (BN = 256 would span
two, and its ``part`` and ``acc`` would spill: see ``fp8_gemm``). Each step's group retires at once there (the promotion reads its products;
keeping one in flight would take a second ``part``, 64 more registers a thread than the
consumer has).

It runs on the CPU from the same source (both CPU lowerings: the per-thread one executes the
IR the cuda target prints, with the race detector).

Left out: the accumulator reaches its shared tile one pair of converted values per
store, not by stmatrix (which takes 16-bit values: a cast into another register tile
would come first); fp8_gemm is not autotuned; single-CTA 128 x 256 and 256 x 128 tiles
spill at the kernel's 168 registers a thread and are not among the tuned configs.
"""
import functools

import torch

import tilejit as tj

from .hopper_gemm_launch import (SCALE_BLOCK, TILE_CONFIGS, consumers_of, fp8_gemm_config,
                                 hopper_gemm_config, launch_grid, persistent_ctas,
                                 register_split, ring_layout, tile_config)

# the launch helpers are re-exported: callers find the whole GEMM here
__all__ = ["TILE_CONFIGS", "fp8_gemm", "fp8_gemm_config", "hopper_gemm",
           "hopper_gemm_autotuner", "hopper_gemm_config", "hopper_gemm_kernel", "k_bucket",
           "m_bucket", "n_bucket", "persistent_ctas", "register_split", "ring_layout",
           "scaled_mm", "tuned_grid", "tuned_hopper_gemm"]


@tj.kernel
def hopper_gemm_kernel(A, B, C, K, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr,
                       BK: tj.constexpr, CONSUMERS: tj.constexpr, LA: tj.constexpr,
                       LB: tj.constexpr, LC: tj.constexpr, PRODUCER_REGS: tj.constexpr,
                       CONSUMER_REGS: tj.constexpr, B_NK: tj.constexpr = False,
                       SCALING: tj.constexpr = "none", SA=tj.constexpr(None),
                       SB=tj.constexpr(None), CLUSTER_M: tj.constexpr = 1):
    tj.static_assert(SCALING in ("none", "tensor", "block"),
                     "SCALING is none, tensor or block")
    tj.static_assert(SCALING != "block" or (BK == SCALE_BLOCK and SCALE_BLOCK % BN == 0),
                     "block scales take BK = 128 (a K step is a scale block) and BN dividing 128")
    tj.static_assert(CLUSTER_M in (1, 2), "CLUSTER_M is 1 or 2 (2 x 1 clusters share B)")
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    staged = tj.alloc_barriers(CONSUMERS)
    stored = tj.alloc_barriers(CONSUMERS)
    a_ring = tj.alloc_shared((STAGES, BM, BK), A.dtype, layout=LA)
    b_ring = tj.alloc_shared((STAGES, BN, BK) if B_NK else (STAGES, BK, BN), B.dtype, layout=LB)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)                 # the producer's expect_tx arrival
            # every consumer thread of the cluster's CTAs arrives: each CTA's producer
            # fills the stage in all of them (B's halves multicast)
            tj.mbarrier_init(empty[s], CLUSTER_M * 128 * CONSUMERS)
        for c in tj.static_range(CONSUMERS):
            tj.mbarrier_init(staged[c], 128)             # a consumer's threads staged C
            tj.mbarrier_init(stored[c], 1)               # its TMA store read the tile
            tj.mbarrier_arrive(stored[c])   # phase 0 done: the first tile stages at once
    tj.cluster_sync()   # every CTA's barriers exist before another's copies reach them
    # the cluster's units of CLUSTER_M tiles along M (the last may reach past M: TMA reads
    # zeros there and its store writes nothing): u = cluster, cluster + clusters, ..., M
    # fastest, the CTA of rank r taking the unit's tile r. The rings' step counter runs on
    # across a CTA's tiles (step j * num_k + k), and so do the phases
    rank = tj.cta_id(0) % CLUSTER_M
    units_m = tj.cdiv(C.shape[0], BM * CLUSTER_M)
    num_k = tj.cdiv(K, BK)
    clusters = tj.num_ctas(0) // CLUSTER_M
    my_units = tj.cdiv(units_m * tj.cdiv(C.shape[1], BN) - tj.cta_id(0) // CLUSTER_M, clusters)
    HALF: tj.constexpr = (BN if B_NK else BK) // 2     # the rows of B a CTA loads
    if tj.warpgroup_id() == 0:
        with tj.warpgroup():
            tj.setmaxnreg(PRODUCER_REGS, "dec")     # it keeps a few: its registers go to
        if tj.warp_id() == 0 and tj.elect_sync():   # the consumers' accumulators
            for j in range(my_units):
                u = tj.cta_id(0) // CLUSTER_M + j * clusters
                m0 = (u % units_m * CLUSTER_M + rank) * BM
                n0 = u // units_m * BN
                for k in range(num_k):
                    step = j * num_k + k
                    s = step % STAGES
                    tj.mbarrier_wait(empty[s], ((step // STAGES) % 2) ^ 1)
                    tj.mbarrier_arrive_expect_tx(   # each tile in its own dtype
                        full[s], BM * BK * A.dtype.itemsize + BK * BN * B.dtype.itemsize)
                    tj.copy_async(a_ring[s], A[m0:m0 + BM, k * BK:(k + 1) * BK],
                                  barrier=full[s], dispatch="tma")
                    if CLUSTER_M == 2:      # its half of B's tile, to both CTAs; the
                        for r in tj.static_range(2):    # half's rows constant: TMA writes
                            h = r * HALF                # the swizzled ring from known rows
                            if rank == r:
                                if B_NK:
                                    half = B[n0 + h:n0 + h + HALF, k * BK:(k + 1) * BK]
                                else:
                                    half = B[k * BK + h:k * BK + h + HALF, n0:n0 + BN]
                                tj.copy_async(b_ring[s, h:h + HALF, :], half, barrier=full[s],
                                              dispatch="tma", multicast=0b11)
                    elif B_NK:
                        tj.copy_async(b_ring[s], B[n0:n0 + BN, k * BK:(k + 1) * BK],
                                      barrier=full[s], dispatch="tma")
                    else:
                        tj.copy_async(b_ring[s], B[k * BK:(k + 1) * BK, n0:n0 + BN],
                                      barrier=full[s], dispatch="tma")
    else:
        rows = BM // CONSUMERS
        c_stage = tj.alloc_shared((BM, BN), C.dtype, layout=LC)   # a slice per consumer
        for c in tj.static_range(CONSUMERS):    # c known at compile time: wgmma's operand
            c_tile = c_stage[c * rows:(c + 1) * rows, :]
            if tj.warpgroup_id() == c + 1:      # descriptors and C's slice: constant rows
                with tj.warpgroup():
                    tj.setmaxnreg(CONSUMER_REGS, "inc")
                    acc = tj.fragment((rows, BN), tj.float32)
                    if SCALING == "block":      # one K step's products, before its scales
                        part = tj.fragment((rows, BN), tj.float32)
                        row_scale = tj.fragment((rows, 1), tj.float32)
                    for j in range(my_units):
                        u = tj.cta_id(0) // CLUSTER_M + j * clusters
                        m0 = (u % units_m * CLUSTER_M + rank) * BM
                        n0 = u // units_m * BN
                        first = j * num_k   # the tile's first step in the rings
                        if SCALING == "block":
                            tj.fill(acc, 0.0)
                            for k in range(num_k):
                                s = (first + k) % STAGES
                                # the scales' loads first: they fly during the wait
                                tj.copy(row_scale,
                                        SA[m0 + c * rows:m0 + (c + 1) * rows, k:k + 1])
                                b_scale = SB[n0 // SCALE_BLOCK, k]
                                tj.mbarrier_wait(full[s], ((first + k) // STAGES) % 2)
                                # the promotion reads the step's products: its group
                                # retires at once (a second `part` in flight would not fit)
                                tj.gemm_async(part, a_ring[s, c * rows:(c + 1) * rows, :],
                                              b_ring[s, :, :], transpose_b=B_NK, accum=False,
                                              dispatch="wgmma")
                                tj.mbarrier_arrive(empty[s])
                                if CLUSTER_M == 2:  # the other CTA's producer filled it too
                                    tj.mbarrier_arrive(tj.remote(empty, 1 - rank)[s])
                                tj.mul(row_scale, row_scale, b_scale)   # acc += part *
                                tj.fma(acc, part, row_scale, acc)       # scale_a * scale_b
                        else:
                            # step k's group stays in flight while step k + 1 waits for its
                            # stage; step 0 starts the accumulator (accum=False, not a fill:
                            # ptxas serializes wgmma when other code writes its registers
                            # on a path between a multiply and its wait, as a fill skipped
                            # with the K loop would)
                            for k in range(num_k):
                                s = (first + k) % STAGES
                                tj.mbarrier_wait(full[s], ((first + k) // STAGES) % 2)
                                if k == 0:
                                    tj.gemm_async(acc, a_ring[s, c * rows:(c + 1) * rows, :],
                                                  b_ring[s, :, :], transpose_b=B_NK,
                                                  accum=False, dispatch="wgmma", wait=False)
                                else:
                                    tj.gemm_async(acc, a_ring[s, c * rows:(c + 1) * rows, :],
                                                  b_ring[s, :, :], transpose_b=B_NK,
                                                  dispatch="wgmma", wait=False)
                                    tj.wgmma_wait(1)    # step k - 1's group retired: its
                                    done = (first + k - 1) % STAGES     # stage is free
                                    tj.mbarrier_arrive(empty[done])
                                    if CLUSTER_M == 2:
                                        tj.mbarrier_arrive(tj.remote(empty, 1 - rank)[done])
                            tj.wgmma_wait(0)
                            done = (first + num_k - 1) % STAGES
                            tj.mbarrier_arrive(empty[done])
                            if CLUSTER_M == 2:
                                tj.mbarrier_arrive(tj.remote(empty, 1 - rank)[done])
                        if SCALING == "tensor":
                            tj.mul(acc, acc, SA[0] * SB[0])
                        # the previous tile's store has read c_tile (tile 0: the arrive
                        # at init). A wait on every path: the sync-hazards pass credits it,
                        # and adds no warpgroup barrier of its own
                        tj.mbarrier_wait(stored[c], j % 2)
                        tj.copy(c_tile, acc)
                        tj.fence_proxy_async()  # the tile's writes, before TMA reads it
                        tj.mbarrier_arrive(staged[c])
                        if tj.warp_id() == 4 * (c + 1) and tj.elect_sync():
                            tj.mbarrier_wait(staged[c], j % 2)
                            tj.copy_async(C[m0 + c * rows:m0 + (c + 1) * rows, n0:n0 + BN],
                                          c_tile, dispatch="tma")
                            tj.bulk_wait(0)
                            tj.mbarrier_arrive(stored[c])
    if CLUSTER_M == 2:      # no CTA leaves while the other may still arrive on its barriers
        tj.cluster_sync()


def hopper_gemm(a, b, out=None, *, config=None, persistent=True, sm_count=None):
    """C = a @ b for float16 / bfloat16 torch matrices, accumulated in f32; C in their
    dtype, or ``out``'s (e.g. float32). Launches on the tensors' device: the CPU runs the
    kernel itself, CUDA tensors launch the ``sm_90a`` build. Rows of a, b and out must be
    whole 16-byte multiples (a tensor map's strides).

    ``config``: the tile options of ``hopper_gemm_config`` as a dict (block_m, block_n,
    block_k, stages, consumers: 1 or 2 warpgroups, by default 2 for ``block_m >= 128``,
    cluster_m: 2 for 2 x 1 clusters sharing B). None: on a GPU the autotuner picks among
    ``TILE_CONFIGS`` per (M, N, K) bucket (``tuned_hopper_gemm``); on the CPU the first
    runs (timing the CPU's execution would say nothing of a GPU's). ``persistent``: launch
    ``persistent_ctas`` CTAs that walk the tiles (else one CTA a tile)."""
    if out is None:
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    ctas = persistent_ctas(a.device, persistent, sm_count)
    if config is None and a.device.type == "cuda":
        hopper_gemm_config(a, b, out_dtype=out.dtype)      # the operands' errors first
        hopper_gemm_autotuner[tuned_grid(a.shape[0], b.shape[1], ctas)](a, b, out, a.shape[1])
        return out
    grid, options = hopper_gemm_config(a, b, **(config or TILE_CONFIGS[0]),
                                       out_dtype=out.dtype, ctas=ctas)
    hopper_gemm_kernel[grid](a, b, out, a.shape[1], **options)
    return out


def _bucket(size: int) -> int:
    """The power of two at or above ``size``: the sizes that share a tuning result."""
    return 1 << max(size - 1, 0).bit_length()


def m_bucket(meta) -> int:
    return _bucket(meta["C"].shape[0])


def n_bucket(meta) -> int:
    return _bucket(meta["C"].shape[1])


def k_bucket(meta) -> int:
    return _bucket(meta["K"])


def tuned_grid(m, n, ctas):
    """The grid of the config the autotuner launches (its constexprs are in ``meta``)."""
    return lambda meta: launch_grid(m, n, meta["BM"], meta["BN"], meta["CLUSTER_M"], ctas)


def _derived(meta) -> dict:
    """The options a tile config implies for the call's dtypes (layouts, registers)."""
    return _derived_options(meta["A"].dtype, meta["C"].dtype, meta["BM"], meta["BN"],
                            meta["BK"], meta["STAGES"], meta["CONSUMERS"], meta["CLUSTER_M"])


@functools.lru_cache(maxsize=64)    # built once per config and dtypes, not per launch
def _derived_options(dtype, out_dtype, block_m, block_n, block_k, stages, consumers, cluster_m):
    return tile_config(block_m, block_n, dtype, out_dtype, block_m, block_n, block_k, stages,
                        consumers, b_nk=False, ctas=None, cluster_m=cluster_m)[1]


def tuned_hopper_gemm(configs=TILE_CONFIGS, **autotune_options):
    """``hopper_gemm_kernel`` under ``@tj.autotune`` over ``configs`` (hopper_gemm_config's
    tile options), keyed by the power-of-two buckets of M, N and K; the layouts and
    register limits each config implies are ``@tj.heuristics`` beneath it."""
    tuned = []
    for tile in configs:
        consumers = consumers_of(tile["block_m"], tile.get("consumers"))
        cluster_m = tile.get("cluster_m", 1)
        tuned.append(tj.Config(dict(BM=tile["block_m"], BN=tile["block_n"], BK=tile["block_k"],
                                    STAGES=tile["stages"], CONSUMERS=consumers,
                                    CLUSTER_M=cluster_m),
                               num_warps=4 * (1 + consumers),
                               cluster=(cluster_m, 1, 1) if cluster_m > 1 else None))
    derived = {name: (lambda meta, name=name: _derived(meta)[name])
               for name in ("LA", "LB", "LC", "PRODUCER_REGS", "CONSUMER_REGS")}
    return tj.autotune(tuned, key=[m_bucket, n_bucket, k_bucket], **autotune_options)(
        tj.heuristics(derived)(hopper_gemm_kernel))


hopper_gemm_autotuner = tuned_hopper_gemm()


def fp8_gemm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=None, *, block_m=128,
             block_n=128, block_k=128, stages=4, consumers=None, persistent=True,
             sm_count=None, cluster_m=1):
    """C = (a * scale_a) @ (b * scale_b).T for fp8 torch matrices a [M, K] and b [N, K],
    each float8_e4m3fn or float8_e5m2 (in any mix: wgmma's k32 kinds), f32 accumulation,
    C [M, N] of ``out_dtype`` (or ``out``'s dtype).

    Layouts: wgmma reads fp8 operands K-major, so both must have K contiguous (stride 1;
    rows may be a wider tensor's, their stride a multiple of 16 bytes). torch._scaled_mm's
    b, a column-major [K, N], is such a b transposed: pass ``b.T`` (a view, no copy), or
    call ``scaled_mm``, which takes _scaled_mm's orientation. An operand whose K is strided
    (e.g. the transpose of a row-major [K, N]) is refused with the copy it would need.

    The scales are float32: per tensor, one value each (0-d tensors), applied once to the
    accumulator; or per block (DeepSeek-V3), scale_a [M, ceil(K / 128)] one per row and
    128-wide K block, scale_b [ceil(N / 128), ceil(K / 128)] one per 128 x 128 block of b,
    applied to each K step's products (block_k = 128, block_n dividing 128). K must be a
    multiple of 16 (fp8 rows of whole 16 bytes) and C's rows whole 16-byte multiples;
    ``persistent`` and ``sm_count`` as for ``hopper_gemm``.

    Left out: block scales with block_n = 256. A consumer's 64 x 256 accumulator and the
    K step's products it promotes are 128 + 128 f32 registers a thread (128 + 64 if the
    two n128 halves took turns in one ``part``), over the 168 a thread ptxas builds the
    kernel at (384 threads share the SM's registers; setmaxnreg moves them at run time
    only): it would spill, as single-CTA 128 x 256 bf16 tiles already do without a
    ``part`` (``TILE_CONFIGS``)."""
    if out is None:
        out = torch.empty(a.shape[0], b.shape[0], dtype=out_dtype, device=a.device)
    grid, options = fp8_gemm_config(a, b, scale_a, scale_b, block_m=block_m, block_n=block_n,
                                    block_k=block_k, stages=stages, consumers=consumers,
                                    out_dtype=out.dtype,
                                    ctas=persistent_ctas(a.device, persistent, sm_count),
                                    cluster_m=cluster_m)
    if options["SCALING"] == "tensor":
        scale_a, scale_b = scale_a.reshape(1), scale_b.reshape(1)
    hopper_gemm_kernel[grid](a, b, out, a.shape[1], SA=scale_a, SB=scale_b, **options)
    return out


def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=None, **options):
    """C = (a * scale_a) @ (b * scale_b) in torch._scaled_mm's orientation: b [K, N]
    column-major (as _scaled_mm requires it on CUDA), which ``fp8_gemm`` runs as ``b.T``, the
    [N, K] row-major view of the same memory: no copy. A row-major b (N contiguous) is
    refused: its transpose is not K-major. Block scales as ``fp8_gemm`` takes them (scale_b
    per 128 x 128 block of ``b.T``: [ceil(N / 128), ceil(K / 128)]); ``options`` are
    ``fp8_gemm``'s tile and launch options."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm multiplies a [M, K] by b [K, N], got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    if b.shape[0] > 1 and b.stride(0) != 1:
        raise ValueError(f"scaled_mm takes b [K, N] column-major (K contiguous, as "
                         f"torch._scaled_mm does): b {tuple(b.shape)} has strides "
                         f"{tuple(b.stride())}; b.T.contiguous().T makes the column-major "
                         f"copy wgmma's K-major fp8 operands need")
    return fp8_gemm(a, b.T, scale_a, scale_b, out_dtype, out, **options)
