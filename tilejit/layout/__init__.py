"""Named-axis tensor layouts (SPEC §2): shard / replica / offset over named physical axes.

    from tilejit.layout import TileLayout, S, R, laneid, warpid
    L = TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1)] + R[2:4@warpid] + 5@warpid)
    L.locations(0, 0, shape=(8, 16))   # the copies of element (0, 0)

This package stands alone: it imports nothing from tilejit except the error classes.
"""
from ..errors import LayoutError
from .axes import (Axis, AxisKind, AxisValue, Bank, F, P, TCol, TLane, bx, by, bz, cbx, cby,
                   cbz, laneid, m, pid, tid_in_wg, tx, warpid, wgid, wid_in_wg)
from .swizzle import ComposeLayout, SwizzleMode, parse_layout
from .syntax import LayoutExpr, R, S
from .tile_layout import Iter, OffsetMap, TileLayout

__all__ = [
    "TileLayout", "Iter", "Axis", "S", "R", "ComposeLayout", "SwizzleMode", "LayoutError",
    "AxisKind", "AxisValue", "LayoutExpr", "OffsetMap", "parse_layout",
    "m", "laneid", "warpid", "wid_in_wg", "tid_in_wg", "wgid", "tx", "bx", "by", "bz",
    "cbx", "cby", "cbz", "TLane", "TCol", "P", "F", "Bank", "pid",
]

# Hardware layout constructors (mma fragments, swizzled smem, TMEM, Trainium) build on the
# names above, so they are imported last.
from . import hardware as _hardware  # noqa: E402
from .hardware import *  # noqa: E402,F401,F403

__all__ += list(_hardware.__all__)
