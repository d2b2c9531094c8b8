"""``C (+)= op(A) @ op(B)`` on the Tensor Engine: family ``nc_matmul`` (TIRx §5.3).

``nisa.nc_matmul(dst, stationary, moving)`` computes ``stationary.T @ moving``: both
operands hold K on the partitions, the stationary tile's free dim (at most 128) becomes
the output's partitions and the moving tile's (at most 512) its free dim. The rule
matches the operands' digits (``tiles.py``) against that pattern:

1. each logical dim (M, K of A; K, N of B; M, N of C) is read as its digits, outer to
   inner; two operands sharing a dim must split it alike;
2. K: a digit on the partitions in both A and B;
3. with A stationary: M a digit on F in A and on P in C, N a digit on F in B and in C;
   when C's M side has no P digit, the roles swap (B stationary: the output's partitions
   are N, ``C^T = B^T A``);
4. every other digit is an outer loop (M and N loops independent, K loops sequential:
   they accumulate into one PSUM tile). A free digit longer than the instruction allows
   is cut into chunks.

C in PSUM is accumulated in place, cut into matmuls that each write inside one 2 KiB bank
(the largest even chunk of N that never straddles two: 256 for N = 768, not 384); C in SBUF gets a PSUM tile per output tile (one bank:
at most 512 f32) that the K loop accumulates and ``tensor_copy`` (``accum=True``: an add)
drains into C. Instruction shape: ``(M, N, K)`` of one ``nc_matmul`` (``swapped``: M is
C's N). The dispatch record's note names the roles and the loops.
"""
from __future__ import annotations

from tilejit.ir.types import MemScope, bf16, f8e4m3, f8e5m2, f16, f32
from tilejit.layout.hw_trainium import PSUM_BANK_BYTES, psum_layout
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter

from ..ops import MATMUL_FREE
from ..tiles import Digit, split_alike
from .common import (Keep, Placed, named, nest, on_chip_region, past_first, placed,
                     scope_reasons)

__all__ = ["NC_MATMUL"]

INPUT_DTYPES = (f32, bf16, f16, f8e4m3, f8e5m2)
_NAMES = {"A": ("M", "K"), "B": ("K", "N"), "C": ("M", "N")}


def _dims(call: PrimitiveCall, name: str) -> tuple[str, str]:
    """The logical dims of operand ``name`` by letter, transposes applied."""
    dims = _NAMES[name]
    flipped = {"A": call.attrs["transpose_a"], "B": call.attrs["transpose_b"]}.get(name)
    return dims[::-1] if flipped else dims


def _chunks(extent: int, limit: int) -> list[int]:
    """Instruction sizes that cut ``extent`` evenly, at most ``limit``, largest first."""
    return [c for c in range(min(extent, limit), 0, -1) if extent % c == 0]


def _in_one_bank(c: Placed, f_digit: Digit, chunk: int) -> bool:
    """Every matmul into PSUM tile ``c`` that covers ``chunk`` indices of ``f_digit`` writes
    inside one 2 KiB bank (a matmul's dst cannot straddle two): the f32 offsets on ``F``
    that each dst region starts at, over every index of C's other free digits."""
    bank = PSUM_BANK_BYTES // f32.itemsize
    strides = c.tile.strides
    starts = [0]
    for g in (g for group in c.digits for g in group if g.dim > 0):
        steps = range(0, g.extent, chunk) if g is f_digit else range(g.extent)
        starts = [s + (g.base + i * g.step) * strides[g.dim] for s in starts for i in steps]
    span = (chunk - 1) * strides[f_digit.dim]
    return all(s // bank == (s + span) // bank for s in starts)


_SHARERS = {"M": ("A", "C"), "N": ("B", "C"), "K": ("A", "B")}


def _placed_alike(call: PrimitiveCall) -> tuple[dict, list[str]]:
    """C, A, B placed, each dim two of them share cut at the same places
    (``tiles.split_alike``: a PSUM C on banks, N as [2, 512], beside a B with N [1024]);
    or the reasons they cannot be."""
    ops, reasons = {}, []
    for name in ("C", "A", "B"):
        p = placed(call[name])
        if isinstance(p, str):
            reasons.append(p)
        else:
            ops[name] = p
    if reasons:
        return ops, reasons
    digits = {name: dict(zip(_dims(call, name), ops[name].digits)) for name in ops}
    for letter, (x, y) in _SHARERS.items():
        alike = split_alike(digits[x][letter], digits[y][letter])
        if alike is None:
            reasons.append(f"{x} splits {letter} as {[g.extent for g in digits[x][letter]]} "
                           f"but {y} as {[g.extent for g in digits[y][letter]]}: no common "
                           "digits")
        else:
            digits[x][letter], digits[y][letter] = alike
    return {name: Placed(p.operand, p.tile, [digits[name][d] for d in _dims(call, name)])
            for name, p in ops.items()}, reasons


def _match(ops: dict, call: PrimitiveCall):
    """(plan details, reasons): the §5.3 matching over the placed operands."""
    sides = {name: dict(zip(_dims(call, name), ops[name].digits)) for name in ops}
    reasons = []

    def on_p(name, letter, j):
        return sides[name][letter][j].dim == 0

    def pick(letter, need):   # the longest digit of ``letter`` meeting ``need``
        group = sides["A" if letter == "K" else "C"][letter]   # both sharers split alike
        return max((j for j in range(len(group)) if need(j) and all(
                    sides[name][letter][j].step == 1 for name in _SHARERS[letter])),
                   key=lambda j: group[j].extent, default=None)   # a covered range: step 1

    k = pick("K", lambda j: on_p("A", "K", j) and on_p("B", "K", j))
    if k is None:
        return None, ["no digit of K lies on the partitions of both A and B"]
    for swapped, (stat, mov, p_side, f_side) in enumerate((("A", "B", "M", "N"),
                                                             ("B", "A", "N", "M"))):
        m = pick(p_side, lambda j: not on_p(stat, p_side, j) and on_p("C", p_side, j))
        n = pick(f_side, lambda j: not on_p(mov, f_side, j) and not on_p("C", f_side, j))
        if m is None or n is None:
            reasons.append(f"{stat} stationary: the output's partitions would be {p_side}, "
                           f"which needs a digit on F in {stat} and on P in C, and {f_side} "
                           f"on F in {mov} and in C")
            continue
        return {"swapped": bool(swapped), "stationary": stat, "moving": mov,
                "picks": {"K": k, p_side: m, f_side: n}, "hw": (p_side, f_side)}, []
    return None, reasons


def check(call: PrimitiveCall) -> Plan | Decline:
    ops, reasons = _placed_alike(call)
    reasons = scope_reasons(call) + reasons
    c, a, b = call["C"], call["A"], call["B"]
    if c.dtype != f32:
        reasons.append(f"C is {c.dtype}: the Tensor Engine accumulates in f32")
    if a.dtype != b.dtype or a.dtype not in INPUT_DTYPES:
        reasons.append(f"A and B are {a.dtype} and {b.dtype}: nc_matmul multiplies two "
                       f"tiles of one of {', '.join(map(str, INPUT_DTYPES))}")
    for o in (a, b):
        if o.role is MemScope.PSUM:
            reasons.append(f"{o.name} is in PSUM: nc_matmul reads SBUF")
    if reasons:
        return Decline(*reasons)
    match, why = _match(ops, call)
    if match is None:
        return Decline(*why)
    p_side, f_side = match["hw"]
    sides = {name: dict(zip(_dims(call, name), ops[name].digits)) for name in ops}
    digit = {letter: sides["C" if letter != "K" else "A"][letter][j]
             for letter, j in match["picks"].items()}
    m, k = digit[p_side].extent, digit["K"].extent
    # C in PSUM: only chunks whose matmuls each stay in one bank (a chunk of 1 always does)
    shapes = [(m, n, k) for n in _chunks(digit[f_side].extent, MATMUL_FREE["moving"])
              if c.role is not MemScope.PSUM or _in_one_bank(ops["C"], digit[f_side], n)]
    loops = {letter: call["C"].shape[_dims(call, "C").index(letter)] if letter != "K"
             else a.shape[_dims(call, "A").index("K")] for letter in "MNK"}
    hw = {p_side: m, f_side: shapes[0][1], "K": k}
    outer = ", ".join(f"{letter} {loops[letter] // hw[letter]}" for letter in "MNK")
    note = (f"{'swapped: ' if match['swapped'] else ''}{match['stationary']} stationary, "
            f"{match['moving']} moving; outer loops {outer}")
    return Plan(shapes, {**match, "note": note})


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    ops = _placed_alike(call)[0]
    sides = {name: _dims(call, name) for name in ops}
    p_side, f_side = plan.details["hw"]
    chosen = plan.details["picks"]
    size = {p_side: plan.shape[0], f_side: plan.shape[1], "K": plan.shape[2]}
    # one loop per digit not covered, one per chunk of a covered digit cut shorter
    loops, slots = [], []   # slots: (letter, digit index, chunk or None)
    for letter in (p_side, f_side, "K"):
        owner = ops["C" if letter != "K" else "A"]
        group = owner.digits[sides[owner.operand.name].index(letter)]
        for j, g in enumerate(group):
            covered = j == chosen[letter]
            if covered and g.extent == size[letter]:
                continue
            trips = g.extent // size[letter] if covered else g.extent
            slots.append((letter, j, size[letter] if covered else None))
            loops.append((trips, letter != "K", letter.lower()))
    for i, (letter, j, _) in enumerate(slots):   # m, or m0, m1 where M has several loops
        if sum(slot[0] == letter for slot in slots) > 1:
            loops[i] = (*loops[i][:2], f"{letter.lower()}{j}")
    in_psum = call["C"].role is MemScope.PSUM
    outer = [i for i, slot in enumerate(slots) if slot[0] != "K"]
    inner = [i for i, slot in enumerate(slots) if slot[0] == "K"]

    def region(name, picks):
        letters = sides[name]
        return on_chip_region(em, ops[name], {(letters.index(letter), j): pick
                                              for (letter, j), pick in picks.items()
                                              if letter in letters})

    def picked(indices, ivs, picks):
        for i, iv in zip(indices, ivs):
            letter, j, chunk = slots[i]
            picks[(letter, j)] = Keep(em.mul(iv, chunk), chunk) if chunk else iv
        return picks

    def tile(out_ivs):
        picks = picked(outer, out_ivs, {(letter, chosen[letter]): Keep(0, size[letter])
                                        for letter in size})
        c = region("C", picks)
        acc = c if in_psum else named(em.b.alloc(MemScope.PSUM, f32,
                                                 (size[p_side], size[f_side]),
                                                 psum_layout((size[p_side], size[f_side]))),
                                      "acc")

        def step(k_ivs):
            at = picked(inner, k_ivs, dict(picks))
            # a fresh PSUM tile needs no flag (the first matmul into it overwrites)
            flag = (past_first(em, k_ivs, call.attrs["accum"]),) if in_psum else ()
            em.b.create("nki.matmul", (acc, region(plan.details["stationary"], at),
                                       region(plan.details["moving"], at), *flag))
        nest(em, [loops[i] for i in inner], step)
        if in_psum:
            return
        if call.attrs["accum"]:   # drain the PSUM tile into C
            em.b.create("nki.tensor_tensor", (c, c, acc), {"op": "add"})
        else:
            em.b.create("nki.tensor_copy", (c, acc))

    nest(em, [loops[i] for i in outer], tile)


NC_MATMUL = register(Rule("nc_matmul", "gemm", check, lower, targets=("nki",), priority=10,
                          doc="nisa.nc_matmul with the P/F matching of TIRx §5.3"))
