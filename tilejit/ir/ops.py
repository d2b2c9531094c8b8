"""The op catalogue: one declarative ``OpDef`` per op, looked up by name.

The entries live in ``ops_native.py`` (scalar, memory, sync), ``ops_async.py``
(asynchronous copies and their completion), ``ops_cluster.py`` (thread-block clusters),
``ops_tma.py`` (TMA bulk copies, bulk groups), ``ops_wgmma.py`` (Hopper wgmma),
``ops_tcgen05.py`` (Blackwell tcgen05 and tensor memory), ``ops_control.py``
(for/if/while, terminators, team) and ``ops_tile.py`` (tile primitives); importing this
module registers them all. ``OPS`` maps op name -> ``OpDef``.
"""
from __future__ import annotations

from . import (ops_async, ops_cluster, ops_control, ops_native, ops_packed,  # noqa: F401
               ops_tcgen05, ops_tile, ops_tma, ops_wgmma)
from .opdef import EXPLICIT, OPS, OpDef, OpDefError, OpGroup, OperandSpec, RegionSpec, get_opdef

__all__ = ["OPS", "OpDef", "OpGroup", "OperandSpec", "RegionSpec", "EXPLICIT", "OpDefError",
           "get_opdef", "ops_in_group"]


def ops_in_group(group: OpGroup) -> list[str]:
    return [name for name, opdef in OPS.items() if opdef.group is group]
