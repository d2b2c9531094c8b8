"""Hardware layout constructors checked element by element against the vendor formulas.

Sources of the reference formulas (restated here independently of the implementation):
* PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type" (Figures 79/81/83).
* PTX ISA wgmma "Register Fragments" Figure 149 (m64nNk16 accumulator D) = CUTLASS
  CLayout_64xN.
* CUDA TMA swizzle modes (16-byte chunks XOR-ed within a 32/64/128-byte span; pattern
  period 256/512/1024 bytes) and PTX tcgen05 "Shared Memory Layout and Swizzling".
* PTX tcgen05 "Data Path Layout Organization", "Block Scaling"; TIRx paper §3.2.
* AWS NKI docs: 128 partitions; SBUF 192 KiB / PSUM 16 KiB per partition.
"""
import pytest

import tilejit.layout as tl
from tilejit.errors import LayoutError
from tilejit.layout import (F, P, R, S, ComposeLayout, SwizzleMode, TCol, TileLayout, TLane,
                            tid_in_wg)
from tilejit.layout import hardware as hw


def at(layout, coord, shape, axes):
    d = layout.apply(*coord, shape=shape)
    extra = {k for k, v in d.items() if v and k not in axes}
    assert not extra, f"unexpected axes {extra} in {d}"
    return tuple(d.get(a, 0) for a in axes)


# ---------------------------------------------------------------- exports

def test_all_constructors_exported():
    assert len(hw.__all__) >= 15
    for name in hw.__all__:
        assert getattr(tl, name) is getattr(hw, name), name


# ---------------------------------------------------------------- mma.sync m16n8k16

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "bf16"])
def test_mma_m16n8k16_a_matches_ptx(dtype):
    lay = hw.mma_m16n8k16_a_layout(dtype)
    seen = set()
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(8):
            row = group if (i < 2 or 4 <= i < 6) else group + 8
            col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert at(lay, (row, col), (16, 16), ("laneid", "m")) == (lane, i)
            seen.add((row, col))
    assert len(seen) == 256 and lay.size() == 256


def test_mma_m16n8k16_b_matches_ptx():
    lay = hw.mma_m16n8k16_b_layout("float16")
    seen = set()
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(4):
            row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
            col = group
            assert at(lay, (row, col), (16, 8), ("laneid", "m")) == (lane, i)
            seen.add((row, col))
    assert len(seen) == 128


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mma_m16n8k16_c_matches_ptx(dtype):
    lay = hw.mma_m16n8k16_c_layout(dtype)
    seen = set()
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(4):
            row = group if i < 2 else group + 8
            col = tig * 2 + (i & 1)
            assert at(lay, (row, col), (16, 8), ("laneid", "m")) == (lane, i)
            seen.add((row, col))
    assert len(seen) == 128


# ---------------------------------------------------------------- mma.sync m16n8k32 (8-bit)
# PTX ISA "Matrix Fragments for mma.m16n8k32" (.e4m3/.e5m2/.s8/.u8): four elements to a
# 32-bit register.

@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2", "f8e4m3", "e5m2"])
def test_mma_m16n8k32_a_matches_ptx(dtype):
    lay = hw.mma_m16n8k32_a_layout(dtype)
    seen = set()
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(16):
            row = group if (i < 4 or 8 <= i < 12) else group + 8
            col = tig * 4 + (i & 3) + (16 if i >= 8 else 0)
            assert at(lay, (row, col), (16, 32), ("laneid", "m")) == (lane, i)
            seen.add((row, col))
    assert len(seen) == 512 and lay.size() == 512


@pytest.mark.parametrize("dtype", ["float8_e4m3", "f8e5m2"])
def test_mma_m16n8k32_b_matches_ptx(dtype):
    lay = hw.mma_m16n8k32_b_layout(dtype)
    seen = set()
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(8):
            row = tig * 4 + (i & 3) + (16 if i >= 4 else 0)
            col = group
            assert at(lay, (row, col), (32, 8), ("laneid", "m")) == (lane, i)
            seen.add((row, col))
    assert len(seen) == 256


def test_mma_m16n8k32_takes_only_8_bit_floats():
    with pytest.raises(LayoutError, match="float8_e4m3, float8_e5m2"):
        hw.mma_m16n8k32_a_layout("float16")
    with pytest.raises(LayoutError):
        hw.mma_m16n8k32_b_layout("int8")


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_matches_ptx(num, trans):
    # PTX ISA "ldmatrix": thread 4*row + word holds word (two elements) of each matrix's
    # row; .trans delivers the transposed matrix (threads hold columns).
    lay = hw.ldmatrix_layout(num, trans)
    for j in range(num):
        for row in range(8):
            for col in range(8):
                r, c = (col, row) if trans else (row, col)
                lane, element = 4 * r + c // 2, 2 * j + c % 2
                assert at(lay, (j, row, col), (num, 8, 8), ("laneid", "m")) == (lane, element)
    with pytest.raises(LayoutError, match="1, 2 or 4"):
        hw.ldmatrix_layout(3)


@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_of_8_bit_elements_moves_byte_pairs(num):
    # ldmatrix .b16 moves a row of 16 bytes: thread 4*row + word holds word (four 8-bit
    # elements, lowest column lowest) of each matrix's row
    lay = hw.ldmatrix_layout(num, element_bytes=1)
    for j in range(num):
        for row in range(8):
            for col in range(16):
                lane, element = 4 * row + col // 4, 4 * j + col % 4
                assert at(lay, (j, row, col), (num, 8, 16), ("laneid", "m")) == (lane, element)
    with pytest.raises(LayoutError, match="no 8-bit form"):
        hw.ldmatrix_layout(num, True, element_bytes=1)


def test_ldmatrix_x4_delivers_the_m16n8k32_a_fragment_and_x2_a_k_major_b_fragment():
    # the PTX fragment formulas (a_i: row groupID (+8 for i in 4..7, 12..15), col tig*4 +
    # (i & 3) (+16 for i >= 8); b_i: k tig*4 + (i & 3) (+16 for i >= 4), n groupID) against
    # ldmatrix: A [16, 32] as matrices (rows 0-7 | 8-15) x (bytes 0-15 | 16-31), column
    # major over the four; B stored [N=8, K=32] as matrices of bytes 0-15 and 16-31
    ldm4 = hw.ldmatrix_layout(4, element_bytes=1)
    a = hw.mma_m16n8k32_a_layout()
    for m in range(16):
        for k in range(32):
            j, row, col = (k // 16) * 2 + m // 8, m % 8, k % 16
            assert at(a, (m, k), (16, 32), ("laneid", "m")) == \
                at(ldm4, (j, row, col), (4, 8, 16), ("laneid", "m"))
    ldm2 = hw.ldmatrix_layout(2, element_bytes=1)
    b = hw.mma_m16n8k32_b_layout()
    for k in range(32):
        for n in range(8):
            assert at(b, (k, n), (32, 8), ("laneid", "m")) == \
                at(ldm2, (k // 16, n, k % 16), (2, 8, 16), ("laneid", "m"))


def test_mma_rejects_other_dtypes():
    with pytest.raises(LayoutError):
        hw.mma_m16n8k16_a_layout("float32")
    with pytest.raises(LayoutError):
        hw.mma_m16n8k16_c_layout("int8")


# ---------------------------------------------------------------- wgmma m64nNk16

def _wgmma_ref(tid, i):
    warp, lane = divmod(tid, 32)
    group, tig = lane >> 2, lane % 4
    row = 16 * warp + group + 8 * ((i >> 1) & 1)
    col = 8 * (i >> 2) + 2 * tig + (i & 1)
    return row, col


@pytest.mark.parametrize("n", [8, 16, 24, 72, 256])
def test_wgmma_accumulator_matches_ptx(n):
    lay = hw.wgmma_acc_layout(n)
    seen = set()
    for tid in range(128):
        for i in range(n // 2):
            row, col = _wgmma_ref(tid, i)
            got = at(lay, (row, col), (64, n), ("wid_in_wg", "laneid", "m"))
            assert got == (tid // 32, tid % 32, i), (tid, i)
            seen.add((row, col))
    assert len(seen) == 64 * n


def test_wgmma_all_n_and_thread_axis_variants():
    for n in range(8, 257, 8):
        lay = hw.wgmma_m64nNk16_d_layout(n)
        assert lay.size() == 64 * n
        assert lay.size("m") == n // 2 and lay.size("laneid") == 32
        assert lay.size("wid_in_wg") == 4
    lay = hw.wgmma_acc_layout(40, warp_axis="tid_in_wg")
    for tid in range(128):
        for i in range(20):
            assert at(lay, _wgmma_ref(tid, i), (64, 40), ("tid_in_wg", "m")) == (tid, i)
    lay = hw.wgmma_acc_layout(16, warp_axis="warpid")
    assert at(lay, _wgmma_ref(70, 5), (64, 16), ("warpid", "laneid", "m")) == (2, 6, 5)
    for bad in (0, 4, 12, 264):
        with pytest.raises(LayoutError):
            hw.wgmma_acc_layout(bad)
    with pytest.raises(LayoutError):
        hw.wgmma_acc_layout(64, warp_axis="bogus")


# ---------------------------------------------------------------- warpgroup register view

def test_wg_local_layout():
    assert hw.wg_local_layout(64).equivalent(TileLayout(S[(128, 64):(1 @ tid_in_wg, 1)]))
    assert hw.wg_rf_layout(8, rows=64).equivalent(TileLayout(S[(64, 8):(1 @ tid_in_wg, 1)]))
    assert at(hw.wg_local_layout(96), (77, 95), (128, 96), ("tid_in_wg", "m")) == (77, 95)
    with pytest.raises(LayoutError):
        hw.wg_local_layout(8, rows=129)


# ---------------------------------------------------------------- shared-memory swizzles

def ref_smem_offset(r, c, R, C, eb, sl, col_major=False):
    """Element offset per the TMA/UMMA canonical layout: slabs of `swizzle` bytes (16
    without a swizzle: a column of core matrices) along the contiguous dim, each a full
    column of rows; then 16-byte chunk bits [4,4+sl) of the byte address XOR-ed with bits
    [7,7+sl)."""
    cont, other, x, y = (R, C, r, c) if col_major else (C, R, c, r)
    width = (16 << sl) // eb
    slab, xi = divmod(x, width)
    byte = (slab * other * width + y * width + xi) * eb
    if sl:
        byte ^= ((byte >> 7) & ((1 << sl) - 1)) << 4
    assert byte % eb == 0
    return byte // eb


def swz_params(lay):
    return (lay.per_element, lay.swizzle_len, lay.atom_len)


def test_smem_fp16_128b_is_compose_333():
    lay = hw.smem_layout((64, 64), "float16", SwizzleMode.B128)
    assert isinstance(lay, ComposeLayout)
    assert swz_params(lay) == (3, 3, 3)
    assert swz_params(hw.smem_layout((8, 32), "float16", SwizzleMode.B64)) == (3, 2, 3)
    assert swz_params(hw.smem_layout((8, 32), "float32", SwizzleMode.B128)) == (2, 3, 3)
    assert swz_params(hw.smem_layout((8, 64), "float8_e4m3", SwizzleMode.B32)) == (4, 1, 3)
    assert hw.smem_atom_shape("float16", SwizzleMode.B128) == (8, 64)
    assert hw.smem_atom_shape("float32", SwizzleMode.B64, contiguous_dim=-2) == (16, 8)


SMEM_CASES = [
    # shape, dtype, mode, contiguous_dim
    ((64, 64), "float16", SwizzleMode.B128, -1),
    ((24, 192), "bfloat16", SwizzleMode.B128, -1),      # 3 x 3 atoms: non-power-of-two
    ((16, 64), "float16", SwizzleMode.B64, -1),
    ((8, 48), "float16", SwizzleMode.B32, -1),          # 3 slabs of 16
    ((16, 64), "float32", SwizzleMode.B128, -1),
    ((8, 256), "float8_e4m3", SwizzleMode.B128, -1),
    ((128, 16), "float16", SwizzleMode.B128, -2),       # MN-major: M contiguous
    ((96, 24), "float16", SwizzleMode.B64, -2),
    ((8, 24), "float16", SwizzleMode.NONE, -1),
    ((64, 32), "bfloat16", SwizzleMode.NONE, -1),
    ((32, 16), "float16", SwizzleMode.NONE, -2),
]


@pytest.mark.parametrize("shape,dtype,mode,cdim", SMEM_CASES)
def test_smem_layout_matches_tma_swizzle(shape, dtype, mode, cdim):
    lay = hw.smem_layout(shape, dtype, mode, contiguous_dim=cdim)
    R, C = shape
    eb = hw.dtype_bytes(dtype)
    sl = {SwizzleMode.NONE: 0, SwizzleMode.B32: 1, SwizzleMode.B64: 2,
          SwizzleMode.B128: 3}[mode]
    addrs = set()
    for r in range(R):
        for c in range(C):
            got = lay.apply(r, c, shape=shape)["m"]
            assert got == ref_smem_offset(r, c, R, C, eb, sl, cdim == -2), (r, c)
            addrs.add(got)
    assert addrs == set(range(R * C))       # a permutation of the buffer


def test_smem_128b_rows_hit_distinct_chunks():
    """Bank-conflict freedom: in each 8-row atom the same logical 16-byte chunk of the 8
    rows lands on 8 different chunk positions of the 128-byte line."""
    lay = hw.smem_layout((32, 128), "float16", SwizzleMode.B128)
    for atom_row0 in range(0, 32, 8):
        for chunk in range(16):
            pos = {(lay.apply(atom_row0 + k, chunk * 8, shape=(32, 128))["m"] * 2 // 16) % 8
                   for k in range(8)}
            assert len(pos) == 8


def test_smem_stages_and_tma_alias():
    lay = hw.smem_layout((3, 8, 64), "float16", SwizzleMode.B128)
    for s in range(3):
        for r in (0, 5):
            for c in (0, 9, 63):
                want = s * 512 + ref_smem_offset(r, c, 8, 64, 2, 3)
                assert lay.apply(s, r, c, shape=(3, 8, 64))["m"] == want
    a = hw.tma_shared_layout("float16", SwizzleMode.B128, (128, 64))
    b = hw.smem_layout((128, 64), "float16", SwizzleMode.B128)
    assert all(a.apply(i, j, shape=(128, 64)) == b.apply(i, j, shape=(128, 64))
               for i in (0, 7, 100) for j in (0, 13, 63))


@pytest.mark.parametrize("shape,dtype,mode", [
    ((64, 48), "float16", SwizzleMode.B128),   # 48 not a multiple of the 64-wide atom
    ((12, 64), "float16", SwizzleMode.B128),   # 12 rows not a multiple of 8
    ((8, 3), "float16", SwizzleMode.NONE),     # 6 bytes: not a 16-byte multiple
    ((64,), "float16", SwizzleMode.B128),      # rank 1
    ((8, 64), 3, SwizzleMode.B128),            # 3-byte elements
    ((8, 64), "float16", "B256"),
])
def test_smem_layout_errors(shape, dtype, mode):
    with pytest.raises(LayoutError):
        hw.smem_layout(shape, dtype, mode)


def test_smem_error_explains_atom():
    with pytest.raises(LayoutError, match="8 x 64"):
        hw.smem_layout((64, 96), "float16", SwizzleMode.B128)


# ---------------------------------------------------------------- Blackwell TMEM

def test_tmem_accumulator_and_paper_multitile():
    assert hw.tmem_layout(128, 256).equivalent(TileLayout(S[(128, 256):(1 @ TLane, 1 @ TCol)]))
    paper = TileLayout(S[(2, 128, 112):(112 @ TCol, 1 @ TLane, 1 @ TCol)])
    lay = hw.tmem_layout(128, 112, tiles=2)
    assert lay.equivalent(paper)
    assert at(lay, (1, 5, 7), (2, 128, 112), ("TLane", "TCol")) == (5, 119)


def test_tmem_offsets_granule_and_limits():
    lay = hw.tmem_layout(64, 48, lane_offset=64, col_offset=256, col_granule=16)
    assert at(lay, (3, 4), (64, 48), ("TLane", "TCol")) == (67, 260)
    hw.tmem_layout(128, 512)
    for kwargs in (dict(rows=129, cols=8), dict(rows=128, cols=513),
                   dict(rows=128, cols=112, tiles=5), dict(rows=64, cols=8, lane_offset=65),
                   dict(rows=128, cols=120, col_granule=16),
                   dict(rows=128, cols=500, col_offset=16)):
        with pytest.raises(LayoutError):
            hw.tmem_layout(**kwargs)


def test_tmem_datapaths():
    n = 96
    d = hw.tmem_datapath_layout("D", n)
    assert at(d, (100, 95), (128, n), ("TLane", "TCol")) == (100, 95)
    f = hw.tmem_datapath_layout("F", n)
    e = hw.tmem_datapath_layout("E", n)
    g = hw.tmem_datapath_layout("G", n)
    f16 = hw.tmem_datapath_layout("F", n, lane_offset=16)
    for r in range(64):
        for c in (0, 47, 48, 95):
            assert at(f, (r, c), (64, n), ("TLane", "TCol")) == ((r // 16) * 32 + r % 16, c)
            assert at(f16, (r, c), (64, n), ("TLane", "TCol")) == \
                ((r // 16) * 32 + r % 16 + 16, c)
            assert at(e, (r, c), (64, n), ("TLane", "TCol")) == (r + 64 * (c // 48), c % 48)
    for r in range(32):
        for c in range(0, n, 7):
            assert at(g, (r, c), (32, n), ("TLane", "TCol")) == (r + 32 * (c // 24), c % 24)
    with pytest.raises(LayoutError):
        hw.tmem_datapath_layout("E", 7)
    with pytest.raises(LayoutError):
        hw.tmem_datapath_layout("F", 8, lane_offset=8)
    with pytest.raises(LayoutError):
        hw.tmem_datapath_layout("Z", 8)


def test_tmem_scale_factors_replicated_to_all_lane_slabs():
    lay = hw.tmem_scale_factor_layout(4)
    locs = lay.locations(5, 3, shape=(32, 4))
    assert sorted((l["TLane"], l["TCol"]) for l in locs) == [(5, 3), (37, 3), (69, 3), (101, 3)]
    ref = TileLayout(S[(32, 4):(1 @ TLane, 1 @ TCol)] + R[4:32 @ TLane])
    assert lay.equivalent(ref)


# ---------------------------------------------------------------- Trainium SBUF / PSUM

def test_sbuf_paper_example_and_non_pow2():
    paper = TileLayout(S[(2, 128, 512):(512 @ F, 1 @ P, 1 @ F)])
    assert hw.sbuf_layout((256, 512)).equivalent(paper)
    assert hw.sbuf_layout((128, 300)).equivalent(TileLayout(S[(128, 300):(1 @ P, 1 @ F)]))
    lay = hw.sbuf_layout((384, 7))                      # 3 x 128 partitions
    for p in (0, 127, 128, 200, 383):
        for f in (0, 6):
            assert at(lay, (p, f), (384, 7), ("P", "F")) == (p % 128, (p // 128) * 7 + f)
    lay = hw.sbuf_layout((200, 3))                      # 2 x 100
    assert at(lay, (150, 2), (200, 3), ("P", "F")) == (50, 5)
    assert lay.size("P") == 100


def test_sbuf_partition_dim_offsets_and_split():
    lay = hw.sbuf_layout((4, 96, 10), partition_dim=1)
    assert at(lay, (3, 50, 9), (4, 96, 10), ("P", "F")) == (50, 39)
    lay = hw.sbuf_layout((4, 256, 10), partition_dim=-2, num_partitions=64)
    assert at(lay, (1, 130, 2), (4, 256, 10), ("P", "F")) == (2, 1 * 40 + 2 * 10 + 2)
    lay = hw.sbuf_layout((32, 16), partition_offset=32, free_offset=100)
    assert at(lay, (1, 2), (32, 16), ("P", "F")) == (33, 102)


def test_psum_and_trainium_errors():
    assert hw.psum_layout((128, 512)).equivalent(TileLayout(S[(128, 512):(1 @ P, 1 @ F)]))
    hw.psum_layout((128, 4096))                         # 16 KiB per partition: fits
    # P x Bank x F: whole 2 KiB banks on Bank, F inside one (512 f32, 1024 bf16)
    assert hw.psum_layout((128, 1024)).equivalent(
        TileLayout.parse("(128,2,512):(1@P,1@Bank,1@F)"))
    assert hw.psum_layout((128, 4, 512)).equivalent(
        TileLayout.parse("(128,4,512):(1@P,1@Bank,1@F)"))
    assert hw.psum_layout((128, 2048), dtype="bfloat16").equivalent(
        TileLayout.parse("(128,2,1024):(1@P,1@Bank,1@F)"))
    assert hw.psum_layout((128, 768)).equivalent(TileLayout(S[(128, 768):(1 @ P, 1 @ F)]))
    bad = [
        lambda: hw.psum_layout((128, 4097)),            # > 16 KiB of fp32 per partition
        lambda: hw.sbuf_layout((128, 50000), dtype="float32"),   # > 192 KiB
        lambda: hw.sbuf_layout((131, 4)),               # prime > 128: no even split
        lambda: hw.sbuf_layout((96, 4), num_partitions=64),      # 96 % 64 != 0
        lambda: hw.sbuf_layout((64, 4), partition_offset=100),   # 164 partitions
        lambda: hw.sbuf_layout((4, 4), partition_dim=2),
        lambda: hw.sbuf_layout(()),
    ]
    for fn in bad:
        with pytest.raises(LayoutError):
            fn()


def test_dtype_bytes():
    assert hw.dtype_bytes("float16") == 2 and hw.dtype_bytes("bf16") == 2
    assert hw.dtype_bytes("torch.float32") == 4 and hw.dtype_bytes(8) == 8
    with pytest.raises(LayoutError):
        hw.dtype_bytes("float7")


def test_constructed_layouts_print_and_parse():
    layouts = [
        hw.mma_m16n8k16_a_layout(), hw.wgmma_acc_layout(72),
        hw.tmem_layout(128, 112, tiles=2, col_offset=8),
        hw.tmem_datapath_layout("F", 64, lane_offset=16), hw.tmem_scale_factor_layout(4),
        hw.sbuf_layout((4, 96, 10), partition_dim=1, free_offset=3), hw.wg_local_layout(64),
        hw.smem_layout((3, 64, 128), "float16", SwizzleMode.B128),
    ]
    for lay in layouts:
        assert tl.parse_layout(str(lay)) == lay
    assert str(hw.sbuf_layout((256, 512))) == "(2,128,512):(512@F,1@P,1@F)"
    # every logical dim owns whole iters (what TMA / gemm dispatch groups by)
    hw.smem_layout((64, 128), "float16").tile_layout.group((64, 128))
    hw.wgmma_acc_layout(64).group((64, 64))


def test_unswizzled_tiles_store_each_core_matrix_contiguously():
    """wgmma's view without a swizzle: 8 rows x 16 bytes, one contiguous 128-byte block
    (a plain row-major 64 x 32 f16 tile puts its rows 64 bytes apart)."""
    shape = (64, 32)
    lay = hw.smem_layout(shape, "float16", SwizzleMode.NONE)
    for r0 in range(0, 64, 8):
        for c0 in range(0, 32, 8):
            block = sorted(lay.apply(r, c, shape=shape)["m"] for r in range(r0, r0 + 8)
                           for c in range(c0, c0 + 8))
            assert block == list(range(block[0], block[0] + 64)) and block[0] % 64 == 0
            assert lay.apply(r0 + 1, c0, shape=shape)["m"] == block[0] + 8   # rows 16 B apart


@pytest.mark.parametrize("m, n", [(64, 8), (128, 64), (192, 24)])
def test_wgmma_accumulator_layout_stacks_m64_blocks(m, n):
    """Element by element against the PTX ISA's D fragment of m64nNk16 (d_i of warp w, lane
    l: row 16w + l/4 + 8*((i >> 1) & 1), column 8*(i >> 2) + 2*(l % 4) + (i & 1)), row
    block b of M / 64 in registers b * N / 2 + i."""
    lay = hw.wgmma_accumulator_layout((m, n))
    for block in range(m // 64):
        for warp in range(4):
            for lane in range(32):
                for i in range(n // 2):
                    row = 64 * block + 16 * warp + lane // 4 + 8 * ((i >> 1) & 1)
                    col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
                    place = lay.apply(row * n + col)
                    assert place == {"wid_in_wg": warp, "laneid": lane,
                                     "m": block * n // 2 + i}, (row, col)
    with pytest.raises(LayoutError, match="M = 96 is not a multiple of 64"):
        hw.wgmma_accumulator_layout((96, 8))


@pytest.mark.parametrize("m, k", [(64, 16), (64, 64), (128, 32), (192, 48)])
def test_wgmma_a_register_layout_matches_ptx(m, k):
    """Element by element against the PTX ISA's register A fragment of m64nNk16 (a_i of
    warp w, lane l, i in 0..7: row 16w + l/4 + 8*((i >> 1) & 1), column 2*(l % 4) + (i & 1)
    + 8*(i >> 2)), k-step s of row block b in elements 8 * (b * K / 16 + s) + i; and the
    same layout as the m64nK accumulator (a converted accumulator is an A fragment)."""
    lay = hw.wgmma_a_register_layout((m, k))
    seen = set()
    for block in range(m // 64):
        for step in range(k // 16):
            for warp in range(4):
                for lane in range(32):
                    for i in range(8):
                        row = 64 * block + 16 * warp + lane // 4 + 8 * ((i >> 1) & 1)
                        col = 16 * step + 2 * (lane % 4) + (i & 1) + 8 * (i >> 2)
                        place = lay.apply(row * k + col)
                        assert place == {"wid_in_wg": warp, "laneid": lane,
                                         "m": 8 * (block * k // 16 + step) + i}, (row, col)
                        seen.add((row, col))
    assert len(seen) == m * k
    assert lay.equivalent(hw.wgmma_accumulator_layout((m, k)))


def test_wgmma_a_register_layout_refuses_what_the_isa_lacks():
    with pytest.raises(LayoutError, match="K = 24 is not a multiple of 16"):
        hw.wgmma_a_register_layout((64, 24))
    with pytest.raises(LayoutError):
        hw.wgmma_a_register_layout((64, 32), "float8_e4m3")
    with pytest.raises(LayoutError, match="M = 32 is out of range"):
        hw.wgmma_a_register_layout((32, 16))
