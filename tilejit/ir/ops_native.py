"""Catalogue entries: native scalar ops, memory ops and synchronization."""
from __future__ import annotations

import math
import re

from ..layout.fragments import MMA_SHAPES
from ..layout.hw_nvidia import LDMATRIX_NUMS
from .attrs import BOOL, INT, LAYOUT, SCALAR, SCALAR_TYPE, STR, Attr, Choice, Enum, Optional, Tuple
from .opdef import OpGroup, register
from .scope import LANES_PER_WARP
from .storage import shared_alignment
from .types import (BarrierType, BufferType, MemScope, RegionType, ScalarType, TeamKind, bf16,
                    f8e4m3, f8e5m2, f16, f32, i1, i32, i64)

NATIVE, MEMORY, SYNC = OpGroup.NATIVE, OpGroup.MEMORY, OpGroup.SYNC

BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "max", "min",
              "and", "or", "xor", "shl", "shr", "pow")
BITWISE_OPS = ("and", "or", "xor", "shl", "shr")
FLOAT_BINARY_OPS = ("pow",)
CMP_PREDS = ("eq", "ne", "lt", "le", "gt", "ge")
UNARY_OPS = ("neg", "not", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt",
             "sin", "cos", "tanh", "floor", "ceil", "sigmoid", "erf")
FLOAT_UNARY_OPS = UNARY_OPS[3:]
# Unary ops a target may compute with a fast approximate instruction when asked
# (``config={"approx": True}``; accuracy in docs/language.md); single precision only.
APPROX_UNARY_OPS = ("exp", "exp2", "log", "log2", "sin", "cos")
THREAD_INDEX_KINDS = ("cta_id", "num_ctas", "warpgroup_id", "warp_id", "warp_id_in_wg",
                      "lane_id", "thread_id", "cta_id_in_cluster", "cta_rank_in_cluster",
                      "num_threads")
PER_DIM_INDEX_KINDS = ("cta_id", "num_ctas", "cta_id_in_cluster")
ATOMIC_OPS = ("add", "max", "min", "xchg")
# Memory order and synchronization scope of atomic and atomic_cas, as Triton's sem= and
# scope= (acq_rel and gpu are Triton's defaults). A target without a scope implements it
# with a wider one.
MEMORY_ORDERS = ("relaxed", "acquire", "release", "acq_rel")
SYNC_SCOPES = ("cta", "gpu", "sys")
SHUFFLE_MODES = ("xor", "down", "up", "idx")
ACCESS_OPS = ("load", "store", "atomic", "atomic_cas")   # element accesses of a buffer
# Accesses of a run of ``count`` consecutive elements along a buffer's last dim in one
# instruction (a GPU's 128-bit ld/st.global.v4): indices name the run's first element.
VECTOR_ACCESS_OPS = ("load_vec", "store_vec", "ldmatrix", "stmatrix")
# ops_async / ops_tma: a chunk or box copied between shared and global memory, later
ASYNC_ACCESS_OPS = ("cp_async", "tma_load", "tma_store")
VECTOR_ACCESS_BYTES = 16   # the widest run one access moves
# ldmatrix: a warp's collective load of matrices of LDMATRIX_ROW rows of 16 bytes from
# shared memory (PTX ldmatrix.m8n8: 8x8 16-bit elements, or 8x16 8-bit ones moved as byte
# pairs; layout/hw_nvidia.ldmatrix_layout); each lane's indices name one matrix row, a run
# of ldmatrix_row(dtype) elements. stmatrix (PTX stmatrix.m8n8, sm_90; 16-bit elements
# only here) is its store: the values each lane passes are placed as ldmatrix's results.
LDMATRIX_ROW = 8
LDMATRIX_ROW_BYTES = 16
MATRIX_ACCESS_OPS = ("ldmatrix", "ldmatrix_at", "stmatrix", "stmatrix_at")
# the flat forms of both (load_at, load_vec_at ...)
FLAT_ACCESS = {name: f"{name}_at" for name in ACCESS_OPS + VECTOR_ACCESS_OPS}
FIRST_INDEX = {"load": 1, "store": 2, "atomic": 2, "atomic_cas": 3}  # access -> operand
ATOMIC_ACCESSES = frozenset({"atomic", "atomic_cas", "atomic_at", "atomic_cas_at"})
READING_ACCESSES = ATOMIC_ACCESSES | {"load", "load_at", "load_vec", "load_vec_at", "ldmatrix",
                                       "ldmatrix_at"}
WRITING_ACCESSES = ATOMIC_ACCESSES | {"store", "store_at", "store_vec", "store_vec_at",
                                      "cp_async", "cp_async_at", "tma_load", "tma_load_at",
                                      "tma_store", "tma_store_at", "stmatrix",
                                      "stmatrix_at"}   # writes operand 0
# mma_sync: per shape, how many values of A, B and C each of a warp's 32 lanes holds (PTX
# ISA, "Matrix Fragments for mma.m16n8k16": 8, 4, 4; "for mma.m16n8k32": 16, 8, 4), and
# the element types it multiplies (per shape) and accumulates in. The 8-bit float shape
# multiplies any mix of e4m3 and e5m2 (PTX: .atype and .btype are independent there);
# the 16-bit one two matrices of one type.
MMA_FRAGMENT_SIZES = {shape: (m * k // LANES_PER_WARP, k * n // LANES_PER_WARP,
                              m * n // LANES_PER_WARP)
                      for shape, (m, n, k) in MMA_SHAPES.items()}
MMA_INPUT_TYPES = {"m16n8k16": (f16, bf16), "m16n8k32": (f8e4m3, f8e5m2)}
MMA_MIXED_INPUTS = frozenset({"m16n8k32"})
MMA_ACCUMULATOR_TYPES = (f32,)


def mma_shape_for(a_type: ScalarType, b_type: ScalarType) -> str | None:
    """The mma.sync shape that multiplies an ``a_type`` A by a ``b_type`` B (None: none)."""
    for shape, types in MMA_INPUT_TYPES.items():
        if a_type in types and b_type in types \
                and (a_type == b_type or shape in MMA_MIXED_INPUTS):
            return shape
    return None


def describe_mma_inputs() -> str:
    """What mma.sync multiplies, for error messages."""
    return "f16 or bf16 tiles of one type (m16n8k16), or e4m3/e5m2 tiles (m16n8k32)"


def same_as(index: int):
    """Result rule: one result with the type of operand ``index``."""
    return lambda types, attrs: (types[index],)


def fixed(*result_types):
    return lambda types, attrs: result_types


def _element_type(types, attrs):
    return (types[0].dtype,)


def _same_operand_types(op):
    a, b = op.operands[-2].type, op.operands[-1].type
    return None if a == b else f"operand types differ: {a} and {b}"


def _check_binary(op):
    if op.attrs["op"] in BITWISE_OPS and not op.operands[0].type.is_int:
        return f"'{op.attrs['op']}' needs integer operands"
    if op.attrs["op"] in FLOAT_BINARY_OPS and not op.operands[0].type.is_float:
        return f"'{op.attrs['op']}' needs float operands"
    return _same_operand_types(op)


def _check_unary(op):
    name, t = op.attrs["op"], op.operands[0].type
    if name in FLOAT_UNARY_OPS and not t.is_float:
        return f"'{name}' needs a float operand, got {t}"
    if name == "not" and not t.is_int:
        return f"'not' needs an integer or bool operand, got {t}"
    if op.attrs["approx"]:
        if name not in APPROX_UNARY_OPS:
            return f"'{name}' has no approximate form (those: {', '.join(APPROX_UNARY_OPS)})"
        if not t.is_float or t.bits > 32:
            return f"approximate '{name}' is single precision or narrower, got {t}"
    return None


def _check_const(op):
    if len(op.result_types) != 1:
        return "a constant has exactly one result"
    value, (t,) = op.attrs["value"], op.result_types
    if not isinstance(t, ScalarType):
        return f"a constant must be a scalar, got {t}"
    if t.is_bool:
        return None if isinstance(value, bool) else f"an i1 constant needs true/false, got {value!r}"
    if t.is_float:
        return None if isinstance(value, float) else f"a {t} constant needs a float, got {value!r}"
    if not isinstance(value, int) or isinstance(value, bool):
        return f"a {t} constant needs an int, got {value!r}"
    low, high = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if t.is_signed else (0, 1 << t.bits)
    return None if low <= value < high else f"{value} does not fit in {t}"


def _check_thread_index(op):
    dim = op.attrs["dim"]
    if op.attrs["kind"] in PER_DIM_INDEX_KINDS:
        return None if 0 <= dim < 3 else f"dim must be 0, 1 or 2, got {dim}"
    return None if dim == 0 else f"{op.attrs['kind']} has no dim {dim}"


def _check_own_barrier(op):
    """Only an arrival reaches another CTA's mbarrier (PTX: mbarrier.arrive has a
    shared::cluster form; init, expect_tx and the waits act on the CTA's own)."""
    if getattr(op.operands[0].owner, "name", None) == "cluster_map":
        return (f"{op.name} on another CTA's mbarriers (cluster_map, tj.remote): only "
                "mbarrier_arrive reaches them; the CTA that holds them initializes and "
                "waits on them")
    return None


def _check_dim(op):
    dim, rank = op.attrs["dim"], op.operands[0].type.rank
    return None if 0 <= dim < rank else f"dim {dim} out of range for a rank-{rank} buffer"


def _check_global_buffer(op):
    t = op.operands[0].type
    if not isinstance(t, BufferType) or t.scope is not MemScope.GLOBAL:
        return f"{op.name} takes a global buffer (a kernel parameter), not {t}"
    return None


def _check_alloc(op):
    scope, offset, per_team = op.attrs["scope"], op.attrs["offset"], op.attrs["per_team"]
    if scope is MemScope.GLOBAL:
        return "alloc cannot make a global buffer"
    if per_team is not None and (scope is not MemScope.SHARED
                                 or per_team not in (TeamKind.WARP, TeamKind.WARPGROUP)):
        return f"per_team copies are of shared buffers, per warp or warpgroup (got {scope}, " \
               f"{per_team})"
    if offset is None:
        return None
    if scope is not MemScope.SHARED:
        return f"only shared buffers have a planned offset, not {scope} ones"
    align = shared_alignment(op.attrs["dtype"], op.attrs["layout"])
    if offset < 0 or offset % align:
        return f"shared offset {offset} is not a non-negative multiple of {align} bytes"
    return None


def _check_view(op):
    src, dst = op.operands[0].type, op.result_types[0]
    if src.scope is MemScope.GLOBAL and dst.layout is None:
        return "a view of a global buffer needs a layout"
    if src.is_static and math.prod(src.shape) != math.prod(dst.shape):
        return f"view changes the element count: {list(src.shape)} -> {list(dst.shape)}"
    return None


def _check_region(op):
    starts, rank = len(op.operands) - 1, op.operands[0].type.rank
    return None if starts == rank else f"region of a rank-{rank} buffer needs {rank} starts, got {starts}"


def index_check(first_index: int):
    """The check of an element access whose indices start at operand ``first_index`` (one
    per dim of the buffer at operand 0); at 2, operand 1 is a stored value of its dtype."""
    def check(op):
        rank = op.operands[0].type.rank
        count = len(op.operands) - first_index
        if count != rank:
            return f"{op.name} of a rank-{rank} buffer needs {rank} indices, got {count}"
        if first_index == 2 and op.operands[1].type != op.operands[0].type.dtype:
            return f"stored value is {op.operands[1].type}, buffer holds {op.operands[0].type.dtype}"
        return None
    return check


def _check_atomic(op):
    """atomic and atomic_cas: operands of the element's type, one index per dim."""
    first_index = 3 if op.name == "atomic_cas" else 2
    dtype = op.operands[0].type.dtype
    if dtype.is_bool:
        return f"{op.name} on bool elements is not supported"
    for value in op.operands[1:first_index]:
        if value.type != dtype:
            return f"{op.name} operand is {value.type}, buffer holds {dtype}"
    count, rank = len(op.operands) - first_index, op.operands[0].type.rank
    if count != rank:
        return f"{op.name} of a rank-{rank} buffer needs {rank} indices, got {count}"
    return None


def is_root_buffer(value, remote: bool = False) -> bool:
    """A buffer with storage of its own: an ``alloc``, or a kernel argument (a global one);
    with ``remote``, also another CTA's alloc (``cluster_map``), which element accesses
    reach but the asynchronous proxy's copies and the tensor cores do not."""
    owner = value.owner
    if getattr(owner, "name", None) == "alloc" or \
            (remote and getattr(owner, "name", None) == "cluster_map"):
        return True
    return not hasattr(owner, "name") and value.type.scope is MemScope.GLOBAL


def _check_flat(op):
    """load_at, store_at, atomic_at, atomic_cas_at: a root buffer, values of its element
    type, one integer offset."""
    buf, *values, _ = op.operands
    if not is_root_buffer(buf, remote=True):
        return f"{op.name} needs a root buffer (an alloc or a kernel argument), not a view"
    for value in values:
        if value.type != buf.type.dtype:
            return f"{op.name} operand is {value.type}, buffer holds {buf.type.dtype}"
    if op.name.startswith("atomic") and buf.type.dtype.is_bool:
        return f"{op.name} on bool elements is not supported"
    return None


def vector_count_problem(dtype: ScalarType, count: int) -> str | None:
    """Why one vector access cannot move ``count`` elements of ``dtype`` (None: it can)."""
    if dtype.is_bool:
        return "a vector access does not move bool elements (stored as bytes, loaded as i1)"
    if count < 2 or count & (count - 1):
        return f"a vector access moves a power of two of at least 2 elements, not {count}"
    if count * dtype.itemsize > VECTOR_ACCESS_BYTES:
        return (f"{count} {dtype} elements are {count * dtype.itemsize} bytes, more than "
                f"one access moves ({VECTOR_ACCESS_BYTES})")
    return None


def _check_vector(op):
    """load_vec, store_vec and their flat forms: ``count`` values of the buffer's element
    type; one index per dim (the run's first element), or a root buffer and one offset."""
    buf, count = op.operands[0], op.attrs["count"]
    dtype = buf.type.dtype
    problem = vector_count_problem(dtype, count)
    if problem:
        return problem
    flat = op.name.endswith("_at")
    if flat and not is_root_buffer(buf, remote=True):
        return f"{op.name} needs a root buffer (an alloc or a kernel argument), not a view"
    if op.name.startswith("store"):
        values = op.operands[2:] if flat else op.operands[1:1 + count]
        if len(values) != count:
            return f"{op.name} of {count} elements takes {count} values, got {len(values)}"
        for value in values:
            if value.type != dtype:
                return f"stored value is {value.type}, buffer holds {dtype}"
    if flat:
        return None
    indices = op.operands[1 + count:] if op.name == "store_vec" else op.operands[1:]
    if len(indices) != buf.type.rank:
        return (f"{op.name} of a rank-{buf.type.rank} buffer needs {buf.type.rank} "
                f"indices, got {len(indices)}")
    for index in indices:
        if not (isinstance(index.type, ScalarType) and index.type.is_int):
            return f"{op.name} index is {index.type}, not an integer"
    return None


def ldmatrix_row(dtype) -> int:
    """How many ``dtype`` elements one matrix row of ldmatrix / stmatrix holds."""
    return LDMATRIX_ROW_BYTES // dtype.itemsize


def ldmatrix_values(dtype, num: int) -> int:
    """How many ``dtype`` values a lane gets from (or passes to) ``num`` matrices: one
    32-bit register of each (counted as for 16-bit elements unless 8-bit: the op's check
    refuses other sizes by name)."""
    return 4 * num if dtype.itemsize == 1 else 2 * num


def run_length(op) -> int:
    """How many consecutive elements of the last dim a vector access's indices start."""
    if op.name in MATRIX_ACCESS_OPS:
        return ldmatrix_row(op.operands[0].type.dtype)
    return op.attrs["count"]


def stored_values(op) -> int:
    """How many values a vector access stores (they follow its buffer): none for a load."""
    if op.name.startswith("stmatrix"):
        return 2 * op.attrs["num"]
    return op.attrs["count"] if op.name.startswith("store_vec") else 0


def _check_ldmatrix(op):
    """ldmatrix and stmatrix: a shared buffer of 16-bit elements (or 8-bit ones for a plain
    ldmatrix: not .trans, which transposes 16-bit units); the row's indices (one per dim),
    or a root buffer and one offset (the _at forms); stmatrix's 2 * num values of the
    buffer's element type."""
    buf, family = op.operands[0], op.name.removesuffix("_at")
    loads = family == "ldmatrix"
    if op.attrs["num"] not in LDMATRIX_NUMS:
        return (f"{family} {'loads' if loads else 'stores'} 1, 2 or 4 matrices, "
                f"not {op.attrs['num']}")
    if buf.type.scope is not MemScope.SHARED:
        return f"{family} {'reads' if loads else 'writes'} shared memory, not {buf.type.scope}"
    itemsize = buf.type.dtype.itemsize
    if itemsize != 2 and not (loads and itemsize == 1 and not op.attrs["trans"]):
        moves = "16-bit elements, or 8-bit ones without .trans" if loads else "16-bit elements"
        return f"{family}{'.trans' if op.attrs['trans'] else ''} moves {moves}, not {buf.type.dtype}"
    stored, flat = stored_values(op), op.name.endswith("_at")
    # stmatrix's values precede its indices, one per dim of the buffer
    values = op.operands[2:] if flat else op.operands[1:max(1, len(op.operands) - buf.type.rank)]
    if len(values) != stored:
        return f"{family}.x{op.attrs['num']} stores {stored} values per lane, got {len(values)}"
    for value in values:
        if value.type != buf.type.dtype:
            return f"stored value is {value.type}, buffer holds {buf.type.dtype}"
    if flat:
        return None if is_root_buffer(buf) else f"{op.name} needs a root buffer, not a view"
    indices = op.operands[1 + stored:]
    if len(indices) != buf.type.rank:
        return (f"{family} of a rank-{buf.type.rank} buffer needs {buf.type.rank} indices, "
                f"got {len(indices)}")
    return None


def _ldmatrix_results(types, attrs):
    return (types[0].dtype,) * ldmatrix_values(types[0].dtype, attrs["num"])


def _vector_results(types, attrs):
    return (types[0].dtype,) * attrs["count"]


def _check_mma_sync(op):
    """A, B and C fragment values in that order, of a_type, b_type and c_type."""
    a_type, b_type, c_type = op.attrs["a_type"], op.attrs["b_type"], op.attrs["c_type"]
    if mma_shape_for(a_type, b_type) != op.attrs["shape"]:
        return (f"mma_sync {op.attrs['shape']} does not multiply {a_type} by {b_type}: it "
                f"multiplies {describe_mma_inputs()}")
    if c_type not in MMA_ACCUMULATOR_TYPES:
        return f"mma_sync accumulates in f32, not {c_type}"
    counts = MMA_FRAGMENT_SIZES[op.attrs["shape"]]
    if len(op.operands) != sum(counts):
        return (f"mma_sync {op.attrs['shape']} takes {counts[0]} A, {counts[1]} B and "
                f"{counts[2]} C values per lane ({sum(counts)} operands), got {len(op.operands)}")
    expected = [a_type] * counts[0] + [b_type] * counts[1] + [c_type] * counts[2]
    for index, (value, wanted) in enumerate(zip(op.operands, expected)):
        if value.type != wanted:
            return f"mma_sync operand {index} is {value.type}, its fragment holds {wanted}"
    return None


def _mma_results(types, attrs):
    return (attrs["c_type"],) * MMA_FRAGMENT_SIZES[attrs["shape"]][2]


def _check_bounds(op):
    return None if len(op.operands) % 2 == 0 else "bounds_check takes one extent per index"


def _check_barrier_count(op):
    return None if op.attrs["count"] > 0 else "alloc_barrier needs a positive count"


def _check_intrinsic(op):
    return None if len(op.results) <= 1 else "an intrinsic has at most one result"


# device_print {printf = true}: a C printf format with one conversion per operand. Integer
# conversions take integer or bool operands, float ones float operands; %s is the
# frontend's alone (it formats compile-time values into the text).
PRINTF_CONVERSION = re.compile(
    r"%(?P<flags>[-+ #0]*)(?P<width>\d*)(?:\.(?P<precision>\d*))?(?P<kind>[diuxXfeEgGs%])")
PRINTF_INT_KINDS, PRINTF_FLOAT_KINDS = "diuxX", "feEgG"


def printf_conversions(fmt: str) -> list[re.Match]:
    """Every conversion of a printf format in order, ``%%`` included; a ValueError names
    the first ``%`` that starts none."""
    found, pos = [], 0
    while (start := fmt.find("%", pos)) >= 0:
        match = PRINTF_CONVERSION.match(fmt, start)
        if match is None:
            raise ValueError(f"'{fmt[start:start + 4]}' (position {start}) is not a printf "
                             "conversion; use %d %i %u %x %f %e %g %s, with optional flags, "
                             "width and precision such as %5d or %.3f, and %% for a percent "
                             "sign")
        found.append(match)
        pos = match.end()
    return found


def _check_device_print(op):
    if not op.attrs["printf"]:
        return None  # "{}" placeholders, the remaining operands appended
    try:
        conversions = [c for c in printf_conversions(op.attrs["fmt"]) if c["kind"] != "%"]
    except ValueError as err:
        return str(err)
    if len(conversions) != len(op.operands):
        return f"the format has {len(conversions)} conversions for {len(op.operands)} operands"
    for conversion, operand in zip(conversions, op.operands):
        t, kind = operand.type, conversion["kind"]
        if not (isinstance(t, ScalarType) and (t.is_int and kind in PRINTF_INT_KINDS
                                               or t.is_float and kind in PRINTF_FLOAT_KINDS)):
            return f"conversion {conversion[0]} cannot print an operand of type {t}"
    return None


register("const", NATIVE, attrs={"value": Attr(SCALAR)}, check=_check_const)
register("binary", NATIVE, "lhs:scalar rhs:scalar", {"op": Attr(Choice(*BINARY_OPS))},
         same_as(0), check=_check_binary)
register("cmp", NATIVE, "lhs:scalar rhs:scalar", {"pred": Attr(Choice(*CMP_PREDS))},
         fixed(i1), check=_same_operand_types)
register("unary", NATIVE, "x:scalar", {"op": Attr(Choice(*UNARY_OPS)), "approx": Attr(BOOL, False)},
         same_as(0),
         check=_check_unary)
register("select", NATIVE, "cond:i1 a:scalar b:scalar", results=same_as(1),
         check=_same_operand_types)
register("cast", NATIVE, "x:scalar", {"to": Attr(SCALAR_TYPE)},
         lambda types, attrs: (attrs["to"],))
register("thread_index", NATIVE, attrs={"kind": Attr(Choice(*THREAD_INDEX_KINDS)),
                                        "dim": Attr(INT, 0)},
         results=fixed(i32), check=_check_thread_index)

register("buffer_dim", MEMORY, "buf:memory", {"dim": Attr(INT)}, fixed(i64), check=_check_dim)
# The byte address of a global buffer's element 0: what the CPU's read-in-place pass compares
# to tell whether two tensors' boxes share memory (set by the compiler only).
register("buffer_address", MEMORY, "buf:memory", results=fixed(i64), check=_check_global_buffer)
register("buffer_stride", MEMORY, "buf:memory", {"dim": Attr(INT)}, fixed(i64),
         check=_check_dim)
register("alloc", MEMORY, attrs={"scope": Attr(Enum(MemScope)), "dtype": Attr(SCALAR_TYPE),
                                 "shape": Attr(Tuple(INT)), "layout": Attr(Optional(LAYOUT), None),
                                 "offset": Attr(Optional(INT), None),
                                 "per_team": Attr(Optional(Enum(TeamKind)), None),
                                 "layout_note": Attr(Optional(STR), None)},
         results=lambda types, a: (BufferType(a["dtype"], a["shape"], a["scope"], a["layout"]),),
         check=_check_alloc,
         doc="offset: the shared buffer's byte offset in the CTA's shared memory "
             "(set by the plan-shared-memory pass); per_team: one copy of the storage per "
             "warp or warpgroup, each thread reaching its own team's (a team's fragment "
             "under a per-thread split); layout_note: how the infer-fragment-layouts pass "
             "chose the layout, or why it chose none (set only by that pass: a layout with "
             "a note is the compiler's, not the kernel's)")
register("view", MEMORY, "buf:buffer", {"shape": Attr(Tuple(INT)),
                                        "layout": Attr(Optional(LAYOUT), None)},
         lambda types, a: (BufferType(types[0].dtype, a["shape"], types[0].scope, a["layout"]),),
         check=_check_view)
register("region", MEMORY, "buf:buffer *starts:int",
         {"sizes": Attr(Tuple(INT)), "keep": Attr(Tuple(BOOL)),
          "in_bounds": Attr(BOOL, False)},
         lambda types, a: (RegionType(types[0], a["sizes"], a["keep"]),), check=_check_region,
         doc="in_bounds: the window lies inside its buffer, as a run-time check guarding it "
             "established (set by the compiler only: cpu-read-copies-in-place); element "
             "accesses through it need no masks")
register("load", MEMORY, "buf:memory *indices:int", results=_element_type,
         check=index_check(1))
register("store", MEMORY, "buf:memory value:scalar *indices:int", results=fixed(),
         check=index_check(2))
ATOMIC_ATTRS = {"order": Attr(Choice(*MEMORY_ORDERS), "acq_rel"),
                "sync_scope": Attr(Choice(*SYNC_SCOPES), "gpu")}
register("atomic", MEMORY, "buf:memory value:scalar *indices:int",
         {"op": Attr(Choice(*ATOMIC_OPS)), **ATOMIC_ATTRS}, _element_type,
         check=_check_atomic)
register("atomic_cas", MEMORY, "buf:memory compare:scalar value:scalar *indices:int",
         ATOMIC_ATTRS, _element_type, check=_check_atomic,
         doc="compare-and-swap: stores value where the element equals compare; the old value")

# Flat accesses (the lower-addresses pass makes them; docs/lowering.md "Address lowering"):
# the element at ``offset`` elements from the start of a root buffer's storage -- a kernel
# argument's data pointer, or an alloc's storage -- with the index arithmetic already in IR.
register("load_at", MEMORY, "buf:buffer offset:int", results=_element_type, check=_check_flat)
register("store_at", MEMORY, "buf:buffer value:scalar offset:int", results=fixed(),
         check=_check_flat)
register("atomic_at", MEMORY, "buf:buffer value:scalar offset:int",
         {"op": Attr(Choice(*ATOMIC_OPS)), **ATOMIC_ATTRS}, _element_type, check=_check_flat)
register("atomic_cas_at", MEMORY, "buf:buffer compare:scalar value:scalar offset:int",
         ATOMIC_ATTRS, _element_type, check=_check_flat,
         doc="compare-and-swap at a flat offset: stores value where the element equals "
             "compare; the old value")

VECTOR_DOC = ("a run of count consecutive elements along the buffer's last dim, in one "
              "access: the targets print it, its legality (alignment, bounds) is the "
              "rule's that made it (rules/copy_vector.py)")
register("load_vec", MEMORY, "buf:memory *indices:int", {"count": Attr(INT)}, _vector_results,
         check=_check_vector, doc=f"indices of the first element; {VECTOR_DOC}")
register("store_vec", MEMORY, "buf:memory *operands", {"count": Attr(INT)}, fixed(),
         check=_check_vector,
         doc=f"count values, then the indices of the first element; {VECTOR_DOC}")
register("load_vec_at", MEMORY, "buf:buffer offset:int", {"count": Attr(INT)}, _vector_results,
         check=_check_vector, doc=f"the flat load_vec: offset of the first element; {VECTOR_DOC}")
register("store_vec_at", MEMORY, "buf:buffer offset:int *values:scalar", {"count": Attr(INT)},
         fixed(), check=_check_vector,
         doc=f"the flat store_vec: offset of the first element; {VECTOR_DOC}")

LDMATRIX_DOC = ("a warp collective (every lane of the warp takes part): each lane names the "
                "first element of one matrix row and gets num 32-bit registers of values (2 * num "
                "16-bit ones, 4 * num 8-bit ones), one register of each matrix, "
                "placed as layout/hw_nvidia.ldmatrix_layout(num, trans) says; alignment and "
                "contiguity of the rows are the rule's that made it (rules/gemm_mma.py)")
register("ldmatrix", MEMORY, "buf:memory *indices:int",
         {"num": Attr(INT), "trans": Attr(BOOL, False)}, _ldmatrix_results,
         check=_check_ldmatrix, doc=LDMATRIX_DOC)
register("ldmatrix_at", MEMORY, "buf:buffer offset:int",
         {"num": Attr(INT), "trans": Attr(BOOL, False)}, _ldmatrix_results,
         check=_check_ldmatrix, doc=f"the flat ldmatrix: offset of the row; {LDMATRIX_DOC}")
STMATRIX_DOC = ("ldmatrix's store (PTX stmatrix, sm_90): a warp collective in which each lane "
                "names the first element of one matrix row and passes 2 * num values, placed "
                "in the matrices as layout/hw_nvidia.ldmatrix_layout(num, trans) says; "
                "alignment and contiguity of the rows are the rule's that made it "
                "(rules/copy_stmatrix.py)")
register("stmatrix", MEMORY, "buf:memory *operands",
         {"num": Attr(INT), "trans": Attr(BOOL, False)}, fixed(), check=_check_ldmatrix,
         doc=f"2 * num values, then the row's indices; {STMATRIX_DOC}")
register("stmatrix_at", MEMORY, "buf:buffer offset:int *values:scalar",
         {"num": Attr(INT), "trans": Attr(BOOL, False)}, fixed(), check=_check_ldmatrix,
         doc=f"the flat stmatrix: offset of the row, then the values; {STMATRIX_DOC}")

register("bounds_check", MEMORY, "*values:int",
         {"access": Attr(Choice(*ACCESS_OPS, *VECTOR_ACCESS_OPS, *ASYNC_ACCESS_OPS)),
          "buffer": Attr(STR),
          "scope": Attr(Enum(MemScope))}, fixed(), check=_check_bounds,
         doc="indices then extents, as many of each: the access fails (naming the buffer) "
             "unless every index lies in [0, extent); targets check where their options ask")

register("warp_shuffle", SYNC, "value:scalar lane:int", {"mode": Attr(Choice(*SHUFFLE_MODES))},
         same_as(0))
register("mma_sync", SYNC, "*fragments:scalar",
         {"shape": Attr(Choice(*MMA_FRAGMENT_SIZES)), "a_type": Attr(SCALAR_TYPE),
          "b_type": Attr(SCALAR_TYPE), "c_type": Attr(SCALAR_TYPE),
          "a_layout": Attr(Choice("row"), "row"), "b_layout": Attr(Choice("col"), "col")},
         _mma_results, check=_check_mma_sync,
         doc="a warp's matrix multiply-accumulate D = A @ B + C (PTX mma.sync.aligned): each "
             "of the warp's 32 lanes passes its fragment values of A, B and C, in the PTX "
             "fragment order (layout/hw_nvidia.py), and gets its values of D; every lane of "
             "the warp takes part")
register("elect_sync", SYNC, results=fixed(i1))
register("sync", SYNC, attrs={"reason": Attr(Optional(STR), None)}, results=fixed(),
         doc="CTA-wide barrier; reason: why the sync-hazards pass inserted it")
register("alloc_barrier", SYNC, attrs={"count": Attr(INT)},
         results=lambda types, a: (BarrierType(a["count"]),), check=_check_barrier_count)
register("mbarrier_init", SYNC, "bar:barrier index:int count:int", results=fixed(),
         check=_check_own_barrier)
register("mbarrier_arrive", SYNC, "bar:barrier index:int", results=fixed())
register("mbarrier_expect_tx", SYNC, "bar:barrier index:int bytes:int",
         {"arrive": Attr(BOOL, False)}, fixed(), check=_check_own_barrier)
register("mbarrier_wait", SYNC, "bar:barrier index:int phase:int", results=fixed(),
         check=_check_own_barrier)
register("intrinsic", SYNC, "*args", {"target": Attr(STR), "name": Attr(STR)},
         check=_check_intrinsic)
register("device_print", SYNC, "*args", {"fmt": Attr(STR), "printf": Attr(BOOL, False)},
         fixed(), check=_check_device_print)
