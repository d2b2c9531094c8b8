"""Pass ``infer-fragment-layouts``: a per-thread kernel's fragments go to registers.

A fragment the kernel gave no layout has no owner thread per element, so under a
per-thread split its team shares it through shared memory (``place-fragments``), where
every primitive needs a barrier before it reads what another wrote. This pass gives such a
fragment a thread layout instead, chosen from its uses, so that each thread keeps the
elements it works on in its own registers (the GPU's register fragment):

* the result of a reduction gets the reduced layout of its source (``layout.fragments.
  reduced_layout``): every thread that holds part of a row holds the row's result;
* a fragment read broadcast against a laid-out destination (a ``[BM, 1]`` row statistic
  against a ``[BM, BN]`` tile) gets the destination's layout reduced over the broadcast
  dimensions, so each thread holds the values its elements need;
* any other gets the blocked layout of its shape over its team (``blocked_layout``:
  vector-width runs per thread along the last dimension, lanes next, warps over the rows).

A layout is kept only when dispatch finds a legal rule for every primitive that touches
the fragment with it; when one does not, the fragments of that primitive stay without a
layout (in shared memory) and the alloc says why. The choice prints on the alloc
(``layout = ..., layout_note = "..."``) and in each dispatch record's distribution.

Left alone: fragments with a layout of the kernel's own, thread teams' fragments (already
private), and fragments reached by anything but tile primitives and regions (element
accesses from native code, views, values carried by loops or yielded): those keep today's
placement. ``team_once`` kernels pass through unchanged.

Runs after ``scope-analysis`` (dispatch needs the teams) and before ``sync-hazards`` (a
fragment in registers needs no barrier) and ``fuse-pointwise`` (which folds fragments
whose layout was inferred as it folds those without one).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

from ..errors import TilejitError
from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.opdef import OpGroup
from ..ir.rewrite import Rewriter, retyped_from_yield
from ..ir.storage import on_threads
from ..ir.ops_wgmma import WGMMA_M
from ..ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, WARPS_PER_WARPGROUP, team_warps
from ..ir.types import BufferType, MemScope, RegionType, TeamKind, bf16, f16, f32
from ..layout.fragments import blocked_layout, mma_accumulator_layout, reduced_layout
from ..layout.hw_nvidia import wgmma_a_register_layout, wgmma_accumulator_layout
from ..layout.tile_layout import TileLayout
from .dispatch import PER_THREAD, PrimitiveCall, context_for, select
from .dispatch.call import argument_flags
from .effects import root_buffer

__all__ = ["run"]

_ELEMENTWISE = ("tile.pointwise", "tile.copy")   # element i of the result from element i
_TENSOR_CORE_NOTE = "inferred: the tensor-core accumulator"
_REGISTER_A_NOTE = "inferred: the tensor-core A operand"   # a wgmma reading A from registers
_TENSOR_CORE_INPUTS = {f16, bf16}


class _Fragment:
    """An alloc the pass may lay out: its team and the tile ops that touch it."""

    def __init__(self, alloc: Operation, team: TeamKind):
        self.alloc, self.team = alloc, team
        self.users: list[Operation] = []

    @property
    def value(self) -> Value:
        return self.alloc.result

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.alloc.attrs["shape"])


def run(kernel: KernelIR) -> KernelIR:
    context = context_for(kernel)
    if context.distribution != PER_THREAD:
        return kernel
    fragments, skipped = _candidates(kernel)
    if not fragments:
        return _apply(kernel, {}, skipped, {}) if skipped else kernel
    groups = _groups(fragments)
    excluded: dict[Value, str] = {}
    may_stage = kernel.attrs.get("auto_sync", True)   # a staged copy needs a barrier
    no_tensor_cores: set[Value] = set()   # accumulators to lay out without them
    while True:
        proposal, notes = _propose(kernel, fragments, excluded, context, no_tensor_cores)
        unplaced = {v: notes[v] for v in fragments if v not in proposal and v not in excluded}
        if unplaced:   # no layout fits it: its group stays in shared memory with it
            _exclude_groups(excluded, groups, unplaced)
            continue
        trial = _apply(kernel, proposal, notes, {})
        failures, staged = _failures(kernel, trial, proposal, context, may_stage)
        if not failures:
            return _apply(kernel, proposal, {**skipped, **notes, **excluded}, staged)
        retry = {v for v in failures
                 if notes[v].startswith((_TENSOR_CORE_NOTE, _REGISTER_A_NOTE))}
        if retry:   # try those again with the blocked layout before giving up on them
            no_tensor_cores |= retry
            continue
        _exclude_groups(excluded, groups, failures)


def _exclude_groups(excluded: dict, groups: dict, why: dict) -> None:
    """Leave the fragments of ``why`` (value -> reason) and their groups without layouts."""
    for value, reason in why.items():
        excluded[value] = reason
        for other in groups[value] - why.keys():
            excluded.setdefault(other, f"not inferred (stays in shared memory): it shares a "
                                       f"primitive with a fragment that does (allocated at "
                                       f"line {value.owner.loc.line})")


def _groups(fragments: dict[Value, _Fragment]) -> dict[Value, frozenset]:
    """Per fragment, the fragments linked to it through the primitives they share: they
    get layouts together or stay in shared memory together (a primitive whose operands
    are half in registers, half shared may have no owner thread left once fused)."""
    parent = {v: v for v in fragments}

    def find(v):
        while parent[v] is not v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    touching: dict[int, list[Value]] = defaultdict(list)
    for value, fragment in fragments.items():
        for op in fragment.users:
            touching[id(op)].append(value)
    for values in touching.values():
        for other in values[1:]:
            parent[find(other)] = find(values[0])
    members: dict[Value, set] = defaultdict(set)
    for value in fragments:
        members[find(value)].add(value)
    return {value: frozenset(members[find(value)]) for value in fragments}


# ------------------------------------------------------------------------ candidates
def _candidates(kernel: KernelIR) -> tuple[dict[Value, _Fragment], dict[Value, str]]:
    """The unlaid-out fragments of teams above a thread whose every use is a tile op or a
    region of it, in program order; and why each other one is left alone."""
    fragments: dict[Value, _Fragment] = {}
    users: dict[Value, list[Operation]] = defaultdict(list)
    unsafe: dict[Value, Operation] = {}
    used = {v for op in kernel.walk() for v in op.operands}

    def exported(op: Operation, value: Value, parent: Operation | None) -> bool:
        """A team's body yields every name it binds; one nobody reads after it is no use."""
        return op.name == "yield" and parent is not None and parent.name == "team" \
            and all(result not in used for v, result in zip(op.operands, parent.results)
                    if v is value)

    def visit(block: Block, team: TeamKind, parent: Operation | None) -> None:
        for op in block.ops:
            if op.name == "alloc" and op.attrs["scope"] is MemScope.FRAGMENT \
                    and op.attrs["layout"] is None and team is not TeamKind.THREAD \
                    and team is not TeamKind.CLUSTER:
                fragments[op.result] = _Fragment(op, team)
            for value in op.operands:
                if not isinstance(value.type, (BufferType, RegionType)):
                    continue
                root = root_buffer(value)
                if op.opdef.group is OpGroup.TILE:
                    users[root].append(op)
                elif (op.name != "region" or value is not op.operands[0]) \
                        and not exported(op, value, parent):
                    unsafe.setdefault(root, op)
            inner = op.attrs["kind"] if op.name == "team" else team
            for region in op.regions:
                visit(region, inner, op)

    visit(kernel.body, TeamKind.CTA, None)
    skipped: dict[Value, str] = {}
    for value in list(fragments):
        if value in unsafe:
            op = unsafe[value]
            skipped[value] = f"not inferred (stays in shared memory): {op.name} at line " \
                             f"{op.loc.line} reaches it outside a tile primitive"
            del fragments[value]
        elif not users[value]:
            del fragments[value]
        else:
            fragments[value].users = list(dict.fromkeys(users[value]))
    return fragments, skipped


# ------------------------------------------------------------------------- proposing
def _propose(kernel: KernelIR, fragments: dict[Value, _Fragment], excluded: dict,
             context, no_tensor_cores: set) -> tuple[dict[Value, TileLayout], dict[Value, str]]:
    """A layout for each fragment not ``excluded`` (and a note saying where it came
    from), to a fixpoint: a reduction's or a broadcast's layout follows another's. The
    blocked fallback waits until no derivation is left (else a mask built from indices
    alone, met first, would impose it on the tensor-core tile it selects from)."""
    proposal: dict[Value, TileLayout] = {}
    notes: dict[Value, str] = {}
    for fallback in (False, True):
        for _ in range(len(fragments) + 1):
            changed = False
            for value, fragment in fragments.items():
                if value in excluded:
                    continue
                found = _derived(fragment, proposal) \
                    or (value not in no_tensor_cores
                        and (_accumulator(kernel, fragment)
                             or _register_a_operand(kernel, fragment))) \
                    or (fallback and _blocked(kernel, fragment, context))
                if not found:
                    continue
                if isinstance(found, str):
                    changed |= proposal.pop(value, None) is not None
                    notes[value] = found
                elif proposal.get(value) != found[0]:
                    proposal[value], notes[value] = found
                    changed = True
            if not changed:
                break
    return proposal, notes


def _layout_of(value: Value, proposal: dict) -> TileLayout | None:
    """The thread layout ``value`` has or is proposed (None: memory axes only, a swizzle,
    or none, which no fragment should follow)."""
    if value in proposal:
        return proposal[value]
    layout = value.type.layout if isinstance(value.type, BufferType) else None
    return layout if isinstance(layout, TileLayout) and on_threads(layout) else None


def _derived(fragment: _Fragment, proposal: dict) -> tuple[TileLayout, str] | None:
    """The layout a reduction, an elementwise op from a laid-out source of the same shape,
    or a broadcast that touches the whole fragment implies."""
    me = fragment.value
    for op in fragment.users:
        dst = op.operands[0]
        if op.name == "tile.reduce" and dst is me:
            src = op.operands[1]
            layout = _layout_of(src, proposal)
            if layout is not None and isinstance(src.type, BufferType):
                found = _reduced(layout, src.type.shape, [op.attrs["axis"]])
                if found is not None:
                    return found, f"inferred: the reduction at line {op.loc.line} of " \
                                  f"{src.name_hint or 'its source'}"
    for op in fragment.users:
        if op.name not in _ELEMENTWISE or op.operands[0] is not me:
            continue
        for src in op.operands[1:]:
            layout = _layout_of(src, proposal) if src is not me else None
            if layout is not None and tuple(src.type.shape) == fragment.shape:
                return layout, f"inferred: the layout of {src.name_hint or 'its source'}, " \
                               f"which line {op.loc.line} computes it from"
    for op in fragment.users:   # the initial value of a loop-carried row statistic
        dst = op.operands[0]
        if op.name in _ELEMENTWISE and dst is not me and me in op.operands[1:]:
            layout = _layout_of(dst, proposal)
            if layout is not None and tuple(dst.type.shape) == fragment.shape:
                return layout, f"inferred: the layout of {dst.name_hint or 'the tile'} " \
                               f"that line {op.loc.line} computes from it"
    for op in fragment.users:
        dst = op.operands[0]
        if dst is me or not isinstance(dst.type, BufferType) or me not in op.operands[1:]:
            continue
        layout = _layout_of(dst, proposal)
        dims = _broadcast_dims(fragment.shape, dst.type.shape)
        if layout is None or not dims:
            continue
        found = _reduced(layout, dst.type.shape, dims)
        if found is not None:
            return found, f"inferred: read broadcast against {dst.name_hint or 'a tile'} " \
                          f"at line {op.loc.line}"
    return None


def _broadcast_dims(shape, domain) -> list[int]:
    """The dimensions of ``domain`` a ``shape`` operand is broadcast over (numpy rules:
    aligned on the right, a missing or size-1 dimension broadcasts); [] when it is not a
    broadcast of ``domain``."""
    if len(shape) > len(domain) or tuple(shape) == tuple(domain):
        return []
    lead = len(domain) - len(shape)
    dims = list(range(lead))
    for d, (n, extent) in enumerate(zip(shape, domain[lead:])):
        if n == extent:
            continue
        if n != 1:
            return []
        dims.append(lead + d)
    return dims


def _reduced(layout: TileLayout, shape, dims) -> TileLayout | None:
    shape = list(shape)
    try:
        for d in dims:
            layout = reduced_layout(layout, shape, d)
            shape[d] = 1
    except TilejitError:
        return None
    return layout


def _accumulator(kernel: KernelIR, fragment: _Fragment) -> tuple[TileLayout, str] | None:
    """The tensor-core accumulator layout, for an f32 fragment a gemm of f16/bf16 operands
    accumulates into (the per-thread ``mma`` family needs it; a ``gemm_async`` dispatched to
    ``wgmma`` of one warpgroup gets wgmma's; dispatch has the last word)."""
    warps = team_warps(fragment.team, kernel.attrs["num_warps"])
    wgmmas = [op for op in fragment.users if op.name == "tile.gemm_async"
              and op.attrs.get("dispatch") == "wgmma" and op.operands[0] is fragment.value]
    if wgmmas and fragment.alloc.attrs["dtype"] == f32 and len(fragment.shape) == 2 \
            and warps == WARPS_PER_WARPGROUP \
            and fragment.team in (TeamKind.WARPGROUP, TeamKind.CTA):
        rows, cols = fragment.shape
        if rows % WGMMA_M == 0 and cols % 8 == 0 and 0 < cols <= 256:   # m64nNk16's N
            layout = wgmma_accumulator_layout((rows, cols), warp_axis=TEAM_WARP_AXIS[fragment.team])
            return layout, f"{_TENSOR_CORE_NOTE} of the wgmma at line {wgmmas[0].loc.line}"
    gemms = [op for op in fragment.users if op.name == "tile.gemm"
             and op.operands[0] is fragment.value
             and {_dtype(v) for v in op.operands[1:3]} <= _TENSOR_CORE_INPUTS]
    if not gemms or fragment.alloc.attrs["dtype"] != f32 or len(fragment.shape) != 2:
        return None
    layout = mma_accumulator_layout(fragment.shape, warps, TEAM_WARP_AXIS[fragment.team])
    if layout is None:
        return None
    return layout, f"{_TENSOR_CORE_NOTE} of the gemm at line {gemms[0].loc.line} over " \
                   f"{warps} warp(s)"


def _register_a_operand(kernel: KernelIR,
                        fragment: _Fragment) -> tuple[TileLayout, str] | None:
    """wgmma's register A layout, for an f16/bf16 [M, K] fragment a ``gemm_async``
    dispatched to ``wgmma`` reads as A (not transposed) in a team of one warpgroup."""
    wgmmas = [op for op in fragment.users if op.name == "tile.gemm_async"
              and op.attrs.get("dispatch") == "wgmma" and op.operands[1] is fragment.value
              and not op.attrs.get("transpose_a")]
    if not wgmmas or fragment.alloc.attrs["dtype"] not in _TENSOR_CORE_INPUTS \
            or len(fragment.shape) != 2 \
            or fragment.team not in (TeamKind.WARPGROUP, TeamKind.CTA) \
            or team_warps(fragment.team, kernel.attrs["num_warps"]) != WARPS_PER_WARPGROUP:
        return None
    rows, cols = fragment.shape
    if rows % WGMMA_M or cols % 16 or not 0 < cols <= 256:   # m64nNk16: K steps of 16
        return None
    layout = wgmma_a_register_layout((rows, cols), warp_axis=TEAM_WARP_AXIS[fragment.team])
    return layout, f"{_REGISTER_A_NOTE} of the wgmma at line {wgmmas[0].loc.line}"


def _dtype(value: Value):
    t = value.type
    return (t.buffer if isinstance(t, RegionType) else t).dtype


def _blocked(kernel: KernelIR, fragment: _Fragment, context) -> tuple[TileLayout, str] | str:
    dtype = fragment.alloc.attrs["dtype"]
    warps = team_warps(fragment.team, kernel.attrs["num_warps"])
    vector = max(1, context.vector_bytes // dtype.itemsize)
    layout = blocked_layout(fragment.shape, lanes=LANES_PER_WARP, warps=warps,
                            warp_axis=TEAM_WARP_AXIS[fragment.team], vector=vector)
    threads = warps * LANES_PER_WARP
    if layout is None:
        return f"not inferred (stays in shared memory): no blocked layout gives each of the " \
               f"{fragment.team}'s {threads} threads the same whole number of the " \
               f"{list(fragment.shape)} elements"
    return layout, f"inferred: blocked over the {fragment.team}'s {threads} threads"


# ------------------------------------------------------------------------ validating
def _apply(kernel: KernelIR, proposal: dict[Value, TileLayout], notes: dict,
           staged: dict[int, tuple[int, ...]]) -> KernelIR:
    """``kernel`` with the proposed layouts and every note on their allocs, and each
    ``staged`` tile op (numbered in program order) reading those operands through a copy
    in shared memory."""
    allocs = iter([op for op in kernel.walk() if op.name == "alloc"])
    tile_ops = itertools.count()

    # The rewriter offers rebuilt ops in the order of a pre-order walk.
    def lay_out(op: Operation, ctx):
        value = next(allocs).result
        if value not in notes:
            return None
        attrs = {"layout_note": notes[value]}
        if value in proposal:
            attrs["layout"] = proposal[value]
        return op.replace(attrs=attrs)

    def stage(op: Operation, ctx):
        indices = staged.get(next(tile_ops))
        return _staged(op, indices, ctx.builder) if indices else None

    return Rewriter([("alloc", lay_out), (_is_tile, stage), ("team", retyped_from_yield)],
                    "infer-fragment-layouts").sweep(kernel)


def _is_tile(op: Operation) -> bool:
    return op.opdef.group is OpGroup.TILE


def _staged(op: Operation, indices, b) -> Operation:
    """``op`` reading its operands at ``indices`` from copies in shared memory (a layout
    conversion: the copy runs in the registers' layout, ``op`` reads shared memory, which
    every thread reaches; sync-hazards orders the two)."""
    operands = list(op.operands)
    for i in indices:
        source = operands[i]
        t = source.type
        name = source.name_hint or root_buffer(source).name_hint or "a fragment"
        copy = b.create("alloc", [], {
            "scope": MemScope.SHARED, "dtype": (t.buffer if isinstance(t, RegionType) else t).dtype,
            "shape": tuple(t.shape),
            "layout_note": f"converts {name}'s layout for {op.name} at line {op.loc.line}: "
                           "no rule reads it from registers"}).result
        b.create("tile.copy", [copy, source], {"scope": op.attrs["scope"], "team": op.attrs["team"]})
        operands[i] = copy
    return op.replace(operands=operands)


def _illegal(call: PrimitiveCall) -> str | None:
    """Why no rule implements ``call`` (None: one does)."""
    try:
        select(call)
    except TilejitError as err:
        return " ".join(err.message.split())
    return None


def _staging(call: PrimitiveCall, op: Operation, proposal: dict) -> tuple[int, ...] | None:
    """The sources of ``op`` that, read from shared memory instead of registers, make
    ``call`` legal: one of them, or all; None when neither does. Replicated layouts are not
    staged (every copy's owner would store the element)."""
    reads = [i for i, v in enumerate(op.operands) if i > 0
             and isinstance(v.type, (BufferType, RegionType)) and root_buffer(v) in proposal
             and not proposal[root_buffer(v)].replica]
    tries = [(i,) for i in reads] + ([tuple(reads)] if len(reads) > 1 else [])
    for indices in tries:
        operands = tuple(replace(o, role=MemScope.SHARED, layout=None) if k in indices else o
                         for k, o in enumerate(call.operands))
        if _illegal(replace(call, operands=operands)) is None:
            return indices
    return None


def _failures(kernel: KernelIR, trial: KernelIR, proposal: dict, context,
              may_stage: bool) -> tuple[dict[Value, str], dict[int, tuple[int, ...]]]:
    """Per proposed fragment that a primitive has no legal rule for with the proposal, why;
    and the primitives (numbered in program order) made legal by reading some of their
    sources through shared memory, with those sources' operand indices. The trial kernel
    has the same ops as ``kernel``, in the same order."""
    failures: dict[Value, str] = {}
    staged: dict[int, tuple[int, ...]] = {}
    flags = argument_flags(trial)   # what dispatch will know of the arguments
    tile_pairs = ((op, tried) for op, tried in zip(kernel.walk(), trial.walk()) if _is_tile(op))
    for position, (op, tried) in enumerate(tile_pairs):
        mine = [root_buffer(v) for v in op.operands
                if isinstance(v.type, (BufferType, RegionType)) and root_buffer(v) in proposal]
        if not mine:
            continue
        call = PrimitiveCall.of(tried, context, flags)
        why = _illegal(call)
        if why is None:
            continue
        indices = _staging(call, op, proposal) if may_stage else None
        if indices is not None:
            staged[position] = indices
            continue
        for value in mine:
            failures.setdefault(value, f"not inferred (stays in shared memory): {op.name} "
                                       f"at line {op.loc.line} has no rule with "
                                       f"{_layout_of(value, proposal)}: {why}")
    return failures, staged
