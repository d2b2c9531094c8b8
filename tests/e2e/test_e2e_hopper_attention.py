"""kernels.hopper_attention: the warp-specialized TMA + wgmma attention forward against
torch's scaled_dot_product_attention (math in f32) on the CPU at ragged sequence lengths
(the last key block masked to -inf, the last query block's rows past S not stored), causal
and not, f16 and bf16, one and two consumer warpgroups (both CPU lowerings: the per-thread
one executes the IR the cuda target prints, with the race detector); its sm_90a build
through NVRTC for head dims 64 and 128 (the PTX instructions that matter, no spills); and
the errors of its Python entry point."""
import math
import re

import pytest
import torch
from support.gpu import needs_nvdisasm, needs_nvrtc, sass

import tilejit as tj
from tilejit.kernels import hopper_attention
from tilejit.kernels.hopper_attention import hopper_attention_config, hopper_attention_kernel
from tilejit.targets.cuda.nvrtc import compile_cuda

# small blocks keep the CPU runs short: one consumer warpgroup of 64 query rows, 64 keys
SMALL = dict(block_m=64, block_n=64, stages=2)
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}   # P rounded to the dtype


def _qkv(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(dtype) for _ in range(3)]


def _expected(q, k, v, causal, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, scale=scale)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ragged_attention_matches_sdpa(dtype, causal):
    """S = 130: three query blocks and three key blocks, the last holding 2 rows."""
    q, k, v = _qkv((1, 2, 130, 64), dtype)
    out = hopper_attention(q, k, v, causal=causal, **SMALL)
    assert out.dtype == dtype and out.shape == q.shape
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), _expected(q, k, v, causal), rtol=tol, atol=tol)


@pytest.mark.parametrize("seq, causal", [(200, False), (200, True), (50, True)])
def test_two_consumer_warpgroups_and_a_ring_that_wraps(seq, causal):
    """block_m = 128: warpgroups 1 and 2 own 64 query rows each; S = 200 gives four key
    blocks of 64 through a two-stage ring (the phases alternate); causal, the second query
    block stops at its diagonal, key block 3. S = 50: the second consumer's rows all lie
    past S (its TMA store writes nothing)."""
    q, k, v = _qkv((1, 1, seq, 64), torch.bfloat16, seed=1)
    out = hopper_attention(q, k, v, causal=causal, block_m=128, block_n=64, stages=2)
    tol = TOLERANCE[torch.bfloat16]
    torch.testing.assert_close(out.float(), _expected(q, k, v, causal), rtol=tol, atol=tol)


def test_the_causal_key_loop_stops_at_the_diagonal_block():
    """Keys past the first query block's diagonal hold NaN in V: a block loaded and masked
    would still multiply P's zeros by them (0 * NaN), so the first 128 rows come out
    finite and right only if the loop stops at key block 1 for query block 0. (The kernel
    of the causal two-consumer test above: compiled once.)"""
    q, k, v = _qkv((1, 1, 200, 64), torch.bfloat16, seed=4)
    v[:, :, 128:] = float("nan")
    out = hopper_attention(q, k, v, causal=True, block_m=128, block_n=64)
    tol = TOLERANCE[torch.bfloat16]
    expected = _expected(q[:, :, :128], k[:, :, :128], v[:, :, :128], True)
    torch.testing.assert_close(out[:, :, :128].float(), expected, rtol=tol, atol=tol)


def test_head_dim_128_and_a_given_scale():
    q, k, v = _qkv((2, 1, 72, 128), torch.float16, seed=2)
    out = hopper_attention(q, k, v, scale=0.3, **SMALL)
    tol = TOLERANCE[torch.float16]
    torch.testing.assert_close(out.float(), _expected(q, k, v, False, scale=0.3), rtol=tol,
                               atol=tol)


def test_strided_inputs_are_read_as_their_values():
    """q, k, v as [B, S, H, D] memory transposed to [B, H, S, D] views: copied for the
    tensor maps; the result is a new contiguous tensor."""
    q, k, v = (t.transpose(1, 2) for t in _qkv((1, 70, 2, 64), torch.float16, seed=3))
    out = hopper_attention(q, k, v, causal=True, **SMALL)
    assert out.is_contiguous()
    tol = TOLERANCE[torch.float16]
    torch.testing.assert_close(out.float(), _expected(q, k, v, True), rtol=tol, atol=tol)


def test_the_dispatch_picks_tma_wgmma_and_register_reductions(lowering):
    q = torch.zeros(1, 1, 64, 64, dtype=torch.float16)
    grid, scalars, options = hopper_attention_config(q, q, q, causal=True, **SMALL)
    flat = q.view(1, 64, 64)
    compiled = hopper_attention_kernel.compile(flat, flat, flat, flat, *scalars, **options)
    rules = [(r.primitive, r.rule) for r in compiled.dispatch_log]
    assert rules.count(("copy_async", "tma")) == 4    # Q, K, V loads; O's store
    # S = Q K^T; O += P V of block j - 1 (in the loop) and of the last block
    assert rules.count(("gemm_async", "wgmma")) == 3
    assert grid == (1, 1) and options["num_warps"] == 8
    assert scalars == (64, pytest.approx(math.log2(math.e) / 8))
    if lowering == "per_thread":   # the row max and row sum: shuffles within the rows' lanes
        assert compiled.metadata["backend"]["race_check"]    # the CPU runs the race detector
        reduces = [r for r in compiled.dispatch_log if r.primitive == "reduce"]
        assert [r.rule for r in reduces] == ["shuffle", "shuffle"]
        # O += P V reads P from registers: the cast to f16 packs each thread's own values
        # (the accumulator's layout is wgmma's A layout), no value moves between threads
        s_gemm, *pv_gemms = [r for r in compiled.dispatch_log if r.primitive == "gemm_async"]
        assert s_gemm.note.startswith("A K-major")
        assert all(r.note.startswith("A from registers") for r in pv_gemms)
        (cast,) = [r for r in compiled.dispatch_log if r.line == _kernel_line("tj.copy(p, ")]
        assert (cast.primitive, cast.rule) == ("pointwise", "packed")


@pytest.mark.parametrize("args, options, error, message", [
    (_qkv((1, 1, 8, 64), torch.float32), {}, TypeError,
     r"float16 or bfloat16 q, k, v of one dtype, got torch.float32"),
    ([torch.zeros(1, 1, 8, 64, dtype=torch.half), torch.zeros(1, 1, 8, 64, dtype=torch.half),
      torch.zeros(1, 1, 8, 64, dtype=torch.bfloat16)], {}, TypeError,
     r"got torch.float16, torch.float16 and torch.bfloat16"),
    ([torch.zeros(1, 1, 8, 64, dtype=torch.half), torch.zeros(1, 1, 9, 64, dtype=torch.half),
      torch.zeros(1, 1, 8, 64, dtype=torch.half)], {}, ValueError,
     r"one shape \[B, H, S, D\], got \(1, 1, 8, 64\), \(1, 1, 9, 64\) and \(1, 1, 8, 64\)"),
    (_qkv((8, 64), torch.half), {}, ValueError, r"one shape \[B, H, S, D\], got \(8, 64\)"),
    (_qkv((1, 1, 8, 96), torch.half), {}, ValueError, r"head dims \(64, 128\), got D = 96"),
    (_qkv((1, 1, 8, 64), torch.half), dict(stages=1), ValueError,
     r"stages=1: the K and V ring needs 2 stages at least \(block j.s scores"),
    (_qkv((1, 1, 8, 64), torch.half), dict(block_m=96), ValueError,
     r"block_m=96 must give each of the 1 consumer warpgroup\(s\) 64 query rows"),
    (_qkv((1, 1, 8, 64), torch.half), dict(block_m=192, consumers=3), ValueError,
     r"3 consumer warpgroups at 232 registers a thread and a producer at 40 need 94208"),
])
def test_bad_arguments_are_explained(args, options, error, message):
    with pytest.raises(error, match=message):
        hopper_attention(*args, **options)


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
@pytest.mark.parametrize("dim, causal", [(64, False), (128, True)])
def test_the_sm90a_build_holds_tma_wgmma_and_mbarrier_waits_without_spills(dim, causal):
    compiled = _sm90a_build(dim, causal)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    wgmma = [line.split()[0] for line in ptx if line.startswith("wgmma.mma_async")]
    # per consumer: S = Q K^T (n = 128 keys, K = D) in D / 16 steps; O += P V (n = D, K =
    # 128 keys) in 128 / 16 steps, written twice (block j - 1's in the loop, the last after)
    shape = "wgmma.mma_async.sync.aligned.m64n{}k16.f32.bf16.bf16".format
    assert sorted(wgmma) == sorted([shape(128)] * (2 * dim // 16) + [shape(dim)] * 32)
    # the overlap, per consumer: block j's scores, then block j - 1's O += P V committed;
    # wait_group 1 retires the scores only (wait_group 0 in block 0, nothing else in
    # flight), the softmax's exp2s run with O += P V in flight, a wait_group 0 retires it
    # before O is rescaled; after the loop the last block's O += P V, waited for
    events = [line.split()[0] if line.startswith("wgmma.commit_group")
              else line.split()[-1] if line.startswith("wgmma.wait_group") else "exp2"
              for line in ptx if line.startswith(("wgmma.commit_group", "wgmma.wait_group",
                                                  "ex2.approx.f32"))]
    events = [e for i, e in enumerate(events) if e != "exp2" or events[i - 1] != "exp2"]
    assert events == ["wgmma.commit_group.sync.aligned;"] * 2 + [
        "1;", "0;", "exp2", "0;", "wgmma.commit_group.sync.aligned;", "0;"] + \
        ["wgmma.commit_group.sync.aligned;"] * 2 + [
        "1;", "0;", "exp2", "0;", "wgmma.commit_group.sync.aligned;", "0;"]
    assert any(line.startswith("cp.async.bulk.tensor.3d.shared::cluster.global") and
               "mbarrier::complete_tx::bytes" in line for line in ptx)
    assert sum(line.startswith("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group")
               for line in ptx) == 2 * dim // 64   # each consumer's O in 64-column boxes
    assert any(line.startswith("mbarrier.try_wait") for line in ptx)
    # the softmax in registers: exp2, row reductions by shuffles within a row's 4 lanes
    assert any(line.startswith("ex2.approx.f32") for line in ptx)
    assert any(line.startswith("shfl.sync.bfly.b32") for line in ptx)
    # O += P V takes P from registers (four 32-bit registers of two 16-bit values each per
    # k-step in place of A's descriptor); S = Q K^T reads Q and K by descriptors
    from_registers = [line for line in ptx if line.startswith("wgmma.mma_async")
                      and ", {%r" in line]
    assert [line.split()[0] for line in from_registers] == [shape(dim)] * 32
    # no P tile: shared memory holds Q, the K and V rings and 6 KiB of barriers and the
    # mask's index vectors (P through shared memory added 128 x 128 x 2 bytes), and only O
    # (D / 2 16-bit values a thread, in pairs, two consumers' worth) is staged there, fenced
    # for the asynchronous proxy. NVVM splits some pairs of the D = 128 build into two
    # st.shared.u16, which ptxas joins again (the SASS test below finds no 16-bit STS).
    meta = compiled.metadata
    assert meta["shared_bytes"] == (128 * dim + 2 * 2 * 128 * dim) * 2 + 6144
    staging = [line.split()[0] for line in ptx if line.startswith("st.shared.")
               and ".u16" in line.split()[0]]
    assert sum(2 if op == "st.shared.v2.u16" else 1 for op in staging) == 2 * (dim // 2)
    assert dim == 128 or staging == ["st.shared.v2.u16"] * (dim // 2)
    assert ptx.count("fence.proxy.async.shared::cta;") == 2   # O, per consumer
    assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232;") == 2
    assert meta["spill_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    assert meta["registers"] == 168
    assert [(t["param"], t["box"], t["swizzle"]) for t in meta["tensor_maps"]] == [
        ("Q", [1, 128, 64], 128), ("K", [1, 128, 64], 128), ("V", [1, 128, 64], 128),
        ("O", [1, 64, 64], 128)]


@needs_nvrtc
@needs_nvdisasm
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_the_sm90a_sass_holds_hgmma_utmaldg_and_utmastg(tmp_path):
    compiled = _sm90a_build(128, True)
    # ptxas keeps the groups in flight as written: no wait it had to inject (C7517), no
    # multiplies serialized (C7515) over the register A or the scores issued ahead
    assert "wgmma" not in compile_cuda(compiled.asm["cuda"], "sm_90a").log
    text = sass(compiled.asm["cubin"], tmp_path)
    hgmma = [line for line in text.splitlines() if "HGMMA.64x128x16.F32.BF16" in line]
    # per consumer 8 k-steps of S = Q K^T (D, A's descriptor first) and twice 8 of O += P V
    # (128 keys, A in registers before B's descriptor: in the loop and after it)
    from_registers = [line for line in hgmma
                      if re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, R\d+, gdesc\[", line)]
    assert len(hgmma) == 48 and len(from_registers) == 32
    assert "UTMALDG.3D" in text and "UTMASTG.3D" in text
    assert "STS.U16" not in text    # O staged 32 bits at a time


def _kernel_line(text):
    """The line of hopper_attention_kernel's source file that starts with ``text``."""
    lines = open(hopper_attention_kernel.fn.__code__.co_filename).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text))


def _sm90a_build(dim, causal):
    batch, heads, seq = 4, 16, 4096      # meta tensors and specs: nothing is allocated
    meta = torch.empty(batch, heads, seq, dim, dtype=torch.bfloat16, device="meta")
    _, scalars, options = hopper_attention_config(meta, meta, meta, causal=causal)
    spec = tj.TensorSpec((batch * heads, seq, dim), tj.bfloat16, device="cuda")
    return hopper_attention_kernel.compile(spec, spec, spec, spec, *scalars, target="cuda",
                                           arch="sm_90a", **options)
