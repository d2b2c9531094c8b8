"""``packed``: per thread, a pointwise op on f16 or bf16 computing two elements a thread
holds with one instruction (``packed_binary`` / ``packed_unary`` / ``packed_cast``: a
GPU's ``add.rn.f16x2``, ``max.NaN.bf16x2``, ``neg.f16x2``, ``cvt.rn.f16x2.f32`` ...), and
a copy converting f32 registers to f16 or bf16 ones (``packed_cast``).

Legal (else a Decline naming each condition that fails) when:

* the op -- or each step of a fused chain -- is add, sub, mul, maximum, minimum, neg or
  abs computed in f16 or bf16, or a cast (or an unmasked copy) of f32 values to f16 or
  bf16: the ops whose pair form gives each lane the scalar op's bits
  (``ir/ops_packed.py``; an fma is not: the scalar one rounds twice);
* the element loop is legal and distributed per thread over a layout (``Owned``), whose
  runs of the last dim are of even length, each starting at an even index (so a thread's
  pairs are (2j, 2j + 1): ``Owned.misaligned_runs``);
* every tile operand has the destination's shape and lives in registers (a fragment or
  local buffer) whose layout places the pair in one 32-bit register: the last dim's
  innermost iter is ``m`` with stride 1 and an even extent, and every other ``m`` stride
  and the ``m`` offset are even, so the pair is registers (2r, 2r + 1);
* the arch (where one is known) has the instruction: f16 add/sub/mul/neg/abs from sm_53,
  the rest from sm_80 (bf16 add/sub/mul as one ``fma.rn.bf16x2`` before sm_90).

Lowering: each thread visits the first element of each of its pairs (``Owned.by_runs``),
loads both elements of every source and, per step of the chain, converts its arguments to
the step's type as the scalar family does and issues one packed op; the last pair is
stored.
"""
from __future__ import annotations

import re

from ...errors import LayoutError
from ...ir.ops_tile import FUSED
from ...ir.types import MemScope, bf16, f16, f32
from ...layout import TileLayout
from ...layout.transform import group_iters
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import PER_THREAD, Decline, Plan, Rule, register
from ..distribution import Owned
from ..loopgen import Box, Emitter
from .elementwise import element_loop_legality

__all__ = ["MIN_SM", "PACKED_COPY", "PACKED_POINTWISE"]

PAIR = 2
PACKED_TYPES = (f16, bf16)
# pointwise op (a copy's is "copy") -> packed_binary / packed_unary op; "cast" is
# packed_cast
PACKED_OPS = {"add": "add", "sub": "sub", "mul": "mul", "maximum": "max", "minimum": "min",
              "neg": "neg", "abs": "abs", "cast": "cast", "copy": "cast"}
UNARY = ("neg", "abs")
# (packed op, type) -> the first arch with its instruction (PTX ISA: f16x2 add/sub/mul,
# neg/abs sm_53; max/min (.NaN) f16x2 and bf16x2, bf16x2 neg/abs, fma.rn.bf16x2 and
# cvt.rn.{f16,bf16}x2.f32 sm_80)
MIN_SM = {**{(op, f16): 53 for op in ("add", "sub", "mul", *UNARY)},
          **{(op, bf16): 80 for op in ("add", "sub", "mul", *UNARY)},
          **{(op, t): 80 for op in ("max", "min", "cast") for t in PACKED_TYPES}}
REGISTERS = (MemScope.FRAGMENT, MemScope.LOCAL)


def _steps(call: PrimitiveCall) -> list[tuple]:
    """The ops ``call`` computes per element as ``(op, dtype, argument indices)``: values
    ``0 .. len(sources) - 1`` are the sources, step ``k`` defines value
    ``len(sources) + k`` (a fused chain's steps; a plain op is a chain of one)."""
    op = call.attrs.get("op", "copy")
    if op == FUSED:
        return [(name, dtype, tuple(args)) for name, dtype, *args in call.attrs["steps"]]
    return [(op, call.operands[0].dtype, tuple(range(len(call.operands) - 1)))]


def _op_reasons(call: PrimitiveCall) -> list[str]:
    if call.attrs.get("op", "copy") == "copy" and len(call.operands) > 2:
        return ["a masked copy (mask=/other=) moves element by element"]
    steps = _steps(call)
    types = [o.dtype for o in call.operands[1:]] + [dtype for _, dtype, _ in steps]
    sm = re.match(r"sm_(\d+)", call.context.arch or "")
    reasons = []
    for op, dtype, args in steps:
        step = f"step {op} of the fused chain" if len(steps) > 1 else op
        if op == "fma":
            reasons.append(f"{step}: the scalar fma rounds its product and its sum, "
                           "fma.rn.f16x2 rounds once, so a pair would not give each lane the "
                           "scalar bits")
            continue
        if op not in PACKED_OPS:
            reasons.append(f"{step} has no packed f16x2/bf16x2 form here (packed: "
                           f"{', '.join(PACKED_OPS)})")
            continue
        if dtype not in PACKED_TYPES:
            reasons.append(f"{step} computes {dtype}: pairs are f16 or bf16")
        if PACKED_OPS[op] == "cast" and types[args[0]] != f32:
            reasons.append(f"a {step} from {types[args[0]]}: cvt.rn.{{f16,bf16}}x2 rounds "
                           "pairs of f32")
        key = (PACKED_OPS[op], dtype)
        if sm is not None and key in MIN_SM and int(sm.group(1)) < MIN_SM[key]:
            reasons.append(f"{dtype} pairs of {op} need sm_{MIN_SM[key]} or later; "
                           f"compiling for {call.context.arch}")
    return reasons


def pair_in_one_register(o: Operand) -> str | None:
    """Why ``o``'s layout does not put each even-started pair of its last dim into one
    32-bit register (registers 2r, 2r + 1); None: it does."""
    if not isinstance(o.layout, TileLayout):
        return f"{o.name} has no register layout that places its pairs"
    try:
        used, groups = group_iters(o.layout.canonicalize(), tuple(o.shape))
    except LayoutError as err:
        return f"{o.name}'s layout does not fit its shape: {err.message}"
    inner = groups[-1][-1] if groups[-1] else None
    if inner is None or inner.axis.name != "m" or inner.stride != 1 or inner.extent % PAIR:
        return (f"{o.name}'s layout {o.layout} does not give a thread two consecutive "
                "elements of the last dim in consecutive registers")
    odd = [it.stride for group in groups for it in group
           if it is not inner and it.axis.name == "m" and it.extent > 1 and it.stride % PAIR]
    if odd or used.offset.get("m", 0) % PAIR:
        return (f"{o.name}'s layout {o.layout} starts pairs at odd registers: a pair would "
                "straddle two 32-bit registers")
    return None


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = _op_reasons(call)
    if reasons:
        return Decline(*reasons)
    reasons, dist = element_loop_legality(call)
    if reasons:
        return Decline(*reasons)
    if not isinstance(dist, Owned):
        return Decline(f"no operand is laid out over threads (distribution: {dist}), so no "
                       "thread holds pairs")
    if dist.run_extent() % PAIR:
        runs = "single elements" if dist.run_extent() == 1 \
            else f"runs of {dist.run_extent()} elements"
        return Decline(f"{dist.driver.name}'s layout {dist.driver.layout} gives each thread "
                       f"{runs} of the last dim, no pairs")
    misaligned = dist.misaligned_runs(PAIR)
    if misaligned:
        return Decline(misaligned)
    dst = call.operands[0]
    for o in call.tiles:
        if tuple(o.shape) != tuple(dst.shape):
            reasons.append(f"{o.name} {list(o.shape)} broadcasts to dst {list(dst.shape)}: "
                           "its pairs are not two of its own registers")
        elif o.role not in REGISTERS:
            reasons.append(f"{o.name} is in {o.role} memory: pairs are packed from registers")
        else:
            why = pair_in_one_register(o)
            if why:
                reasons.append(why)
    if reasons:
        return Decline(*reasons)
    return Plan([(PAIR,)], {"distribution": dist, "pairs": dist.by_runs(PAIR)})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, srcs, steps = call.operands[0], call.operands[1:], _steps(call)

    def convert(pair, dtype):
        return [v if v.type == dtype else em.b.cast(v, dtype) for v in pair]

    def pair(idx: list) -> None:
        elements = [idx, [*idx[:-1], em.add(idx[-1], 1)]]
        values = [[em.load(s, element) for element in elements] for s in srcs]
        for name, dtype, args in steps:
            op = PACKED_OPS[name]
            if op == "cast":   # its source is f32 (check)
                values.append(em.b.packed_cast(*values[args[0]], dtype))
                continue
            # the arguments in the computed type, as the scalar family converts them
            pairs = [convert(values[a], dtype) for a in args]
            values.append(em.b.packed_unary(op, *pairs) if op in UNARY
                          else em.b.packed_binary(op, *pairs))
        for value, element in zip(convert(values[-1], dst.dtype), elements):
            em.store(dst, value, element)

    plan.details["pairs"].emit(em, [(Box.full(list(dst.shape)), pair)])


def _rule(primitive: str) -> Rule:
    # After ``vec`` (which needs a tensor side) and before the ``scalar`` fallback.
    return register(Rule("packed", primitive, check, lower, priority=-2,
                         distributions=(PER_THREAD,),
                         doc="per thread: pairs of f16/bf16 in one f16x2/bf16x2 instruction"))


PACKED_COPY, PACKED_POINTWISE = _rule("copy"), _rule("pointwise")
