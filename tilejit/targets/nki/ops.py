"""The NKI instructions as typed IR ops (``nki.*``), declared in the one op catalogue.

The target's dispatch rules lower tile primitives into them; the emitter prints each as
one ``nisa`` call (destination first). Their operands are tiles: an on-chip tile is a
``region`` of the ``view`` that gives its buffer the shape of its NKI tensor
(``tiles.Tile``), a tensor in HBM a region of the kernel argument; so the verifier checks
here what the hardware demands of each instruction (partitions, PSUM, free sizes) and
the printer never derives an index.
"""
from __future__ import annotations

import math

from tilejit.ir.attrs import BOOL, FLOAT, INT, Attr, Choice, Tuple
from tilejit.ir.opdef import OpGroup, register
from tilejit.ir.ops_native import fixed
from tilejit.ir.types import BufferType, MemScope, RegionType, ScalarType, f32
from tilejit.layout.hw_trainium import PMAX, PSUM_BANK_BYTES

__all__ = ["ACTIVATIONS", "ALU_OPS", "CMP_OPS", "MATMUL_FREE", "ON_CHIP", "REDUCE_OPS"]

# nc_matmul: the stationary tile's free size (the output's partitions) and the moving
# tile's (the output's free size, one 2 KiB PSUM bank of f32).
MATMUL_FREE = {"stationary": 128, "moving": 512}
ALU_OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
ACTIVATIONS = ("copy", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "square",
               "reciprocal")
REDUCE_OPS = ("add", "maximum", "minimum")
CMP_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
ON_CHIP = (MemScope.SHARED, MemScope.SBUF, MemScope.PSUM)


def _buffer(value) -> BufferType:
    t = value.type
    return t.buffer if isinstance(t, RegionType) else t


def _shape(value) -> tuple:
    return tuple(value.type.shape)


def _on_chip(op, *names) -> str | None:
    for name, value in zip(names, op.operands):
        buffer = _buffer(value)
        if buffer.scope not in ON_CHIP:
            return f"{op.name}: {name} is in {buffer.scope} memory, not SBUF or PSUM"
        shape = _shape(value)
        if len(shape) < 1 or shape[0] > PMAX:
            return f"{op.name}: {name} {list(shape)} spans more than {PMAX} partitions"
    return None


def _check_dma(op):
    dst, src = op.operands
    if math.prod(_shape(dst)) != math.prod(_shape(src)):
        return f"nki.dma_copy moves {list(_shape(src))} into {list(_shape(dst))}"
    if _buffer(dst).dtype != _buffer(src).dtype:
        return "nki.dma_copy does not convert: dst and src have different dtypes"
    if MemScope.GLOBAL not in (_buffer(dst).scope, _buffer(src).scope):
        return "nki.dma_copy between two on-chip tiles: use nki.tensor_copy"
    if MemScope.PSUM in (_buffer(dst).scope, _buffer(src).scope):
        return "nki.dma_copy does not reach PSUM"
    return None


def _check_transpose(op):
    dst, data = op.operands
    problem = _on_chip(op, "dst", "data")
    if problem:
        return problem
    (p, f) = _shape(data)
    if _shape(dst) != (f, p) or max(p, f) > PMAX:
        return f"nki.transpose turns [{p}, {f}] (each at most {PMAX}) into [{f}, {p}], " \
               f"not {list(_shape(dst))}"
    if _buffer(dst).scope is not MemScope.PSUM or _buffer(data).scope is MemScope.PSUM:
        return "nki.transpose reads SBUF and writes PSUM (the Tensor Engine's transpose)"
    if _buffer(dst).dtype != _buffer(data).dtype:
        return "nki.transpose does not convert: dst and data have different dtypes"
    return None


def _check_same_shapes(*names):
    def check(op):
        shapes = [_shape(v) for v in op.operands[:len(names)]]
        if any(s != shapes[0] for s in shapes):
            return f"{op.name}: " + ", ".join(f"{n} {list(s)}" for n, s in zip(names, shapes))\
                + " differ"
        return _on_chip(op, *names)
    return check


def _check_matmul(op):
    dst, stationary, moving, *accumulate = op.operands
    if len(accumulate) > 1:
        return "nki.matmul takes at most one accumulate flag"
    problem = _on_chip(op, "dst", "stationary", "moving")
    if problem:
        return problem
    if _buffer(dst).scope is not MemScope.PSUM or _buffer(dst).dtype != f32:
        return "nki.matmul writes an f32 tile in PSUM"
    if MemScope.PSUM in (_buffer(stationary).scope, _buffer(moving).scope):
        return "nki.matmul reads its operands from SBUF"
    (k, m), (k2, n) = _shape(stationary), _shape(moving)
    if k != k2 or _shape(dst) != (m, n):
        return (f"nki.matmul: stationary [{k}, {m}] and moving [{k2}, {n}] give "
                f"[{m}, {n}], not {list(_shape(dst))}")
    if m > MATMUL_FREE["stationary"] or n > MATMUL_FREE["moving"]:
        return (f"nki.matmul: free sizes {m} (stationary, at most "
                f"{MATMUL_FREE['stationary']}) and {n} (moving, at most {MATMUL_FREE['moving']})")
    return _in_one_bank(dst)


def _in_one_bank(dst) -> str | None:
    """A matmul's dst lies in one 2 KiB PSUM bank. A region of an NKI tensor spans its
    free dims row-major; with run-time starts only its span is known here (the rule
    picks chunks that keep every start inside a bank)."""
    region = dst.owner if getattr(dst.owner, "name", None) == "region" else None
    if region is None:
        return None   # a whole tile: its free size is checked against one bank above
    shape, starts = _buffer(dst).shape, region.operands[2:]
    strides = [math.prod(shape[d + 1:]) for d in range(1, len(shape))]
    span = sum((n - 1) * st for n, st in zip(region.attrs["sizes"][1:], strides))
    first = sum(s.owner.attrs["value"] * st for s, st in zip(starts, strides)) \
        if all(getattr(s.owner, "name", None) == "const" for s in starts) else 0
    bank = PSUM_BANK_BYTES // f32.itemsize
    if first // bank != (first + span) // bank:
        return (f"nki.matmul: dst covers f32 elements {first}..{first + span} of each "
                f"partition, across two {PSUM_BANK_BYTES}-byte PSUM banks (a matmul writes "
                "one)")
    return None


def _check_tensor_scalar(op):
    dst, data, operand = op.operands
    problem = _check_same_shapes("dst", "data")(op)
    if problem or isinstance(operand.type, ScalarType):
        return problem
    if _shape(operand) != (_shape(data)[0], 1):
        return f"nki.tensor_scalar: operand {list(_shape(operand))} is not a [P, 1] column"
    return _on_chip(op, "dst", "data", "operand")


def _check_reduce(op):
    dst, src = op.operands
    problem = _on_chip(op, "dst", "src")
    if problem:
        return problem
    if _shape(dst) != (_shape(src)[0], 1):
        return f"nki.tensor_reduce reduces {list(_shape(src))} along F into [P, 1], " \
               f"not {list(_shape(dst))}"
    return None


def _check_affine(*names):
    """iota / affine_select: the value at [p, i_1, i_2 ...] is offset + p *
    channel_multiplier + sum(i_j * step_j) over ``pattern``'s [step, count] pairs, whose
    counts cover each partition's elements; the tiles are in SBUF."""
    def check(op):
        pattern = op.attrs["pattern"]
        if not 1 <= len(pattern) <= 4 or any(len(pair) != 2 or pair[1] < 1 for pair in pattern):
            return f"{op.name}: pattern {list(map(list, pattern))} is not 1 to 4 [step, count] pairs"
        problem = _check_same_shapes(*names)(op)
        if problem:
            return problem
        if any(_buffer(v).scope is MemScope.PSUM for v in op.operands[:len(names)]):
            return f"{op.name} reads and writes SBUF, not PSUM"
        free = math.prod(_shape(op.operands[0])[1:])
        if math.prod(count for _, count in pattern) != free:
            return f"{op.name}: pattern counts {[c for _, c in pattern]} do not cover the " \
                   f"{free} elements of each partition"
        return None
    return check


_AFFINE = {"pattern": Attr(Tuple(Tuple(INT))), "channel_multiplier": Attr(INT)}

MEMORY = OpGroup.MEMORY
register("nki.dma_copy", MEMORY, "dst:memory src:memory", results=fixed(), check=_check_dma,
         doc="DMA between HBM and SBUF: the elements of src into dst in C order")
register("nki.transpose", MEMORY, "dst:memory data:memory", results=fixed(),
         check=_check_transpose,
         doc="nc_transpose on the Tensor Engine: dst[F, P] = data[P, F], into PSUM")
register("nki.tensor_copy", MEMORY, "dst:memory src:memory", results=fixed(),
         check=_check_same_shapes("dst", "src"),
         doc="an on-chip copy (SBUF or PSUM to SBUF), converting the dtype")
register("nki.matmul", MEMORY, "dst:memory stationary:memory moving:memory *accumulate:i1",
         results=fixed(), check=_check_matmul,
         doc="nc_matmul: dst (+)= stationary.T @ moving on the Tensor Engine; K on the "
             "partitions of both operands, dst in PSUM; accumulate false overwrites, true "
             "adds, none (no flag) overwrites what no matmul wrote since dst was allocated")
register("nki.tensor_tensor", MEMORY, "dst:memory a:memory b:memory",
         {"op": Attr(Choice(*ALU_OPS))}, fixed(), check=_check_same_shapes("dst", "a", "b"),
         doc="dst = a <op> b element by element (Vector Engine)")
register("nki.tensor_scalar", MEMORY, "dst:memory data:memory operand:tile_or_scalar",
         {"op": Attr(Choice(*ALU_OPS)), "reverse": Attr(BOOL, False)}, fixed(),
         check=_check_tensor_scalar,
         doc="dst = data <op> operand (operand <op> data when reverse), operand a number or "
             "a [P, 1] column broadcast along F")
register("nki.memset", MEMORY, "dst:memory value:scalar", results=fixed(),
         check=lambda op: _on_chip(op, "dst"), doc="dst = value everywhere")
register("nki.activation", MEMORY, "dst:memory src:memory",
         {"op": Attr(Choice(*ACTIVATIONS))}, fixed(), check=_check_same_shapes("dst", "src"),
         doc="dst = op(src) element by element (Scalar Engine)")
register("nki.tensor_reduce", MEMORY, "dst:memory src:memory",
         {"op": Attr(Choice(*REDUCE_OPS))}, fixed(), check=_check_reduce,
         doc="dst[p, 0] = op over the free dim of src[p, :] (Vector Engine)")
register("nki.iota", MEMORY, "dst:memory offset:int", _AFFINE, fixed(),
         check=_check_affine("dst"),
         doc="dst[p, i...] = offset + p * channel_multiplier + sum(i_j * step_j) (pattern: "
             "[step, count] pairs over the free elements)")
register("nki.affine_select", MEMORY, "dst:memory on_true:memory offset:int",
         {**_AFFINE, "cmp": Attr(Choice(*CMP_OPS)), "on_false": Attr(FLOAT)}, fixed(),
         check=_check_affine("dst", "on_true"),
         doc="dst = on_true where cmp(the iota value, 0), else on_false (a causal mask)")
