"""Which kernel parameters a kernel writes: stores and atomics on a parameter or on a view
or region of one, found in native IR (after ``lower-tiles``, every tile primitive's writes
are stores). The runtime refuses to launch such a kernel on a read-only array."""
from __future__ import annotations

from ..ir.core import KernelIR, Value, walk
from ..ir.ops_native import READING_ACCESSES, WRITING_ACCESSES

__all__ = ["ALIASING_OPS", "root_buffer", "written_parameters"]

_WRITES = WRITING_ACCESSES
ALIASING_OPS = frozenset({"region", "view"})   # ops whose result aliases their first operand


def written_parameters(kernel: KernelIR) -> list[str]:
    """Names of the parameters some store or atomic of ``kernel`` writes, in order."""
    params = dict(zip(kernel.body.args, kernel.param_names))
    written = set()
    for op in walk(kernel.body):
        if op.name in _WRITES or op.opdef.writes:
            written.add(root_buffer(op.operands[0]))
    return [name for arg, name in params.items() if arg in written]


def spin_flags(kernel: KernelIR) -> set[Value]:
    """Root buffers a ``while`` condition reads: flags threads spin on (``while flag[0] ==
    0: pass``), which order memory as an mbarrier does, not data that races."""
    return {root_buffer(inner.operands[0]) for op in kernel.walk() if op.name == "while"
            for inner in walk(op.regions[0]) if inner.name in READING_ACCESSES}


def root_buffer(buffer: Value) -> Value:
    """The buffer (an alloc's result or a parameter) whose memory ``buffer`` names, through
    regions and views."""
    while buffer.owner is not None and getattr(buffer.owner, "name", None) in ALIASING_OPS:
        buffer = buffer.owner.operands[0]
    return buffer
