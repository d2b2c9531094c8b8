"""The CPU instructions (``cpu.*`` ops, ``ops.py``) written with LLVM vector types.

``HANDLERS`` maps each op to its emitter: ``cpu.bitcast``, ``cpu.ldexp``,
``cpu.store_streaming``, ``cpu.gemm_block`` (the register-blocked micro-kernel) and
``cpu.row_reduce`` (four interleaved vector accumulators, a masked tail and a shuffle
tree; max/min note NaNs with one compare per vector). What each computes, and the
operands it takes, is in ``ops.py``; its compile-time parameters are attributes.

Operands are addressed through their strides (``affine_strides``): the rules only pass
tiles whose logical dims each have one stride (and a unit stride where a vector is read).
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm
from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.addressing import Addressing
from tilejit.ir.types import MemScope, i1

from . import abi, types
from .emit_memory import RegionRef, element_ptr
from .metadata import loop_id
from .ops import row_reduce_operands
from .types import F32, I1, I8, I32, I64, PTR, VOID

__all__ = ["HANDLERS", "addressing_strides", "affine_strides"]

_UNROLL_K = 4        # micro-kernel k steps per loop trip
_REDUCE_ACCUMULATORS = 4  # independent vector chains (hides the add/max latency)


# ----------------------------------------------------------------------------- helpers
def affine_strides(ref) -> list:
    """Per logical dim of ``ref``, its element stride (int or i64 value); raises when a
    dim has no single stride (swizzled or split layouts)."""
    if isinstance(ref, RegionRef):
        parent = affine_strides(ref.parent)
        return [s for s, kept in zip(parent, ref.keep) if kept]
    if ref.strides is not None:
        return list(ref.strides)
    strides = addressing_strides(ref.addressing) if ref.reshaped is None else None
    if strides is None:
        raise CompilationError(f"{ref.name} has no single stride per dimension; the CPU "
                               "vector instructions need affine tiles")
    return strides


def addressing_strides(addressing: Addressing | None) -> list[int] | None:
    """Per dim the element stride of an on-chip buffer's addressing, or None when a dim
    is split over several iters, swizzled or addressed through the flat index."""
    if addressing is None or addressing.dims is None or addressing.swizzle is not None:
        return None
    strides = []
    for iters in addressing.dims:
        real = [(extent, stride) for extent, stride in iters if extent > 1]
        if len(real) > 1 or (real and real[0][1] == 0):
            return None
        # A dim of extent 1 is only ever indexed by 0: any stride will do.
        strides.append(real[0][1] if real else iters[0][1] if iters else 0)
    return strides


def _base_ptr(em, ref, indices):
    """Address of ``ref[indices]`` (i64 index values)."""
    b = em.b
    if isinstance(ref, RegionRef):
        indices, ref = ref.parent_indices(b, indices), ref.parent
    return ref.element_ptr(b, indices)


def _i64(em, value):
    return value if isinstance(value, ir.Value) and value.type == I64 else (
        em.b.sext(value, I64) if isinstance(value, ir.Value) else ir.Constant(I64, value))


def _offset(em, ptr, elements):
    """``ptr`` advanced by ``elements`` f32 elements (int or i64 value)."""
    if isinstance(elements, int) and elements == 0:
        return ptr
    return em.b.gep(ptr, [_i64(em, elements)], inbounds=True, source_etype=F32)


def _scaled(em, index, stride):
    """``index * stride`` folded where both are known."""
    if isinstance(index, int) and isinstance(stride, int):
        return index * stride
    return em.b.mul(_i64(em, index), _i64(em, stride))


def _check_block(em, op, ref, first, last) -> None:
    """Debug mode: the block's first and last logical indices lie inside ``ref``."""
    if not em.options.debug:
        return
    b = em.b
    shape = ref.shape
    ok = ir.Constant(I1, 1)
    for index in (first, last):
        for i, dim in zip(index, shape):
            ok = b.and_(ok, b.icmp_unsigned("<", _i64(em, i), em.i64(dim)))
    buffer = ref.parent if isinstance(ref, RegionRef) else ref
    site = em.mc.add_site("bounds", op, buffer=buffer.name, scope=str(buffer.scope),
                          rank=len(shape))
    em.fail_unless(ok, abi.OUT_OF_BOUNDS, site, [_i64(em, i) for i in last],
                   [em.i64(d) for d in shape])


def _vector(lanes: int) -> ir.VectorType:
    return ir.VectorType(F32, lanes)


def _mask(count: int, lanes: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, lanes), [int(i < count) for i in range(lanes)])


def _load_vector(em, ptr, lanes: int, count: int, passthru: ir.Value):
    """``count`` (<= lanes) consecutive floats at ``ptr``, the rest from ``passthru``."""
    vt = _vector(lanes)
    if count == lanes:
        return em.b.load(ptr, typ=vt, align=4)
    fn = em.mc.function(f"llvm.masked.load.v{lanes}f32.p0", vt,
                        [PTR, I32, ir.VectorType(I1, lanes), vt])
    return em.b.call(fn, [ptr, ir.Constant(I32, 4), _mask(count, lanes), passthru])


def _store_vector(em, value, ptr, lanes: int, count: int) -> None:
    if count == lanes:
        em.b.store(value, ptr, align=4)
        return
    vt = _vector(lanes)
    fn = em.mc.function(f"llvm.masked.store.v{lanes}f32.p0", VOID,
                        [vt, PTR, I32, ir.VectorType(I1, lanes)])
    em.b.call(fn, [value, ptr, ir.Constant(I32, 4), _mask(count, lanes)])


def _splat(em, scalar, lanes: int):
    vt = ir.VectorType(scalar.type, lanes)
    one = em.b.insert_element(ir.Constant(vt, ir.Undefined), scalar, ir.Constant(I32, 0))
    return em.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                               ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def _counted(em, trips: int, carried: list, body, unroll: int | None = None) -> list:
    """``for t in range(trips)`` (i64 counter) carrying ``carried``; ``body(t, values)``
    returns the next values. Returns the final values."""
    if trips <= 0:
        return carried
    b = em.b
    pre = b.block
    loop = b.append_basic_block("vec.loop")
    done = b.append_basic_block("vec.done")
    b.branch(loop)
    b.position_at_end(loop)
    t = b.phi(I64)
    t.add_incoming(ir.Constant(I64, 0), pre)
    phis = [b.phi(v.type) for v in carried]
    for phi, value in zip(phis, carried):
        phi.add_incoming(value, pre)
    following = body(t, phis)
    step = b.add(t, ir.Constant(I64, 1), flags=("nuw", "nsw"))
    t.add_incoming(step, b.block)
    for phi, value in zip(phis, following):
        phi.add_incoming(value, b.block)
    back = b.cbranch(b.icmp_unsigned("<", step, ir.Constant(I64, trips)), loop, done)
    hints = [("llvm.loop.vectorize.enable", ir.Constant(I1, 0))]
    if unroll:
        hints.append(("llvm.loop.unroll.count", ir.Constant(I32, unroll)))
    back.set_metadata("llvm.loop", loop_id(b.module, hints))
    b.position_at_end(done)
    return following


# ----------------------------------------------------------------------------- bitcast
def emit_bitcast(em, op):
    """Both types have one width (the op's check): registers of one type need no cast."""
    value, target = em[op.operands[0]], types.register_type(op.result.type)
    return [value if value.type == target else em.b.bitcast(value, target)]


# ----------------------------------------------------------------------------- ldexp
@functools.cache
def _has_scalef() -> bool:
    """AVX-512 has ``vscalefps``, which LLVM uses for (vectorized) ``llvm.ldexp``; elsewhere
    ``llvm.ldexp`` becomes a libm call per element."""
    return bool(llvm.get_host_cpu_features().get("avx512f"))


def emit_ldexp(em, op):
    """``x * 2^n`` for an f32 ``x`` and an i32 ``n`` in [-252, 254], rounded once (results
    in the subnormal range and overflow to infinity included)."""
    x, n = em[op.operands[0]], em[op.operands[1]]
    b = em.b
    if _has_scalef():
        return [em.intrinsic("llvm.ldexp.f32.i32", F32, [x, n])]
    # Two factors 2^h * 2^(n-h), each a normal number, so only the last product rounds.
    half = b.ashr(n, ir.Constant(I32, 1))

    def pow2(k):
        biased = b.add(k, ir.Constant(I32, 127))
        return b.bitcast(b.shl(biased, ir.Constant(I32, 23)), F32)
    return [b.fmul(b.fmul(x, pow2(half)), pow2(b.sub(n, half)))]


# ----------------------------------------------------------------------------- streaming
def emit_store_streaming(em, op):
    """``store`` that bypasses the caches (LLVM ``!nontemporal``; ``vmovntps`` once
    vectorized): for outputs that will not be read again soon."""
    buf, value, *indices = op.operands
    ptr, ref = element_ptr(em, op, em[buf], indices)
    hint = em.mc.module.add_metadata([ir.Constant(I32, 1)])

    def mark(instruction):
        instruction.set_metadata("nontemporal", hint)
        em.mc.alias.tag(instruction, ref.scope is MemScope.GLOBAL)
    types.store(em.b, em[value], ptr, ref.dtype, tag=mark)
    em.mc.streaming_stores = True
    return []


# ----------------------------------------------------------------------------- gemm
def emit_gemm_block(em, op):
    c_val, a_val, b_val, i0_val, j0_val = op.operands
    mr, nr, k, lanes, transpose_a, accum = (op.attrs[name] for name in (
        "mr", "nr", "k", "lanes", "transpose_a", "accum"))
    c, a, bt = em[c_val], em[a_val], em[b_val]
    bld = em.b
    i0, j0 = _i64(em, em[i0_val]), _i64(em, em[j0_val])
    zero = ir.Constant(I64, 0)
    sc, sa, sb = affine_strides(c), affine_strides(a), affine_strides(bt)
    if nr > 1 and (sc[1] != 1 or sb[1] != 1):
        raise CompilationError("cpu.gemm_block needs C and B with unit-stride rows")
    if k > 0:
        _check_block(em, op, a, [zero, i0] if transpose_a else [i0, zero],
                     [ir.Constant(I64, k - 1), bld.add(i0, ir.Constant(I64, mr - 1))]
                     if transpose_a else [bld.add(i0, ir.Constant(I64, mr - 1)),
                                          ir.Constant(I64, k - 1)])
        _check_block(em, op, bt, [zero, j0], [ir.Constant(I64, k - 1),
                                               bld.add(j0, ir.Constant(I64, nr - 1))])
    _check_block(em, op, c, [i0, j0], [bld.add(i0, ir.Constant(I64, mr - 1)),
                                       bld.add(j0, ir.Constant(I64, nr - 1))])
    c_ptr = _base_ptr(em, c, [i0, j0])
    a_ptr = _base_ptr(em, a, [zero, i0] if transpose_a else [i0, zero])
    b_ptr = _base_ptr(em, bt, [zero, j0])
    a_row, a_step = (sa[1], sa[0]) if transpose_a else (sa[0], sa[1])  # per row of C, per k
    vectors = [(v * lanes, min(lanes, nr - v * lanes)) for v in range(-(-nr // lanes))]
    vt = _vector(lanes)
    zeros = ir.Constant(vt, [0.0] * lanes)
    c_rows = [_offset(em, c_ptr, _scaled(em, r, sc[0])) for r in range(mr)]
    a_rows = [_offset(em, a_ptr, _scaled(em, r, a_row)) for r in range(mr)]
    if accum:
        accs = [_load_vector(em, _offset(em, c_rows[r], col), lanes, count, zeros)
                for r in range(mr) for col, count in vectors]
    else:
        accs = [zeros] * (mr * len(vectors))
    fma = em.mc.function(f"llvm.fma.v{lanes}f32", vt, [vt, vt, vt])

    def step(kk, values):
        b_k = _offset(em, b_ptr, _scaled(em, kk, sb[0]))
        b_vecs = [_load_vector(em, _offset(em, b_k, col), lanes, count, zeros)
                  for col, count in vectors]
        out = []
        for r in range(mr):
            a_ptr_k = _offset(em, a_rows[r], _scaled(em, kk, a_step))
            a_vec = _splat(em, bld.load(a_ptr_k, typ=F32, align=4), lanes)
            for v, b_vec in enumerate(b_vecs):
                out.append(bld.call(fma, [a_vec, b_vec, values[r * len(vectors) + v]]))
        return out

    accs = _counted(em, k, accs, step, unroll=_UNROLL_K if k >= 2 * _UNROLL_K else None)
    for r in range(mr):
        for v, (col, count) in enumerate(vectors):
            _store_vector(em, accs[r * len(vectors) + v], _offset(em, c_rows[r], col), lanes,
                          count)
    return []


# ----------------------------------------------------------------------------- reduce
def _identity(op: str) -> float:
    return {"sum": 0.0, "max": float("-inf"), "min": float("inf")}[op]


def _horizontal(em, op: str, vec, lanes: int):
    """The vector's lanes combined as a tree of halves (NaN-free for max/min)."""
    while lanes > 1:
        half = lanes // 2
        lo = em.b.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, half),
                                                       list(range(half))))
        hi = em.b.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, half),
                                                       list(range(half, lanes))))
        vec = em.b.fadd(lo, hi) if op == "sum" else _ordered(em, op, lo, hi)
        lanes = half
    return em.b.extract_element(vec, ir.Constant(I32, 0))


def _ordered(em, op: str, acc, x):
    """max/min without NaN handling (one ``vmaxps``/``vminps``): ``x`` unless ``acc``
    compares greater (less)."""
    keep = em.b.fcmp_ordered(">" if op == "max" else "<", acc, x)
    return em.b.select(keep, acc, x)


def _row_pointer(em, op, ref, start_vals, length):
    """The address of the row of ``length`` elements of ``ref`` from ``start_vals``."""
    strides = affine_strides(ref)
    if strides[-1] != 1 and length > 1:
        raise CompilationError("cpu.row_reduce needs a unit-stride innermost dim")
    start = [_i64(em, em[v]) for v in start_vals]
    last = start[:-1] + [em.b.add(start[-1], ir.Constant(I64, max(length, 1) - 1))]
    _check_block(em, op, ref, start, last)
    return _base_ptr(em, ref, start)


def _chain_reader(em, op, sources, src_ptr, length, lanes, identity):
    """``read(offset, count)``: the vector of row elements ``offset ..`` (``count`` of
    them, the rest ``identity``), computed by ``op``'s fused chain (``steps``) from src's
    row (value 0) and ``sources`` (``ops.row_reduce_operands``): a tile's row, or a
    scalar broadcast along the row."""
    b = em.b
    rows, flags, scalars = {0: src_ptr}, {}, {}
    for number, (value, start) in enumerate(sources, start=1):
        ref = em[value]
        if isinstance(ref, ir.Value):
            scalars[number] = _splat(em, ref, lanes)
            continue
        row = _row_pointer(em, op, ref, start, length)
        buffer = getattr(value.type, "buffer", value.type)
        if buffer.dtype == i1:    # a mask: one byte per element
            flags[number] = row
        else:
            rows[number] = row
    steps = [(name, args) for name, _, *args in op.attrs["steps"]]
    zero = ir.Constant(_vector(lanes), [0.0] * lanes)

    def read(offset, count):
        values = [None] * (len(sources) + 1)
        for number, ptr in rows.items():
            values[number] = _load_vector(em, _offset(em, ptr, offset), lanes, count, zero)
        for number, ptr in flags.items():
            values[number] = _load_flags(em, ptr, offset, lanes, count)
        for number, vec in scalars.items():
            values[number] = vec
        for name, args in steps:
            values.append(_chain_step(b, name, [values[a] for a in args]))
        if count == lanes:
            return values[-1]
        return b.select(_mask(count, lanes), values[-1], identity)
    return read


def _load_flags(em, ptr, offset, lanes: int, count: int):
    """``count`` bools (bytes) from element ``offset`` of ``ptr`` as an i1 vector; the
    rest False."""
    b, bytes_ = em.b, ir.VectorType(I8, lanes)
    at = b.gep(ptr, [_i64(em, offset)], inbounds=True, source_etype=I8)
    if count == lanes:
        loaded = b.load(at, typ=bytes_, align=1)
    else:
        fn = em.mc.function(f"llvm.masked.load.v{lanes}i8.p0", bytes_,
                            [PTR, I32, ir.VectorType(I1, lanes), bytes_])
        loaded = b.call(fn, [at, ir.Constant(I32, 1), _mask(count, lanes),
                             ir.Constant(bytes_, [0] * lanes)])
    return b.icmp_unsigned("!=", loaded, ir.Constant(bytes_, [0] * lanes))


def _chain_step(b, name, args):
    """One step as the element loops compute it (``fma``: a product, then a sum)."""
    if name == "select":
        return b.select(*args)
    if name == "fma":
        return b.fadd(b.fmul(args[0], args[1]), args[2])
    if name == "neg":
        return b.fneg(args[0])
    return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[name](*args)


def emit_row_reduce(em, op):
    name, length, lanes = op.attrs["op"], op.attrs["length"], op.attrs["lanes"]
    start_vals, sources = row_reduce_operands(op)
    b = em.b
    ptr = _row_pointer(em, op, em[op.operands[0]], start_vals, length)
    vt, mask_type = _vector(lanes), ir.VectorType(I1, lanes)
    identity = ir.Constant(vt, [_identity(name)] * lanes)
    if op.attrs["steps"] is not None:
        read = _chain_reader(em, op, sources, ptr, length, lanes, identity)
    else:
        def read(offset, count):
            return _load_vector(em, _offset(em, ptr, offset), lanes, count, identity)
    group = lanes * _REDUCE_ACCUMULATORS
    trips, rest = divmod(length, group)
    # max/min: plain ordered compares in the loop, NaNs noted on the side (one compare
    # and an or per vector instead of llvm.maximum's NaN and signed-zero fix-ups).
    fold = (lambda acc, x: b.fadd(acc, x)) if name == "sum" else \
        (lambda acc, x: _ordered(em, name, acc, x))

    def nan_seen(seen, x):
        return seen if name == "sum" else b.or_(seen, b.fcmp_unordered("uno", x, x))

    no_nan = ir.Constant(mask_type, [0] * lanes)

    def step(t, carried):
        *accs, seen = carried
        offset = b.mul(t, ir.Constant(I64, group))
        out = []
        for u, acc in enumerate(accs):
            x = read(b.add(offset, ir.Constant(I64, u * lanes)), lanes)
            out.append(fold(acc, x))
            seen = nan_seen(seen, x)
        return [*out, seen]

    # Not unrolled: unrolled, a long row's loads would be shared with the next pass over
    # the same row (softmax, layer norm), more vectors than registers, spilled.
    *accs, seen = _counted(em, trips, [identity] * _REDUCE_ACCUMULATORS + [no_nan], step,
                           unroll=1)
    done, u = trips * group, 0
    while rest > 0:  # whole vectors, then a masked one, into the accumulators in turn
        count = min(lanes, rest)
        x = read(done, count)
        accs[u], seen = fold(accs[u], x), nan_seen(seen, x)
        u, done, rest = (u + 1) % len(accs), done + count, rest - count
    while len(accs) > 1:
        accs = [fold(accs[i], accs[i + 1]) for i in range(0, len(accs), 2)]
    total = _horizontal(em, name, accs[0], lanes)
    if name == "sum":
        return [total]
    any_nan = b.call(em.mc.function(f"llvm.vector.reduce.or.v{lanes}i1", I1, [mask_type]),
                     [seen])
    return [b.select(any_nan, ir.Constant(F32, float("nan")), total)]


HANDLERS = {"cpu.bitcast": emit_bitcast, "cpu.ldexp": emit_ldexp,
            "cpu.store_streaming": emit_store_streaming, "cpu.gemm_block": emit_gemm_block,
            "cpu.row_reduce": emit_row_reduce}
