"""NVIDIA hardware layout constructors (Ampere mma.sync, Hopper wgmma/TMA, Blackwell TMEM).

Every constructor returns a :class:`TileLayout` (or a :class:`ComposeLayout` for swizzled
shared memory) over the named axes of SPEC §2. The facts each one encodes, and where they
come from, are stated in its docstring; ``tests/layout/test_hardware.py`` enumerates every
element against the vendor formula.

Conventions
-----------
* Register fragments use ``m`` for the *element* index inside the thread (the PTX
  fragment element ``a_i`` / ``c_i`` / ``d_i``), not the 32-bit register number; for packed
  16-bit types the register is ``m // 2``.
* ``TCol`` counts 32-bit TMEM columns, ``TLane`` TMEM lanes (data-path rows).
* Shared memory ``m`` counts elements from the (suitably aligned) buffer base.
"""
from __future__ import annotations

from ..errors import LayoutError
from .axes import Axis
from .swizzle import ComposeLayout, SwizzleMode
from .tile_layout import Iter, TileLayout

__all__ = [
    "dtype_bytes",
    "smem_atom_shape", "smem_layout", "tma_shared_layout",
    "mma_m16n8k16_a_layout", "mma_m16n8k16_b_layout", "mma_m16n8k16_c_layout",
    "mma_m16n8k32_a_layout", "mma_m16n8k32_b_layout",
    "ldmatrix_layout",
    "wgmma_a_register_layout", "wgmma_acc_layout", "wgmma_accumulator_layout",
    "wgmma_m64nNk16_d_layout",
    "wg_local_layout", "wg_rf_layout",
    "TMEM_LANES", "TMEM_COLS", "tmem_layout", "tmem_datapath_layout",
    "tmem_scale_factor_layout",
]

TMEM_LANES = 128
TMEM_COLS = 512

# ----------------------------------------------------------------------------- helpers

_DTYPE_BYTES = {
    "float16": 2, "fp16": 2, "f16": 2, "half": 2,
    "bfloat16": 2, "bf16": 2,
    "float32": 4, "fp32": 4, "f32": 4, "float": 4, "tf32": 4,
    "float64": 8, "fp64": 8, "f64": 8, "double": 8,
    "float8_e4m3": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "e4m3": 1, "e5m2": 1, "fp8": 1,
    "f8e4m3": 1, "f8e5m2": 1,
    "int8": 1, "uint8": 1, "s8": 1, "u8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "s32": 4,
    "int64": 8, "uint64": 8,
}
_CANON = {"fp16": "float16", "f16": "float16", "half": "float16", "bf16": "bfloat16",
          "fp32": "float32", "f32": "float32", "float": "float32", "s32": "int32",
          "f8e4m3": "float8_e4m3", "e4m3": "float8_e4m3", "float8_e4m3fn": "float8_e4m3",
          "f8e5m2": "float8_e5m2", "e5m2": "float8_e5m2"}


def _dtype_name(dtype) -> str | None:
    if isinstance(dtype, str):
        name = dtype
    else:
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            name = str(dtype)
    name = name.strip().lower()
    for prefix in ("torch.", "numpy.", "np.", "tj.", "tilejit."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = _CANON.get(name, name)
    return name if name in _DTYPE_BYTES else None


def dtype_bytes(dtype) -> int:
    """Element size in bytes of ``dtype``: an int (bytes), a name ("float16", "bf16",
    "torch.float32", ...) or an object with ``itemsize`` (numpy/torch dtypes)."""
    if isinstance(dtype, bool):
        raise LayoutError(f"not a dtype: {dtype!r}")
    if isinstance(dtype, int):
        if dtype <= 0:
            raise LayoutError(f"element size must be a positive number of bytes, got {dtype}")
        return dtype
    for attr in ("itemsize", "nbytes"):
        v = getattr(dtype, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    bits = getattr(dtype, "bits", None)
    if isinstance(bits, int) and bits > 0 and bits % 8 == 0:
        return bits // 8
    name = _dtype_name(dtype)
    if name is None:
        raise LayoutError(f"unknown dtype {dtype!r}; pass a dtype name or its size in bytes")
    return _DTYPE_BYTES[name]


def _layout(iters, replica=(), offset=None):
    """Build a TileLayout from ``(extent, stride, axis_name)`` triples."""
    def mk(triples):
        return [Iter(int(e), int(s), Axis(a)) for (e, s, a) in triples]

    off = {k: int(v) for k, v in (offset or {}).items() if v}
    return TileLayout.from_iters(mk(iters), replica=mk(replica), offset=off)


def _check_int(name, v, lo=1, hi=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise LayoutError(f"{name} must be an int, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise LayoutError(f"{name} = {v} is out of range {rng}")


def _swizzle_len(swizzle) -> int:
    """0/1/2/3 for SwizzleMode NONE/B32/B64/B128 (also accepts ints, bytes, names)."""
    v = getattr(swizzle, "value", swizzle)
    if isinstance(v, str):
        key = v.strip().upper().replace("SWIZZLE_", "").replace("_ATOM", "")
        table = {"NONE": 0, "0": 0, "B32": 1, "32B": 1, "32": 1, "B64": 2, "64B": 2, "64": 2,
                 "B128": 3, "128B": 3, "128": 3}
        if key in table:
            return table[key]
        name = getattr(swizzle, "name", None)
        if isinstance(name, str) and name.upper() in table:
            return table[name.upper()]
    if isinstance(v, int) and not isinstance(v, bool):
        if v in (0, 1, 2, 3):
            return v
        if v in (32, 64, 128):
            return {32: 1, 64: 2, 128: 3}[v]
    name = getattr(swizzle, "name", None)
    if isinstance(name, str):
        return _swizzle_len(name)
    raise LayoutError(f"unknown swizzle mode {swizzle!r}; use SwizzleMode.NONE/B32/B64/B128")


# ----------------------------------------------------------------------------- shared memory

def smem_atom_shape(dtype, swizzle=SwizzleMode.B128, contiguous_dim: int = -1) -> tuple[int, int]:
    """Shape (in elements) of one swizzle atom of a 2-D shared-memory tile.

    PTX ISA §9.7.16.10.6 (tcgen05 "Shared Memory Layout and Swizzling", Table 53; the same
    canonical layouts as wgmma): an atom is 8 rows of ``swizzle`` bytes along the
    contiguous ("leading") dimension — 8x8 / 8x4 / 8x2 16-byte units for 128B / 64B / 32B
    K-major, transposed for MN-major; the byte width is ``16 * 2**swizzle_len``. Without a
    swizzle the atom is 8 rows of one 16-byte unit.
    """
    sl = _swizzle_len(swizzle)
    eb = dtype_bytes(dtype)
    if eb > 16 or 16 % eb:
        raise LayoutError(f"{eb}-byte elements do not pack into 16-byte shared-memory units")
    width = (16 << sl) // eb
    return (8, width) if contiguous_dim in (-1, 1) else (width, 8)


def smem_layout(shape, dtype, swizzle=SwizzleMode.B128, *, contiguous_dim: int = -1):
    """Canonical TMA / wgmma / tcgen05 shared-memory layout of a tile: a ``ComposeLayout``.

    ``shape`` is ``(*lead, R, C)`` (``lead`` e.g. pipeline stages, each stage a contiguous
    ``R*C`` block). ``contiguous_dim=-1``: ``C`` is contiguous (K-major for an ``(M, K)`` A or
    ``(N, K)`` B tile); ``contiguous_dim=-2``: ``R`` is contiguous (MN-major ``(M, K)`` tile).

    Layout (K-major; MN-major is the transpose): the contiguous extent is cut into slabs
    of ``W = swizzle_bytes / elem_bytes`` elements, each slab is the full ``R x W`` block
    stored row after row (one TMA box of inner extent ``W``), slabs follow each other.
    On the resulting element offset ``m`` the XOR swizzle of SPEC §2 is applied with
    ``per_element = log2(16 / elem_bytes)`` (16-byte chunks), ``swizzle_len`` = 1/2/3 and
    ``atom_len = 3``: byte address bits [4, 4+len) ^= bits [7, 7+len) — the 16-byte chunk
    index within a ``swizzle``-byte row is XORed with the row index (128B: ``row % 8``,
    64B: ``(row // 2) % 4``, 32B: ``(row // 4) % 2``), i.e. CuTe ``Swizzle<len,4,3>`` on
    bytes, as CUDA ``CU_TENSOR_MAP_SWIZZLE_{32,64,128}B`` ("swizzles 16-byte chunks within
    a 32/64/128-byte span"). fp16 128B gives ``ComposeLayout(3, 3, 3, ...)``.
    The buffer base must be aligned to the swizzle period (256/512/1024 bytes).

    ``SwizzleMode.NONE`` (``swizzle_len = 0``) cuts the contiguous extent into slabs of
    16 bytes the same way: wgmma and tcgen05 read an unswizzled operand as core matrices
    of 8 rows x 16 bytes, each stored contiguously (PTX ISA "Shared Memory Matrix
    Layout"), which a plain row-major tile with rows wider than 16 bytes is not; a slab
    is a column of them (the next core matrix along the rows 128 bytes on, along the
    contiguous dim one slab on). The contiguous extent must be a multiple of 16 bytes. Non-power-of-two numbers of
    atoms (e.g. 24 rows, or 3 slabs) are fine; shapes that are not whole atoms raise.
    """
    shape = tuple(shape)
    if len(shape) < 2:
        raise LayoutError(f"smem_layout needs a shape of rank >= 2, got {shape}")
    for i, d in enumerate(shape):
        _check_int(f"shape[{i}]", d)
    cd = contiguous_dim + len(shape) if isinstance(contiguous_dim, int) and \
        contiguous_dim < 0 else contiguous_dim
    if cd not in (len(shape) - 1, len(shape) - 2):
        raise LayoutError(f"contiguous_dim must be -1 (last dim contiguous) or -2, got "
                          f"{contiguous_dim!r}")
    col_major = cd == len(shape) - 2
    sl = _swizzle_len(swizzle)
    eb = dtype_bytes(dtype)
    if eb > 16 or 16 % eb:
        raise LayoutError(f"{eb}-byte elements do not pack into 16-byte shared-memory units")
    per_elem = (16 // eb).bit_length() - 1
    *lead, R, C = shape
    cont, other = (R, C) if col_major else (C, R)   # contiguous extent, strided extent
    width = (16 << sl) // eb
    if sl == 0:
        if (cont * eb) % 16:
            raise LayoutError(
                f"unswizzled shared-memory tile: the contiguous extent {cont} x {eb} B = "
                f"{cont * eb} B is not a multiple of 16 bytes (TMA box requirement)")
        slabs = cont // width   # slabs of one 16-byte chunk: the core matrices
    else:
        if cont % width or other % 8:
            raise LayoutError(
                f"{16 << sl}B-swizzled shared-memory tile {tuple(shape)} of {eb}-byte "
                f"elements: the swizzle atom is {8} x {width} elements (8 rows of "
                f"{16 << sl} bytes); the contiguous extent {cont} must be a multiple of "
                f"{width} and the other extent {other} a multiple of 8")
        slabs = cont // width
    # strided dimension first ("rows" of `width` contiguous elements), then slabs.
    rows = [(other, width, "m")]
    cols = ([(slabs, other * width, "m")] if slabs > 1 else []) + [(width, 1, "m")]
    tile = R * C
    lead_iters, stride = [], tile
    for d in reversed(lead):
        lead_iters.insert(0, (d, stride, "m"))
        stride *= d
    if col_major:       # logical (R, C) with R contiguous: R -> slab iters, C -> rows
        iters = lead_iters + cols + rows
    else:
        iters = lead_iters + rows + cols
    return ComposeLayout(per_elem, sl, 3, _layout(iters))


def tma_shared_layout(dtype, swizzle, shape, *, contiguous_dim: int = -1):
    """TIRx spelling (seed 002): ``tma_shared_layout(dtype, mode, shape)`` = :func:`smem_layout`."""
    return smem_layout(shape, dtype, swizzle, contiguous_dim=contiguous_dim)


# ----------------------------------------------------------------------------- mma.sync

def _require(dtype, allowed, what):
    name = _dtype_name(dtype)
    if name not in allowed:
        raise LayoutError(f"{what}: dtype {dtype!r} not supported (supported: "
                          f"{', '.join(sorted(allowed))}); other types use other fragment "
                          f"layouts in the PTX ISA")
    return name


def mma_m16n8k16_a_layout(dtype="float16"):
    """Fragment of A (16x16, row-major M x K) of ``mma.sync.m16n8k16`` for f16/bf16.

    PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type" (Figure 79):
    groupID = laneid >> 2, tig = laneid % 4; a_i row = groupID (+8 for i in {2,3,6,7}),
    col = tig*2 + (i & 1) (+8 for i >= 4). So with i = 4*kh + 2*hi + lo:
    ``(16,16) = (2,8 | 2,4,2):(2@m,4@laneid | 4@m,1@laneid,1@m)``.
    """
    _require(dtype, {"float16", "bfloat16"}, "mma_m16n8k16_a_layout")
    return _layout([(2, 2, "m"), (8, 4, "laneid"), (2, 4, "m"), (4, 1, "laneid"), (2, 1, "m")])


def mma_m16n8k16_b_layout(dtype="float16"):
    """Fragment of B (16x8, K x N) of ``mma.sync.m16n8k16`` for f16/bf16.

    PTX ISA (Figure 81): b_i row = tig*2 + (i & 1) (+8 for i >= 2), col = groupID.
    ``(16,8) = (2,4,2 | 8):(2@m,1@laneid,1@m | 4@laneid)``.
    """
    _require(dtype, {"float16", "bfloat16"}, "mma_m16n8k16_b_layout")
    return _layout([(2, 2, "m"), (4, 1, "laneid"), (2, 1, "m"), (8, 4, "laneid")])


def mma_m16n8k16_c_layout(dtype="float32"):
    """Accumulator C/D (16x8) of ``mma.sync.m16n8k16`` (f32, or f16 as two f16x2 regs).

    PTX ISA (Figure 83): c_i row = groupID (+8 for i >= 2), col = tig*2 + (i & 1).
    ``(16,8) = (2,8 | 4,2):(2@m,4@laneid | 1@laneid,1@m)``; ``m`` is the element index
    c0..c3 for both f32 and f16 accumulators.
    """
    _require(dtype, {"float32", "float16"}, "mma_m16n8k16_c_layout")
    return _layout([(2, 2, "m"), (8, 4, "laneid"), (4, 1, "laneid"), (2, 1, "m")])


_FP8 = {"float8_e4m3", "float8_e5m2"}


def mma_m16n8k32_a_layout(dtype="float8_e4m3"):
    """Fragment of A (16x32, row-major M x K) of ``mma.sync.m16n8k32`` for 8-bit floats
    (e4m3, e5m2), four elements to a 32-bit register.

    PTX ISA "Matrix Fragments for mma.m16n8k32" (the .e4m3/.e5m2/.s8/.u8 figure): a_i row
    = groupID (+8 for i in 4..7 and 12..15), col = tig*4 + (i & 3) (+16 for i >= 8). So
    with i = 8*kh + 4*hi + lo:
    ``(16,32) = (2,8 | 2,4,4):(4@m,4@laneid | 8@m,1@laneid,1@m)``.
    """
    _require(dtype, _FP8, "mma_m16n8k32_a_layout")
    return _layout([(2, 4, "m"), (8, 4, "laneid"), (2, 8, "m"), (4, 1, "laneid"), (4, 1, "m")])


def mma_m16n8k32_b_layout(dtype="float8_e4m3"):
    """Fragment of B (32x8, K x N) of ``mma.sync.m16n8k32`` for 8-bit floats.

    PTX ISA (same section): b_i row = tig*4 + (i & 3) (+16 for i >= 4), col = groupID.
    ``(32,8) = (2,4,4 | 8):(4@m,1@laneid,1@m | 4@laneid)``. C and D are laid out as for
    m16n8k16 (:func:`mma_m16n8k16_c_layout`).
    """
    _require(dtype, _FP8, "mma_m16n8k32_b_layout")
    return _layout([(2, 4, "m"), (4, 1, "laneid"), (4, 1, "m"), (8, 4, "laneid")])


LDMATRIX_NUMS = (1, 2, 4)


def ldmatrix_layout(num: int = 4, trans: bool = False, element_bytes: int = 2):
    """Where ``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.b16`` puts the elements it loads:
    shape ``(num, 8, 16 // element_bytes)`` (matrix, stored row, stored column) ->
    ``laneid`` and ``m``, the element index in the lane's results (the 32-bit register is
    ``m // (4 // element_bytes)``).

    PTX ISA "ldmatrix": lane ``8*j + r`` supplies the address of row ``r`` of matrix ``j``
    (16 consecutive bytes: eight 16-bit elements); the lane's register ``j`` holds two
    adjacent 16-bit elements. Without ``.trans`` lane ``4*r + c // 2`` gets row ``r``,
    columns ``c`` (low half, ``c`` even) and ``c + 1``: ``(num,8,4,2):(2@m,4@laneid,1@laneid,1@m)``.
    With ``.trans`` each matrix is delivered transposed: lane ``4*c + r // 2`` gets column
    ``c``, rows ``r`` and ``r + 1``: ``(num,4,2,8):(2@m,1@laneid,1@m,4@laneid)``.

    8-bit elements (``element_bytes=1``): the instruction moves bytes in pairs, so a row is
    16 elements and lane ``4*r + c // 4`` gets row ``r``, columns ``c .. c + 3`` (``c`` a
    multiple of 4) in one register, lowest column in the lowest byte:
    ``(num,8,4,4):(4@m,4@laneid,1@laneid,1@m)``. ``.trans`` would transpose byte pairs, not
    elements: it has no 8-bit form.
    """
    if num not in LDMATRIX_NUMS:
        raise LayoutError(f"ldmatrix loads 1, 2 or 4 matrices, not {num!r}")
    if element_bytes not in (1, 2):
        raise LayoutError(f"ldmatrix moves 8- or 16-bit elements, not {element_bytes}-byte ones")
    if trans and element_bytes != 2:
        raise LayoutError("ldmatrix .trans transposes 16-bit elements: it has no 8-bit form")
    if trans:
        return _layout([(num, 2, "m"), (4, 1, "laneid"), (2, 1, "m"), (8, 4, "laneid")])
    per_register = 4 // element_bytes
    return _layout([(num, per_register, "m"), (8, 4, "laneid"), (4, 1, "laneid"),
                    (per_register, 1, "m")])


# ----------------------------------------------------------------------------- wgmma

_WARP_AXES = ("wid_in_wg", "warpid", "tid_in_wg")


def wgmma_acc_layout(n: int, dtype="float32", *, warp_axis: str = "wid_in_wg"):
    """Accumulator D (64 x N) of Hopper ``wgmma.mma_async.m64nNk16`` over one warpgroup.

    PTX ISA "Asynchronous Warpgroup Level Matrix Register Fragment", Figure 149 (WGMMA
    .m64nNk16 register fragment layout for accumulator D; N = 8*i, i = 1..32, N/2 f32
    registers d0..d(N/2-1)); the same as CUTLASS ``CLayout_64xN``: warp w owns rows
    16w..16w+15; d_i row = 16*w + groupID + 8*((i >> 1) & 1),
    col = 8*(i >> 2) + 2*tig + (i & 1). Result:
    ``(64,N) = (4,2,8 | N/8,4,2):(1@W,2@m,4@laneid | 4@m,1@laneid,1@m)`` with ``W`` =
    ``warp_axis`` ("wid_in_wg" default, or "warpid" for warpgroup 0). With
    ``warp_axis="tid_in_wg"`` lane and warp fold into one thread axis (warp stride 32).
    """
    _check_int("N", n, 8, 256)
    if n % 8:
        raise LayoutError(f"wgmma m64nNk16: N = {n} must be a multiple of 8 in [8, 256]")
    _require(dtype, {"float32", "float16", "int32"}, "wgmma_acc_layout")
    if warp_axis not in _WARP_AXES:
        raise LayoutError(f"warp_axis must be one of {_WARP_AXES}, got {warp_axis!r}")
    if warp_axis == "tid_in_wg":
        w, lane_s, lane = (32, "tid_in_wg"), 1, "tid_in_wg"
    else:
        w, lane_s, lane = (1, warp_axis), 1, "laneid"
    iters = [(4, w[0], w[1]), (2, 2, "m"), (8, 4 * lane_s, lane)]
    if n > 8:
        iters.append((n // 8, 4, "m"))
    iters += [(4, lane_s, lane), (2, 1, "m")]
    return _layout(iters)


def wgmma_accumulator_layout(shape, *, warp_axis: str = "wid_in_wg"):
    """The f32 accumulator of an (M, N) tile one warpgroup computes with m64nNk16 wgmma, M a
    multiple of 64: M / 64 row blocks, each :func:`wgmma_acc_layout` ``(N)``, block ``b`` in
    the registers from ``m = b * N / 2`` on (each thread's N / 2 values of a block follow
    one another: one wgmma's accumulators)."""
    m, n = shape
    _check_int("M", m, 64)
    if m % 64:
        raise LayoutError(f"wgmma accumulator: M = {m} is not a multiple of 64 (m64nNk16)")
    block = wgmma_acc_layout(n, warp_axis=warp_axis)
    if m == 64:
        return block
    return TileLayout.from_iters((Iter(m // 64, n // 2, Axis("m")), *block.shard))


def wgmma_a_register_layout(shape, dtype="float16", *, warp_axis: str = "wid_in_wg"):
    """Matrix A (M x K) of ``wgmma.mma_async.m64nNk16`` read from registers (f16 / bf16),
    M a multiple of 64 and K of 16: per 64 rows and k-step, each thread holds four 32-bit
    registers a0..a3, eight elements ``m``.

    PTX ISA 9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16" (multiplicand A
    in registers: four .f16x2 registers, a0..a7; Figure 148 "WGMMA .m64nNk16 register
    fragment layout for matrix A"): warp w owns rows 16w..16w+15; a_i
    row = 16*w + groupID + 8*((i >> 1) & 1), col = 2*tig + (i & 1) + 8*(i >> 2) (groupID =
    laneid >> 2, tig = laneid % 4) -- the accumulator's mapping of a 64 x 16 D
    (:func:`wgmma_acc_layout` ``(16)``). Row block ``b`` and k-step ``s`` keep their
    elements from ``m = 8 * (b * K / 16 + s)`` on, so the layout *is*
    :func:`wgmma_accumulator_layout` ``((M, K))``: a thread's accumulator values of an
    m64nN wgmma, converted to 16 bits, are already its A fragment of an m64nKk16 one
    (the FlashAttention ``P @ V``, P never leaving the registers)."""
    m, k = shape
    _require(dtype, {"float16", "bfloat16"}, "wgmma_a_register_layout")
    _check_int("K", k, 16, 256)
    if k % 16:
        raise LayoutError(f"wgmma A in registers: K = {k} is not a multiple of 16 (m64nNk16)")
    return wgmma_accumulator_layout((m, k), warp_axis=warp_axis)


def wgmma_m64nNk16_d_layout(n: int, dtype="float32", *, warp_axis: str = "wid_in_wg"):
    """Alias of :func:`wgmma_acc_layout`."""
    return wgmma_acc_layout(n, dtype, warp_axis=warp_axis)


def wg_local_layout(cols: int, rows: int = 128):
    """Warpgroup-local register view ``(rows, cols):(1@tid_in_wg, 1@m)``.

    Meaning as in TIRx (seed 002 writes ``TileLayout(S[(128, BLK_N):(1@tid_in_wg, 1)])``
    for ``Dreg.view``; the paper's FA-4 ``wg_rf_layout(cols)``; TIRx's
    ``wg_local_layout(cols, rows=128)``): thread ``t`` of the warpgroup owns row ``t`` and
    keeps its ``cols`` elements in registers ``m = 0..cols-1``. With the Blackwell M=128
    accumulator (TMEM layout D, lane = row) this is exactly what ``tcgen05.ld.32x32b``
    delivers: warp w reads TMEM lanes 32w..32w+31, lane l gets lane 32w+l, one 32-bit
    column per register.
    """
    _check_int("rows", rows, 1, 128)
    _check_int("cols", cols)
    return _layout([(rows, 1, "tid_in_wg"), (cols, 1, "m")])


wg_rf_layout = wg_local_layout


# ----------------------------------------------------------------------------- TMEM

def _tmem_check(rows, cols_span, lane_offset, col_offset):
    _check_int("lane_offset", lane_offset, 0)
    _check_int("col_offset", col_offset, 0)
    if lane_offset + rows > TMEM_LANES:
        raise LayoutError(f"TMEM has {TMEM_LANES} lanes: rows {rows} + lane_offset "
                          f"{lane_offset} exceeds it")
    if col_offset + cols_span > TMEM_COLS:
        raise LayoutError(f"TMEM has {TMEM_COLS} 32-bit columns: {cols_span} columns + "
                          f"col_offset {col_offset} exceeds it")


def tmem_layout(rows: int, cols: int, *, tiles: int = 1, lane_offset: int = 0,
                col_offset: int = 0, col_granule: int = 1):
    """Blackwell tensor memory: logical row -> ``TLane``, column -> ``TCol`` (32-bit cells).

    TMEM is 128 lanes x 512 columns of 32-bit cells per CTA (PTX ISA §9.7.16 "Tensor
    Memory"). ``tiles == 1``: ``(rows, cols):(1@TLane, 1@TCol)``; ``tiles > 1``: logical
    ``(tiles, rows, cols):(cols@TCol, 1@TLane, 1@TCol)`` (the paper's
    ``(2,128,112):(112@TCol,1@TLane,1@TCol)``). Any column count works (112 is fine);
    ``col_granule`` optionally demands a multiple (e.g. 8 or 16 for an MMA N, 32 for an
    allocation unit). Raises when lanes exceed 128 or columns exceed 512.
    """
    _check_int("rows", rows, 1, TMEM_LANES)
    _check_int("cols", cols)
    _check_int("tiles", tiles)
    _check_int("col_granule", col_granule)
    if cols % col_granule:
        raise LayoutError(f"TMEM column count {cols} is not a multiple of the granule "
                          f"{col_granule}")
    _tmem_check(rows, tiles * cols, lane_offset, col_offset)
    iters = ([(tiles, cols, "TCol")] if tiles > 1 else []) + [(rows, 1, "TLane"),
                                                                (cols, 1, "TCol")]
    return _layout(iters, offset={"TLane": lane_offset, "TCol": col_offset})


_DATAPATH_ROWS = {"A": 128, "B": 64, "C": 64, "D": 128, "E": 64, "F": 64, "G": 32}


def tmem_datapath_layout(datapath: str, cols: int, *, lane_offset: int = 0,
                         col_offset: int = 0):
    """Per-CTA TMEM layout written by a ``tcgen05.mma`` data path (PTX ISA §9.7.16.10.5).

    "A" (M=256, cta_group::2) and "D" (M=128, cta_group::1): 128 rows, row r -> lane r.
    "B" (M=128 cta_group::2 dense) and "E" (M=64 .ws): 64 rows, column halves folded over
    the two 64-lane halves: ``(64, 2, cols/2):(1@TLane, 64@TLane, 1@TCol)``.
    "C" (M=128 cta_group::2 sparse) and "F" (M=64): 64 rows, 16 per warp slab, half the
    data path (lane alignment 0 or 16): ``(4, 16, cols):(32@TLane, 1@TLane, 1@TCol)``.
    "G" (M=32 .ws): column quarters over the four 32-lane slabs:
    ``(32, 4, cols/4):(1@TLane, 32@TLane, 1@TCol)``.
    (Per-lane placement from the PTX figures as tabulated by CUTLASS's SM100 TMEM atoms.)
    """
    dp = str(datapath).upper()
    if dp not in _DATAPATH_ROWS:
        raise LayoutError(f"unknown TMEM data path {datapath!r}; expected one of A..G")
    _check_int("cols", cols)
    if dp in "AD":
        return tmem_layout(128, cols, lane_offset=lane_offset, col_offset=col_offset)
    if dp in "CF":
        if lane_offset not in (0, 16):
            raise LayoutError(f"data path {dp} uses half the lanes: lane_offset must be 0 "
                              f"or 16, got {lane_offset}")
        _tmem_check(128 - 16, cols, lane_offset, col_offset)
        return _layout([(4, 32, "TLane"), (16, 1, "TLane"), (cols, 1, "TCol")],
                       offset={"TLane": lane_offset, "TCol": col_offset})
    folds, rows = (2, 64) if dp in "BE" else (4, 32)
    if cols % folds:
        raise LayoutError(f"data path {dp} splits the columns into {folds} parts: "
                          f"cols = {cols} must be a multiple of {folds}")
    _tmem_check(TMEM_LANES, cols // folds, lane_offset, col_offset)
    if lane_offset:
        raise LayoutError(f"data path {dp} occupies all lanes; lane_offset must be 0")
    return _layout([(rows, 1, "TLane"), (folds, rows, "TLane"), (cols // folds, 1, "TCol")],
                   offset={"TCol": col_offset})


def tmem_scale_factor_layout(cols: int, rows: int = 32, *, col_offset: int = 0):
    """Block-scaled MMA scale factors in TMEM, replicated to all four 32-lane slabs.

    PTX ISA §9.7.16.10.7: "Scale factors for A and B matrices need to be duplicated to all
    32 lane partitions of tensor memory". Seed 002 / paper form:
    ``S[(32, cols):(1@TLane, 1@TCol)] + R[4:32@TLane]``.
    """
    _check_int("rows", rows, 1, 32)
    _check_int("cols", cols)
    _tmem_check(96 + rows, cols, 0, col_offset)
    return _layout([(rows, 1, "TLane"), (cols, 1, "TCol")], replica=[(4, 32, "TLane")],
                   offset={"TCol": col_offset})
