"""Attention forward for Hopper (``sm_90a``), FlashAttention-3 style (issue 14, "Kernels"):
O = softmax(Q K^T * scale [+ causal mask]) V, f16 or bf16, head dim 64 or 128.

One CTA computes ``BM`` query rows of one (batch, head); the schedule is explicit:

- warpgroup 0 is the producer (``setmaxnreg`` dec, ``register_split``): an elected thread
  loads the Q tile once by TMA (barrier ``q_full``), then the K and V tiles of key block
  ``j`` into stage ``j % STAGES`` of two shared rings (``ring_layout``, the swizzle wgmma
  reads), waiting ``empty[s]`` and arming ``full[s]`` with both tiles' bytes. Keys and
  queries past S read as the hardware's out-of-bounds zeros.
- warpgroups 1 .. CONSUMERS (``setmaxnreg`` inc) own 64 query rows each. Per key block
  j: S = Q K^T by wgmma from shared memory (K stored [keys, D]: the B operand K-major) and
  block j - 1's O += P V committed behind it, both left in flight (``wait=False``);
  ``tj.wgmma_wait(1)`` retires the scores alone, so block j's softmax runs while the
  tensor cores multiply block j - 1's P V (FlashAttention-3's intra-warpgroup overlap;
  the ring needs two stages: block j's K is read while block j - 1's stage is held).
  The softmax: the scores scaled by ``scale * log2(e)`` (so ``exp2`` is the softmax's
  exponential); in an edge block (one reaching past S, or, causal, past a row's query)
  keys ``>= S`` -- and, causal, keys after the query -- set to -inf by a mask built from
  ``tj.arange`` (the other blocks skip it: a run-time branch, uniform over the
  warpgroup); the online softmax in registers on the f32 accumulator fragment (row max and
  row sum reductions of the fragment, P = exp2 in place). Then ``tj.wgmma_wait(0)``
  retires block j - 1's O += P V (its stage is released), O is rescaled when the max
  grew, and P is cast to the inputs' dtype **in registers**: the accumulator's layout is
  wgmma's A register layout, so the cast packs each thread's own values into the fragment
  ``p`` that O += P V reads as its register A operand (V stored [keys, D]: B MN-major) --
  no P tile, no shared store, fence or read of P. After the loop, the last block's
  O += P V. The sm_90a build needs no spills at D = 64 and 128 (the consumers' code
  reaches R180 and R222 of the 232 registers ``setmaxnreg`` gives them).
  Finally O / l, cast, staged in the consumer's rows of the Q tile (its own rows, read by
  nobody else any more) and stored by TMA, which clips the rows past S.
- Causal: the key loop stops at the CTA's diagonal block (a run-time trip count per query
  block).

``hopper_attention`` takes q, k, v of shape [B, H, S, D] (one S for queries and keys, no
grouped heads); the kernel sees them as [B * H, S, D], its TMA boxes [1, rows, D], so a
block's rows past S read zeros and are not stored (the tensor maps end at S, not at the
next head's rows). It runs on the CPU from the same source (both CPU lowerings: the
per-thread one executes the IR the cuda target prints, with the race detector).

Left out: ping-pong scheduling of two consumers (barriers taking turns so that one
warpgroup's softmax runs while the other's wgmmas issue), the backward pass, and sequence
lengths that differ between queries and keys.
"""
import math

import torch

import tilejit as tj
from tilejit.kernels.hopper_gemm import register_split, ring_layout

HEAD_DIMS = (64, 128)
LOG2E = 1.4426950408889634


@tj.kernel
def hopper_attention_kernel(Q, K, V, O, seq, scale_log2, CAUSAL: tj.constexpr,
                            BM: tj.constexpr, BN: tj.constexpr, D: tj.constexpr,
                            STAGES: tj.constexpr, CONSUMERS: tj.constexpr, LQ: tj.constexpr,
                            LKV: tj.constexpr, PRODUCER_REGS: tj.constexpr,
                            CONSUMER_REGS: tj.constexpr):
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    q_full = tj.alloc_barriers(1)
    staged = tj.alloc_barriers(CONSUMERS)
    q_tile = tj.alloc_shared((BM, D), Q.dtype, layout=LQ)
    k_ring = tj.alloc_shared((STAGES, BN, D), K.dtype, layout=LKV)
    v_ring = tj.alloc_shared((STAGES, BN, D), V.dtype, layout=LKV)
    if tj.thread_id() == 0:
        tj.mbarrier_init(q_full[0], 1)
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)                 # the producer's expect_tx arrival
            tj.mbarrier_init(empty[s], 128 * CONSUMERS)  # every consumer thread arrives
        for c in tj.static_range(CONSUMERS):
            tj.mbarrier_init(staged[c], 128)             # a consumer's threads staged O
    tj.sync()
    m0 = tj.cta_id(0) * BM
    bh = tj.cta_id(1)
    kv_end = seq
    if CAUSAL:
        kv_end = min(seq, m0 + BM)      # no key after the block's last query
    num_n = tj.cdiv(kv_end, BN)
    if tj.warpgroup_id() == 0:
        with tj.warpgroup():
            tj.setmaxnreg(PRODUCER_REGS, "dec")
        if tj.warp_id() == 0 and tj.elect_sync():
            tj.mbarrier_arrive_expect_tx(q_full[0], BM * D * Q.dtype.itemsize)
            tj.copy_async(q_tile, Q[bh, m0:m0 + BM, 0:D], barrier=q_full[0], dispatch="tma")
            for j in range(num_n):
                s = j % STAGES
                tj.mbarrier_wait(empty[s], ((j // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], 2 * BN * D * K.dtype.itemsize)
                tj.copy_async(k_ring[s], K[bh, j * BN:(j + 1) * BN, 0:D], barrier=full[s],
                              dispatch="tma")
                tj.copy_async(v_ring[s], V[bh, j * BN:(j + 1) * BN, 0:D], barrier=full[s],
                              dispatch="tma")
    else:
        rows = BM // CONSUMERS
        for c in tj.static_range(CONSUMERS):    # c known at compile time: constant rows
            q_rows = q_tile[c * rows:(c + 1) * rows, :]
            if tj.warpgroup_id() == c + 1:
                with tj.warpgroup():
                    tj.setmaxnreg(CONSUMER_REGS, "inc")
                    query = m0 + c * rows + tj.arange(0, rows)
                    row_max = tj.full((rows, 1), float("-inf"), tj.float32)
                    row_sum = tj.zeros((rows, 1), tj.float32)
                    acc = tj.fragment((rows, D), tj.float32)
                    tj.fill(acc, 0.0)
                    tj.mbarrier_wait(q_full[0], 0)
                    scores = tj.fragment((rows, BN), tj.float32)
                    p = tj.fragment((rows, BN), Q.dtype)    # block j - 1's: wgmma's A
                    for j in range(num_n):
                        s = j % STAGES
                        tj.mbarrier_wait(full[s], (j // STAGES) % 2)
                        tj.gemm_async(scores, q_rows, k_ring[s], transpose_b=True,
                                      accum=False, dispatch="wgmma", wait=False)
                        if j > 0:   # block j - 1's O += P V, in flight over the softmax
                            tj.gemm_async(acc, p, v_ring[(j - 1) % STAGES], dispatch="wgmma",
                                          wait=False)
                            tj.wgmma_wait(1)    # the scores retired (the older group)
                        else:
                            tj.wgmma_wait(0)    # block 0: the scores are the only group
                        tj.copy(scores, scores * scale_log2)
                        edge = (j + 1) * BN > seq          # keys past S in this block
                        if CAUSAL:                         # keys after a row's query
                            edge = edge | ((j + 1) * BN > m0 + c * rows + 1)
                        if edge:    # only the edge blocks pay for the mask
                            key = j * BN + tj.arange(0, BN)
                            keep = key[None, :] < seq
                            if CAUSAL:
                                keep = keep & (query[:, None] >= key[None, :])
                            tj.copy(scores, tj.where(keep, scores, float("-inf")))
                        new_max = tj.maximum(row_max, tj.max(scores, axis=1, keep_dims=True))
                        tj.copy(scores, tj.exp2(scores - new_max))     # P in f32
                        grow = tj.exp2(row_max - new_max)
                        row_sum = row_sum * grow + tj.sum(scores, axis=1, keep_dims=True)
                        row_max = new_max
                        tj.wgmma_wait(0)    # block j - 1's O += P V: O, P and its stage free
                        if j > 0:
                            tj.mbarrier_arrive(empty[(j - 1) % STAGES])
                        tj.copy(acc, acc * grow)
                        tj.copy(p, tj.cast(scores, Q.dtype))
                    last = (num_n - 1) % STAGES
                    # returns at once (waited for in the loop): orders V's read on every path
                    tj.mbarrier_wait(full[last], ((num_n - 1) // STAGES) % 2)
                    tj.gemm_async(acc, p, v_ring[last], dispatch="wgmma")
                    tj.mbarrier_arrive(empty[last])
                    tj.copy(acc, acc / row_sum)     # in place: the staging copy below
                    tj.copy(q_rows, acc)            # stores pairs (copy -> vec)
                    tj.fence_proxy_async()      # the tile's writes, before TMA reads it
                    tj.mbarrier_arrive(staged[c])
                if tj.warp_id() == 4 * (c + 1) and tj.elect_sync():
                    tj.mbarrier_wait(staged[c], 0)
                    tj.copy_async(O[bh, m0 + c * rows:m0 + (c + 1) * rows, 0:D], q_rows,
                                  dispatch="tma")
                    tj.bulk_wait(0)


def hopper_attention_config(q, k, v, *, causal=False, scale=None, block_m=128, block_n=128,
                            stages=2, consumers=None):
    """The launch grid, the run-time scalars ``(seq, scale * log2(e))`` and the kernel's
    constexpr options for q, k, v of shape [B, H, S, D]."""
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype \
            or v.dtype != q.dtype:
        raise TypeError(f"hopper_attention takes float16 or bfloat16 q, k, v of one dtype, got "
                        f"{q.dtype}, {k.dtype} and {v.dtype}")
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"hopper_attention takes q, k, v of one shape [B, H, S, D], got "
                         f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    batch, heads, seq, dim = q.shape
    if dim not in HEAD_DIMS:
        raise ValueError(f"hopper_attention supports head dims {HEAD_DIMS}, got D = {dim}")
    if stages < 2:
        raise ValueError(f"stages={stages}: the K and V ring needs 2 stages at least (block "
                         "j's scores are computed while block j - 1's stage is in use)")
    if consumers is None:
        consumers = 2 if block_m >= 128 else 1
    if block_m != 64 * consumers:
        raise ValueError(f"block_m={block_m} must give each of the {consumers} consumer "
                         f"warpgroup(s) 64 query rows (wgmma's M)")
    producer_regs, consumer_regs = register_split(consumers)
    scale = 1 / math.sqrt(dim) if scale is None else scale
    grid = (tj.cdiv(seq, block_m), batch * heads)
    options = dict(CAUSAL=causal, BM=block_m, BN=block_n, D=dim, STAGES=stages,
                   CONSUMERS=consumers, LQ=ring_layout(None, block_m, dim, q.dtype),
                   LKV=ring_layout(stages, block_n, dim, q.dtype),
                   PRODUCER_REGS=producer_regs, CONSUMER_REGS=consumer_regs,
                   num_warps=4 * (1 + consumers))
    return grid, (seq, scale * LOG2E), options


def hopper_attention(q, k, v, *, causal=False, scale=None, block_m=128, block_n=128,
                     stages=2, consumers=None):
    """softmax(q k^T * scale) v for torch tensors [B, H, S, D] (contiguous, float16 or
    bfloat16, D 64 or 128; ``scale`` defaults to 1 / sqrt(D)); ``causal`` masks the keys
    after each query (query i sees keys 0 .. i). Returns a new [B, H, S, D] tensor in q's
    dtype, on q's device: the CPU runs the kernel itself, CUDA tensors launch the ``sm_90a``
    build. ``block_m`` is 64 query rows per consumer warpgroup (``consumers`` defaults to 2
    for ``block_m >= 128``)."""
    grid, scalars, options = hopper_attention_config(
        q, k, v, causal=causal, scale=scale, block_m=block_m, block_n=block_n, stages=stages,
        consumers=consumers)
    batch, heads, seq, dim = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    flat = [t.reshape(batch * heads, seq, dim) for t in (q, k, v)]   # copies if strided
    hopper_attention_kernel[grid](*flat, out.view(batch * heads, seq, dim), *scalars,
                                  **options)
    return out
