"""The ``nki.isa`` instructions of the NKI reference (contract: nki_reference.py), and the
``nl`` operator constants they take (nl.add, nl.exp, ...).

Each instruction checks operand placement, shapes and dtypes as the NKI API pages state,
then computes in fp32 (integers natively) and casts into ``dst``.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from math import prod
from typing import Callable

import numpy as np

from nki_ref_memory import PSUM_BY_MATMUL, PSUM_BY_OTHER, NkiReferenceError, Tensor


@dataclass(frozen=True, eq=False)
class Op:
    """An ``nl`` operator constant: ``alu`` (binary arithmetic), ``cmp`` (a comparison giving
    1/0) or ``act`` (a Scalar Engine activation function, unary)."""
    name: str
    kind: str
    fn: Callable

    def __repr__(self):
        return f"nl.{self.name}"


def _safe(fn):
    def apply(*args):
        with np.errstate(all="ignore"):     # inf/NaN are results here, not errors
            return fn(*args)
    return apply


OPS = {op.name: op for op in (
    Op("add", "alu", np.add), Op("subtract", "alu", np.subtract),
    Op("multiply", "alu", np.multiply), Op("divide", "alu", _safe(np.divide)),
    Op("maximum", "alu", np.maximum), Op("minimum", "alu", np.minimum),
    Op("power", "alu", _safe(np.power)),
    Op("equal", "cmp", np.equal), Op("not_equal", "cmp", np.not_equal),
    Op("greater", "cmp", np.greater), Op("greater_equal", "cmp", np.greater_equal),
    Op("less", "cmp", np.less), Op("less_equal", "cmp", np.less_equal),
    Op("exp", "act", _safe(np.exp)), Op("log", "act", _safe(np.log)),
    Op("copy", "act", lambda x: x), Op("square", "act", np.square),
    Op("sqrt", "act", _safe(np.sqrt)), Op("rsqrt", "act", _safe(lambda x: 1 / np.sqrt(x))),
    Op("reciprocal", "act", _safe(lambda x: 1 / x)), Op("tanh", "act", np.tanh),
    Op("sigmoid", "act", _safe(lambda x: 1 / (1 + np.exp(-x)))),
    Op("relu", "act", lambda x: np.maximum(x, 0)),
    Op("silu", "act", _safe(lambda x: x / (1 + np.exp(-x)))), Op("abs", "act", np.abs),
)}

_REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod}
_MATMUL_DTYPES = ("float32", "bfloat16", "float16")


# ---------------------------------------------------------------- operand checks

def _tile(call: str, role: str, t, places=("sbuf", "psum")) -> Tensor:
    if not isinstance(t, Tensor):
        raise NkiReferenceError(call, f"{role} must be a tensor, got {t!r}")
    if t.buffer.kind not in places:
        raise NkiReferenceError(
            call, f"{role} {t!r} is in {t.buffer.name}; this instruction takes "
                  f"{' or '.join(p.upper() for p in places)} only")
    return t


def _pf(t: Tensor) -> tuple[int, int]:
    """(partitions, elements per partition) of an on-chip view."""
    return t.shape[0], prod(t.shape[1:])


def _same_pf(call: str, a_role: str, a: Tensor, b_role: str, b: Tensor) -> None:
    if _pf(a) != _pf(b):
        raise NkiReferenceError(
            call, f"{a_role} {a.shape} and {b_role} {b.shape} differ in partitions or "
                  f"elements per partition")


def _op(call: str, role: str, op, kinds) -> Op:
    if not isinstance(op, Op) or op.kind not in kinds:
        raise NkiReferenceError(call, f"{role}={op!r} is not one of the supported "
                                      f"{'/'.join(kinds)} operators")
    return op


def _read2d(call: str, role: str, t: Tensor) -> np.ndarray:
    return t.read(call, role).reshape(_pf(t))


def _per_partition(call: str, role: str, value, partitions: int,
                   dtypes=("float32",)):
    """A scalar operand, or a [P, 1] vector tile (of one of ``dtypes``) broadcast along
    the free axis."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return np.float32(value)
    t = _tile(call, role, value)
    if _pf(t) != (partitions, 1):
        raise NkiReferenceError(
            call, f"{role} {t.shape} must be a number or a [{partitions}, 1] tile")
    if t.dtype.name not in dtypes:
        raise NkiReferenceError(call, f"{role} tile must be {'/'.join(dtypes)}, got "
                                      f"{t.dtype.name}")
    return _read2d(call, role, t).astype(np.float32)


def _alu(op: Op, a, b):
    out = op.fn(a, b)
    return out.astype(np.float32) if op.kind == "cmp" else out


# ---------------------------------------------------------------- the module

def isa_module(state) -> types.ModuleType:
    """``nki.isa`` for one run; instructions that keep engine state use ``state``."""
    nisa = types.ModuleType("nki.isa")
    nisa.reduce_cmd = types.SimpleNamespace(idle="idle", reset="reset", reduce="reduce",
                                            reset_reduce="reset_reduce")
    nisa.engine = types.SimpleNamespace(tensor="tensor", vector="vector", scalar="scalar",
                                        gpsimd="gpsimd", unknown="unknown")

    def dma_copy(dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None,
                 name=None):
        call = "nisa.dma_copy"
        _tile(call, "dst", dst, ("sbuf", "hbm"))
        _tile(call, "src", src, ("sbuf", "hbm"))
        if prod(dst.shape) != prod(src.shape):
            raise NkiReferenceError(
                call, f"src {src.shape} and dst {dst.shape} differ in element count")
        values = src.read(call, "src")
        # The DMA casts through fp32 when the dtypes differ.
        dst.write(call, values.astype(np.float32) if src.dtype is not dst.dtype else values)

    def tensor_copy(dst, src, engine="unknown", name=None):
        call = "nisa.tensor_copy"
        _tile(call, "dst", dst)
        _tile(call, "src", src)
        _same_pf(call, "dst", dst, "src", src)
        dst.write(call, src.read(call, "src"))

    def memset(dst, value, engine="unknown", name=None):
        call = "nisa.memset"
        _tile(call, "dst", dst)
        dst.write(call, np.full(dst.shape, value))

    def nc_matmul(dst, stationary, moving, is_stationary_onezero=False,
                  is_moving_onezero=False, is_transpose=False, accumulate=None,
                  tile_position=(), tile_size=(), name=None):
        call = "nisa.nc_matmul"
        _tile(call, "stationary", stationary, ("sbuf",))
        _tile(call, "moving", moving, ("sbuf",))
        _tile(call, "dst", dst, ("psum",))
        (k, m), (k2, n) = _pf(stationary), _pf(moving)
        if k != k2:
            raise NkiReferenceError(call, f"contraction (partition) sizes differ: stationary "
                                          f"{stationary.shape} vs moving {moving.shape}")
        if m > 128:
            raise NkiReferenceError(call, f"stationary free size {m} > 128")
        if n > 512:
            raise NkiReferenceError(call, f"moving free size {n} > 512 (one PSUM bank)")
        if dst.shape != (m, n):
            raise NkiReferenceError(call, f"dst {dst.shape} must be [stationary free, moving "
                                          f"free] = ({m}, {n})")
        if len(dst.banks()) > 1:
            raise NkiReferenceError(call, f"dst {dst!r} spans PSUM banks "
                                          f"{sorted(dst.banks())}: a matmul writes one 2 KiB "
                                          f"bank")
        if dst.dtype.name != "float32":
            raise NkiReferenceError(call, f"dst must be float32, got {dst.dtype.name}")
        kinds = (stationary.dtype.name, moving.dtype.name)
        if any(d not in _MATMUL_DTYPES for d in kinds):
            raise NkiReferenceError(call, f"input dtypes {kinds}: bf16/fp16/fp32 only")
        if "float32" in kinds and kinds != ("float32", "float32"):
            raise NkiReferenceError(call, f"float32 pairs only with float32, got {kinds}")
        product = _read2d(call, "stationary", stationary).T @ _read2d(call, "moving", moving)
        state_now = dst.alloc.psum_state[dst.key]
        if accumulate is not None and not accumulate:
            add = np.zeros(dst.shape, dtype=bool)
        else:
            if (state_now == PSUM_BY_OTHER).any():
                raise NkiReferenceError(
                    call, "accumulates onto PSUM last written by a non-matmul instruction "
                          "(undefined per the docs); start the group with a matmul")
            add = (np.ones(dst.shape, dtype=bool) if accumulate
                   else state_now == PSUM_BY_MATMUL)
        old = dst.alloc.array[dst.key]
        # Accumulation groups are the reduction the docs allow across affine iterations.
        dst.write(call, np.where(add, old + product, product), by_matmul=True, reduction=True)

    def nc_transpose(dst, data, engine="unknown", name=None):
        call = "nisa.nc_transpose"
        use_tensor = engine == "tensor" or (engine != "vector"
                                            and getattr(dst, "buffer", None) is not None
                                            and dst.buffer.kind == "psum")
        if use_tensor:
            _tile(call, "data", data, ("sbuf",))
            _tile(call, "dst", dst, ("psum",))
            limit = 128
        else:
            _tile(call, "data", data)
            _tile(call, "dst", dst)
            limit = 32
        p, f = _pf(data)
        if p > limit or f > limit:
            raise NkiReferenceError(call, f"data {data.shape} exceeds [{limit}, {limit}] on "
                                          f"the {'Tensor' if use_tensor else 'Vector'} Engine")
        if _pf(dst) != (f, p):
            raise NkiReferenceError(call, f"dst {dst.shape} must be ({f}, {p})")
        if dst.dtype is not data.dtype:
            raise NkiReferenceError(call, f"dst dtype {dst.dtype.name} != data dtype "
                                          f"{data.dtype.name}")
        dst.write(call, _read2d(call, "data", data).T)

    def tensor_tensor(dst, data1, data2, op, engine="unknown", name=None):
        call = "nisa.tensor_tensor"
        op = _op(call, "op", op, ("alu", "cmp"))
        places = ("sbuf",) if op.name == "power" else ("sbuf", "psum")   # GpSimd: no PSUM
        for role, t in (("dst", dst), ("data1", data1), ("data2", data2)):
            _tile(call, role, t, places)
        if data1.buffer.kind == "psum" and data2.buffer.kind == "psum":
            raise NkiReferenceError(call, "data1 and data2 cannot both be in PSUM")
        _same_pf(call, "data1", data1, "data2", data2)
        _same_pf(call, "dst", dst, "data1", data1)
        # dst = dst <op> data with an associative op is a reduction, which an affine loop
        # may carry (the NKI docs' exception to "no loop-carried dependence").
        reducing = op.name in ("add", "multiply", "maximum", "minimum")
        same = [reducing and t.alloc is dst.alloc and t.key == dst.key for t in (data1, data2)]
        a = data1.read(call, "data1", reduction=same[0]).reshape(_pf(data1))
        b = data2.read(call, "data2", reduction=same[1]).reshape(_pf(data2))
        dst.write(call, _alu(op, a, b), reduction=any(same))

    def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                      reverse1=False, engine="unknown", name=None):
        call = "nisa.tensor_scalar"
        _tile(call, "dst", dst)
        _tile(call, "data", data)
        _same_pf(call, "dst", dst, "data", data)
        p = data.shape[0]
        result = _read2d(call, "data", data).astype(np.float32)     # fp32 math, ints too
        steps = [(op0, operand0, reverse0, "op0", "operand0")]
        if op1 is not None or operand1 is not None:
            steps.append((op1, operand1, reverse1, "op1", "operand1"))
        for op, operand, reverse, op_role, operand_role in steps:
            op = _op(call, op_role, op, ("alu", "cmp"))
            value = _per_partition(call, operand_role, operand, p)
            result = _alu(op, value, result) if reverse else _alu(op, result, value)
        dst.write(call, result)

    def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
                   reduce_cmd="idle", name=None):
        call = "nisa.activation"
        op = _op(call, "op", op, ("act",))
        _tile(call, "dst", dst)
        _tile(call, "data", data)
        _same_pf(call, "dst", dst, "data", data)
        p = data.shape[0]
        x = (_read2d(call, "data", data).astype(np.float32)
             * _per_partition(call, "scale", scale, p))
        if bias is not None:
            x = x + _per_partition(call, "bias", bias, p, ("float32", "float16", "bfloat16"))
        out = np.asarray(op.fn(x), dtype=np.float32)
        dst.write(call, out)
        if reduce_op is None and reduce_res is None:
            return
        if reduce_op is not OPS["add"]:
            raise NkiReferenceError(call, f"reduce_op must be nl.add, got {reduce_op!r}")
        regs = state.reduce_regs
        if reduce_cmd in ("reset", "reset_reduce"):
            regs[:p] = 0
        if reduce_cmd in ("reduce", "reset_reduce"):
            regs[:p] += out.sum(axis=1, dtype=np.float32)
        if reduce_res is not None:
            _tile(call, "reduce_res", reduce_res)
            if _pf(reduce_res) != (p, 1):
                raise NkiReferenceError(call, f"reduce_res {reduce_res.shape} must be "
                                              f"[{p}, 1]")
            reduce_res.write(call, regs[:p].copy())

    def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
        call = "nisa.tensor_reduce"
        op = _op(call, "op", op, ("alu",))
        if op.name not in _REDUCE:
            raise NkiReferenceError(call, f"op {op!r} is not a reduction")
        _tile(call, "dst", dst)
        _tile(call, "data", data)
        axes = tuple(sorted({axis} if isinstance(axis, int) else set(axis)))
        rank = data.ndim
        if not axes or axes != tuple(range(rank - len(axes), rank)) or 0 in axes:
            raise NkiReferenceError(
                call, f"axis={axis} on data {data.shape}: must be the last free axes, "
                      f"never the partition axis 0")
        out = _REDUCE[op.name](data.read(call, "data"), axis=axes, keepdims=keepdims)
        if negate:
            out = -out
        if dst.shape[0] != data.shape[0] or prod(dst.shape[1:]) != prod(out.shape[1:]):
            raise NkiReferenceError(call, f"dst {dst.shape} does not hold the reduction "
                                          f"{out.shape} of data {data.shape}")
        dst.write(call, out)

    def _affine(call: str, t: Tensor, pattern, offset, channel_multiplier) -> np.ndarray:
        if not isinstance(pattern, (list, tuple)) or not 1 <= len(pattern) <= 4:
            raise NkiReferenceError(call, f"pattern {pattern!r}: 1 to 4 [step, num] pairs")
        p, f = _pf(t)
        nums = [int(num) for _step, num in pattern]
        if prod(nums) != f:
            raise NkiReferenceError(call, f"pattern counts {nums} cover {prod(nums)} "
                                          f"elements, dst has {f} per partition")
        value = np.full((p, *nums), int(offset), dtype=np.int64)
        value += (np.arange(p) * int(channel_multiplier)).reshape(p, *[1] * len(nums))
        for d, (step, num) in enumerate(pattern):
            shape = [1] * (len(nums) + 1)
            shape[d + 1] = int(num)
            value += (np.arange(int(num)) * int(step)).reshape(shape)
        return value.reshape(p, f)

    def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
        call = "nisa.iota"
        _tile(call, "dst", dst, ("sbuf",))
        dst.write(call, _affine(call, dst, pattern, offset, channel_multiplier))

    def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                      cmp_op=OPS["equal"], offset=0, name=None):
        call = "nisa.affine_select"
        _tile(call, "dst", dst, ("sbuf",))
        _tile(call, "on_true_tile", on_true_tile, ("sbuf",))
        _same_pf(call, "dst", dst, "on_true_tile", on_true_tile)
        cmp_op = _op(call, "cmp_op", cmp_op, ("cmp",))
        if not isinstance(on_false_value, (int, float, np.number)):
            raise NkiReferenceError(call, f"on_false_value must be a number, "
                                          f"got {on_false_value!r}")
        keep = cmp_op.fn(_affine(call, dst, pattern, offset, channel_multiplier), 0)
        on_true = _read2d(call, "on_true_tile", on_true_tile)
        dst.write(call, np.where(keep, on_true, np.float32(on_false_value)))

    for fn in (dma_copy, tensor_copy, memset, nc_matmul, nc_transpose, tensor_tensor,
               tensor_scalar, activation, tensor_reduce, iota, affine_select):
        setattr(nisa, fn.__name__, fn)
    return nisa


__all__ = ["OPS", "Op", "isa_module"]
