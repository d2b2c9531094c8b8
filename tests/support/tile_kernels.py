"""Small kernels around tile primitives, and the dispatch + lowering pipeline, for tests."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tilejit.errors import SourceLocation
from tilejit.ir import Builder, KernelIR
from tilejit.ir.core import walk
from tilejit.ir.opdef import OpGroup
from tilejit.ir.types import BufferType, MemScope
from tilejit.ir.verifier import verify
from tilejit.passes import scope_analysis
from tilejit.passes.dispatch import PER_THREAD, DispatchContext, register_target
from tilejit.passes.dispatch import lower as lower_tiles
from tilejit.passes.dispatch import run as dispatch

FILE = "/src/tiles.py"
TILE_LINE = 7  # the source line every test kernel's tile ops are stamped with

GENERIC = DispatchContext("generic")
# A GPU-like test target: every thread of a team takes its share.
SIMT = register_target(DispatchContext("simt-test", distribution=PER_THREAD))


def global_matrix(dtype, rank=2) -> BufferType:
    """A global tensor of run-time shape with a unit innermost stride."""
    return BufferType(dtype, (None,) * rank, MemScope.GLOBAL, strides=(None,) * (rank - 1) + (1,))


def make_kernel(params: Sequence[tuple[str, object]], body: Callable, num_warps: int = 1,
                target: str | None = None) -> KernelIR:
    """A kernel with ``params``; ``body(b, *param_values)`` fills it (tile ops made through
    ``b.tile`` are stamped with line :data:`TILE_LINE`)."""
    names = [n for n, _ in params]
    k = KernelIR.new("k", names, [t for _, t in params],
                     {"num_warps": num_warps, "target": target}, SourceLocation(FILE, 1, 0))
    b = Builder(SourceLocation(FILE, TILE_LINE, 4))
    with b.insert_into(k.body):
        body(b, *k.params)
    return verify(k)


def dispatched(kernel: KernelIR, context: DispatchContext = GENERIC):
    """(kernel after scope analysis and dispatch, the dispatch log)."""
    log: list = []
    return verify(dispatch(verify(scope_analysis.run(kernel)), context, log)), log


def lowered(kernel: KernelIR, context: DispatchContext = GENERIC):
    """(kernel lowered to native IR, the dispatch log)."""
    k, log = dispatched(kernel, context)
    k = verify(lower_tiles.run(k, context))
    assert not [op for op in walk(k.body) if op.opdef.group is OpGroup.TILE]
    return k, log


_SKELETON_OPS = ("for", "if", "single", "load", "store", "view", "warp_shuffle", "sync",
                 "thread_index", "buffer_dim")


def skeleton(kernel: KernelIR, ops: Sequence[str] = _SKELETON_OPS) -> str:
    """The structure of ``kernel``: one line per op named in ``ops``, indented by how
    many of them enclose it; ``for`` shows ``unroll=`` and how many values it carries."""
    lines: list[str] = []

    def block(b, depth: int):
        for op in b.ops:
            listed = op.name in ops
            if listed:
                text = op.name
                if op.name == "for":
                    text += "".join([f" unroll={op.attrs['unroll']}" if op.attrs["unroll"] else "",
                                     f" carry={len(op.results)}" if op.results else ""])
                elif op.name == "single":
                    text += f" {op.attrs['team']}"
                elif op.name == "thread_index":
                    text += f" {op.attrs['kind']}"
                lines.append("  " * depth + text)
            for region in op.regions:
                block(region, depth + listed)
    block(kernel.body, 0)
    return "\n".join(lines)
