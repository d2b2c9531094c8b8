"""The cuda printer's synchronization, atomics, printing and intrinsics.

Barriers: ``sync`` is ``__syncthreads()``; an empty ``single {team}`` (what sync-hazards
inserts) is a ``__syncwarp(mask)`` for a warp, a named barrier ``bar.sync 1 + wg, n`` for a
warpgroup and ``__syncthreads()`` (or ``bar.sync 0, n`` under a warp filter) for the CTA.
Shuffles read the lane's own value when the source lane falls outside the warp, as the
CPU's do. mbarriers and ``elect_sync`` call the prelude's inline-PTX helpers. Atomics on
global and shared memory are one inline-PTX ``atom`` with the op's memory order and
scope, or a compare-and-swap loop where PTX has no such ``atom``; on a thread's own
``local`` memory they are a plain read-modify-write, as the CPU's non-global ones are.
"""
from __future__ import annotations

import json

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.ops_native import printf_conversions
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP
from tilejit.ir.types import MemScope, TeamKind, bf16, f16, f32, f64, i32, i64, u32, u64

from .emit import CudaPrinter, element
from .emit_cluster import remote_barrier
from .emit_scalar import C_TYPES, NARROW_FLOATS, narrow, wide

__all__ = ["HANDLERS"]


# ------------------------------------------------------------------------------ barriers
def print_sync(p: CudaPrinter, op: Operation) -> None:
    p.emit("__syncthreads();")


def print_single(p: CudaPrinter, op: Operation) -> None:
    if any(not o.opdef.terminator for o in op.regions[0].ops):
        raise CompilationError("a 'single' region with a body is not supported by the cuda "
                               "target yet (per-thread lowering leaves only empty ones, "
                               "which are barriers)")
    team, active = op.attrs["team"], p.active
    if team is TeamKind.THREAD:
        return
    if team is TeamKind.WARP:
        p.emit(f"__syncwarp({p.lane_mask()});")
    elif team is TeamKind.WARPGROUP:
        p.emit(f'asm volatile("bar.sync %0, %1;" :: "r"(1 + (int)(threadIdx.x >> 7)), '
               f'"r"({_warpgroup_threads(p)}) : "memory");')
    elif team is TeamKind.CTA:
        if active is not None and len(active.warp_ids) == p.num_warps:
            p.emit("__syncthreads();")
        elif active is not None:
            count = LANES_PER_WARP * len(active.warp_ids)
            p.emit(f'asm volatile("bar.sync 0, {count};" ::: "memory");')
        else:
            raise CompilationError("a CTA barrier where the active threads are not known")
    else:
        raise CompilationError(f"a {team} barrier is not supported by the cuda target yet")


def _warpgroup_threads(p: CudaPrinter) -> str:
    """The threads of this thread's warpgroup that reach the barrier (a C expression)."""
    active = p.active
    if active is None:
        raise CompilationError("a warpgroup barrier where the active threads are not known")
    groups = -(-p.num_warps // WARPS_PER_WARPGROUP)
    counts = [0] * groups
    for w in active.warp_ids:
        counts[w // WARPS_PER_WARPGROUP] += LANES_PER_WARP
    present = sorted({c for c in counts if c})
    if len(present) == 1:
        return str(present[0])
    choices = "".join(f"(threadIdx.x >> 7) == {g} ? {c} : " for g, c in enumerate(counts[:-1]))
    return f"({choices}{counts[-1]})"


# ------------------------------------------------------------------------------ warps
_SHUFFLE = {"xor": "__shfl_xor_sync", "down": "__shfl_down_sync", "up": "__shfl_up_sync",
            "idx": "__shfl_sync"}
_SHUFFLE_TYPES = (i32, u32, i64, u64, f32, f64, f16, bf16)


def print_warp_shuffle(p: CudaPrinter, op: Operation) -> None:
    value, lane = op.operands
    mode, t = op.attrs["mode"], value.type
    fn = _SHUFFLE[mode]
    constant = lane.owner.attrs["value"] if isinstance(lane.owner, Operation) \
        and lane.owner.name == "const" else None
    delta = p[lane] if lane.type == i32 else f"(int){p[lane]}"
    if t in _SHUFFLE_TYPES:
        shuffled = f"{fn}({p.lane_mask()}, {p[value]}, {delta})"
    elif t in NARROW_FLOATS:
        shuffled = narrow(f"{fn}({p.lane_mask()}, {wide(p, value)}, {delta})", t)
    else:   # bool and narrow ints travel as an int
        shuffled = f"({C_TYPES[t]}){fn}({p.lane_mask()}, (int){p[value]}, {delta})"
    if mode == "idx" or (constant is not None and 0 <= constant < LANES_PER_WARP):
        p.define(op.result, shuffled)
        return
    # PTX reads only 5 bits of the delta; the CPU reads the lane's own value for a source
    # lane past the warp. Every lane shuffles (the mask says so); then the select.
    temp = p.define(op.result, shuffled)
    p.define(op.result, f"(unsigned){delta} < 32u ? {temp} : {p[value]}")


def print_elect_sync(p: CudaPrinter, op: Operation) -> None:
    if p.sm >= 90:
        p.define(op.result, f"tj_elect_sync({p.lane_mask()})")
    else:   # the lowest active lane, as the CPU elects (and elect.sync does)
        active = p.active
        first = active.lanes[0] if active is not None else None
        p.define(op.result, f"(threadIdx.x & 31) == {first}u" if first is not None
                 else "tj_elect_sync(__activemask())")


# ------------------------------------------------------------------------------ mbarriers
def print_alloc_barrier(p: CudaPrinter, op: Operation) -> None:
    name = p.fresh(op.result.name_hint or "bars")
    p.emit(f"__shared__ __align__(8) unsigned long long {name}[{op.attrs['count']}];")
    p.names[op.result] = name


def _barrier(p: CudaPrinter, op: Operation) -> str:
    return f"&{p[op.operands[0]]}[{p[op.operands[1]]}]"


def _int(p: CudaPrinter, value) -> str:
    return p[value] if value.type == i32 else f"(int){p[value]}"


def print_mbarrier_init(p: CudaPrinter, op: Operation) -> None:
    p.emit(f"tj_mbarrier_init({_barrier(p, op)}, {_int(p, op.operands[2])});")


def print_mbarrier_arrive(p: CudaPrinter, op: Operation) -> None:
    remote = remote_barrier(p, op)
    if remote is not None:
        p.emit(f"tj_mbarrier_arrive_cluster({remote});")
        return
    p.emit(f"tj_mbarrier_arrive({_barrier(p, op)});")


def print_mbarrier_expect_tx(p: CudaPrinter, op: Operation) -> None:
    if p.sm < 90:
        raise CompilationError(f"mbarrier transaction counts (expect_tx) need sm_90 or "
                               f"later; compiling for {p.arch}")
    fn = "tj_mbarrier_arrive_expect_tx" if op.attrs["arrive"] else "tj_mbarrier_expect_tx"
    p.emit(f"{fn}({_barrier(p, op)}, {_int(p, op.operands[2])});")


def print_mbarrier_wait(p: CudaPrinter, op: Operation) -> None:
    p.emit(f"tj_mbarrier_wait({_barrier(p, op)}, {_int(p, op.operands[2])});")


# ------------------------------------------------------------------------------ atomics
# (op, C type) -> PTX atom operation and type, where PTX has the instruction.
_ATOM = {("add", f32): "add.f32", ("add", f64): "add.f64", ("add", f16): "add.noftz.f16",
         ("add", i32): "add.u32", ("add", u32): "add.u32", ("add", i64): "add.u64",
         ("add", u64): "add.u64", ("max", i32): "max.s32", ("max", u32): "max.u32",
         ("max", i64): "max.s64", ("max", u64): "max.u64", ("min", i32): "min.s32",
         ("min", u32): "min.u32", ("min", i64): "min.s64", ("min", u64): "min.u64",
         ("xchg", f32): "exch.b32", ("xchg", i32): "exch.b32", ("xchg", u32): "exch.b32",
         ("xchg", f64): "exch.b64", ("xchg", i64): "exch.b64", ("xchg", u64): "exch.b64"}
_ATOM_SM90 = {("add", bf16): "add.noftz.bf16"}
_UNSIGNED = {1: "unsigned char", 8: "unsigned char", 16: "unsigned short", 32: "unsigned int",
             64: "unsigned long long"}
_BITS = {16: ("unsigned short", "h"), 32: ("unsigned", "r"), 64: ("unsigned long long", "l")}
# Float max/min of atomics ignore NaN, as LLVM's atomicrmw fmax/fmin on the CPU do.
_COMBINE = {"add": "{old} + {value}", "max": "fmax({old}, {value})",
            "min": "fmin({old}, {value})", "xchg": "{value}"}
_INT_COMBINE = {"add": "tj_add({old}, {value})", "max": "tj_max({old}, {value})",
                "min": "tj_min({old}, {value})", "xchg": "{value}"}


def _space(p: CudaPrinter, op: Operation) -> tuple[str, str]:
    """(PTX state space, address operand) of a flat atomic's element."""
    buf = op.operands[0]
    ref = f"&{element(p, op)}"
    if getattr(buf.owner, "name", None) == "cluster_map":   # a generic address (mapa)
        return "", f'"l"({ref})'
    if buf.type.scope is MemScope.SHARED:
        return ".shared::cta", f'"r"(tj_smem_addr({ref}))'
    return ".global", f'"l"({ref})'


def _atom(p: CudaPrinter, op: Operation, instruction: str, t, values: list[str], old: str):
    """``old = atom.<instruction> [element], values...`` in inline PTX, on bit patterns."""
    space, address = _space(p, op)
    sem, scope = op.attrs["order"], op.attrs["sync_scope"]
    bits_type, letter = _BITS[t.bits]
    regs = ", ".join(f"%{i + 2}" for i in range(len(values)))
    ins = ", ".join(f'"{letter}"(({bits_type})tj_bits({v}))' for v in values)
    p.emit(f'asm volatile("atom.{sem}.{scope}{space}.{instruction} %0, [%1], {regs};" '
           f': "={letter}"({old}) : {address}, {ins} : "memory");')


def print_atomic_at(p: CudaPrinter, op: Operation) -> None:
    buf, value, _ = op.operands
    t, name = value.type, op.attrs["op"]
    if buf.type.scope is MemScope.LOCAL:
        _local_rmw(p, op, lambda old: _combine(p, name, old, p[value], t))
        return
    if t.bits < 16:
        raise CompilationError(f"{t} atomics are not supported by the cuda target (PTX has "
                               "no atomics narrower than 16 bits)")
    instruction = _ATOM.get((name, t)) or (_ATOM_SM90.get((name, t)) if p.sm >= 90 else None)
    bits_type = _BITS[t.bits][0]
    if instruction is not None:
        old_bits = p.fresh("old_bits")
        p.emit(f"{bits_type} {old_bits};")
        _atom(p, op, instruction, t, [p[value]], old_bits)
        p.define(op.result, f"tj_from_bits<{C_TYPES[t]}>({old_bits})")
        return
    _cas_loop(p, op, lambda old: _combine(p, name, old, p[value], t))


def _combine(p: CudaPrinter, name: str, old: str, value: str, t) -> str:
    if t.is_float:
        if t in NARROW_FLOATS:
            old, value = f"tj_f32({old})", f"tj_f32({value})"
        return narrow(_COMBINE[name].format(old=old, value=value), t)
    return f"({C_TYPES[t]})({_INT_COMBINE[name].format(old=old, value=value)})"


def _cas_loop(p: CudaPrinter, op: Operation, combine) -> None:
    """An atomic read-modify-write through compare-and-swap of the element's bits."""
    t = op.result.type
    bits_type = _BITS[t.bits][0]
    old = p.declare(op.result, element(p, op), hint=op.result.name_hint or "old")
    seen = p.fresh("seen")
    p.emit("while (true) {")
    p.depth += 1
    want = p.fresh("want")
    p.emit(f"const {C_TYPES[t]} {want} = {combine(old)};")
    p.emit(f"{bits_type} {seen};")
    _atom(p, op, f"cas.b{t.bits}", t, [old, want], seen)
    p.emit(f"if ({seen} == tj_bits({old})) break;")
    p.emit(f"{old} = tj_from_bits<{C_TYPES[t]}>({seen});")
    p.depth -= 1
    p.emit("}")


def _local_rmw(p: CudaPrinter, op: Operation, new) -> None:
    old = p.define(op.result, element(p, op))
    p.emit(f"{element(p, op)} = {new(old)};")


def print_atomic_cas_at(p: CudaPrinter, op: Operation) -> None:
    buf, compare, value, _ = op.operands
    t = value.type
    if buf.type.scope is MemScope.LOCAL:
        _local_rmw(p, op, lambda old: f"tj_bits({old}) == tj_bits({p[compare]}) ? "
                                      f"{p[value]} : {old}")
        return
    if t.bits < 16:
        raise CompilationError(f"{t} compare-and-swap is not supported by the cuda target")
    old_bits = p.fresh("old_bits")
    p.emit(f"{_BITS[t.bits][0]} {old_bits};")
    _atom(p, op, f"cas.b{t.bits}", t, [p[compare], p[value]], old_bits)
    p.define(op.result, f"tj_from_bits<{C_TYPES[t]}>({old_bits})")


# ------------------------------------------------------------------------------ printing
def c_string(text: str) -> str:
    """A C string literal (json escapes are C escapes, but for \\u, spelled as UTF-8)."""
    out = []
    for ch in text:
        if ch == "%" or 32 <= ord(ch) < 127 and ch not in '"\\':
            out.append(ch)
        elif ord(ch) < 128:
            out.append(json.dumps(ch)[1:-1] if ch in '"\\\n\t' else f"\\{ord(ch):03o}")
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def _printf_arg(p: CudaPrinter, value) -> tuple[str, str]:
    t = value.type
    if t.is_float:
        return "%g", f"(double){wide(p, value)}"
    if t.is_bool or t.kind == "uint":
        return "%llu", f"(unsigned long long){p[value]}"
    return "%lld", f"(long long){p[value]}"


def print_device_print(p: CudaPrinter, op: Operation) -> None:
    """printf, as the CPU prints: integers as 64 bits (``ll``), floats as doubles."""
    fmt = op.attrs["fmt"]
    if op.attrs["printf"]:
        parts, args, pos = [], [], 0
        conversions = [c for c in printf_conversions(fmt) if c["kind"] != "%"]
        for conversion, value in zip(conversions, op.operands):
            spec = conversion[0]
            if value.type.is_float:
                arg = _printf_arg(p, value)[1]
            else:
                spec = spec[:-1] + "ll" + spec[-1]
                signed = value.type.kind == "int" and conversion["kind"] in "di"
                arg = f"(long long){p[value]}" if signed else \
                    f"(unsigned long long)({_UNSIGNED[value.type.bits]}){p[value]}"
            args.append(arg)
            parts += [fmt[pos:conversion.start()], spec]
            pos = conversion.end()
        parts.append(fmt[pos:])
        text = "".join(parts)
    else:
        pieces = fmt.replace("%", "%%").split("{}")
        specs, args = zip(*(_printf_arg(p, v) for v in op.operands)) if op.operands else ((), ())
        parts = [pieces[0]]
        for i, spec in enumerate(specs):
            parts += [spec, pieces[i + 1]] if i + 1 < len(pieces) else [" ", spec]
        parts += ["{}" + piece for piece in pieces[len(specs) + 1:]]
        text, args = "".join(parts), list(args)
    if not text.endswith("\n"):
        text += "\n"
    p.emit(f"printf({', '.join([c_string(text), *args])});")


# ------------------------------------------------------------------------------ intrinsics
def print_intrinsic(p: CudaPrinter, op: Operation) -> None:
    target, name = op.attrs["target"], op.attrs["name"]
    if target != "cuda":
        raise CompilationError(f"intrinsic {target}.{name} is not available on the cuda "
                               "target (only target = \"cuda\" intrinsics: a CUDA device "
                               "function or builtin called by name)")
    call = f"{name}({', '.join(p[v] for v in op.operands)})"
    if op.results:
        p.define(op.result, call)
    else:
        p.emit(f"{call};")


HANDLERS = {
    "sync": print_sync, "single": print_single, "warp_shuffle": print_warp_shuffle,
    "elect_sync": print_elect_sync, "alloc_barrier": print_alloc_barrier,
    "mbarrier_init": print_mbarrier_init, "mbarrier_arrive": print_mbarrier_arrive,
    "mbarrier_expect_tx": print_mbarrier_expect_tx, "mbarrier_wait": print_mbarrier_wait,
    "atomic_at": print_atomic_at, "atomic_cas_at": print_atomic_cas_at,
    "device_print": print_device_print, "intrinsic": print_intrinsic,
}
