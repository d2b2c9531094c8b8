"""Facts the CPU families share: how an operand's logical indices map to memory on this
target, and whether the call runs once per team."""
from __future__ import annotations

from tilejit.ir.addressing import Addressing
from tilejit.ir.types import MemScope
from tilejit.layout import ComposeLayout
from tilejit.passes.dispatch import TEAM_ONCE, Operand, PrimitiveCall

from ..emit_vector import addressing_strides

__all__ = ["lanes", "team_once_reasons", "tile_strides"]


def team_once_reasons(call: PrimitiveCall) -> list[str]:
    """Why a CPU family cannot run here (empty: it can, as far as distribution goes)."""
    if call.context.distribution != TEAM_ONCE:
        return [f"the CPU vector instructions run a whole tile in one unit (team_once); this "
                f"target distributes {call.context.distribution}"]
    return []


def lanes(call: PrimitiveCall, itemsize: int = 4) -> int:
    """Elements of ``itemsize`` bytes in the target's widest vector register."""
    return max(1, call.context.vector_bytes // itemsize)


def tile_strides(o: Operand) -> tuple[tuple | None, str | None]:
    """(per logical dim of ``o``, its element stride -- None where known only at run
    time --, why there is no single stride per dim).

    The CPU stores global buffers by their strides and every other buffer by its layout
    over all of the layout's axes (``ir.addressing.Addressing``), row-major without one.
    """
    buffer = o.buffer_type
    if buffer is None:
        return None, f"{o.name} is a scalar"
    if o.role is MemScope.GLOBAL:
        strides = buffer.strides or (None,) * len(buffer.shape)
    elif buffer.layout is None:
        strides = addressing_strides(Addressing.row_major(buffer.shape))
    elif isinstance(buffer.layout, ComposeLayout):
        return None, f"{o.name}'s swizzled layout {buffer.layout} has no single stride per dim"
    elif any(axis.name != "m" for axis in buffer.layout.axes):
        # Its storage strides depend on the buffer it views, which the call cannot see.
        return None, (f"{o.name}'s layout {buffer.layout} places elements on "
                      "non-memory axes")
    else:
        try:
            strides = addressing_strides(Addressing.from_layout(buffer.layout, buffer.shape))
        except Exception as err:  # a layout that does not fit: the fallback reports it
            return None, f"{o.name}'s layout cannot address its shape: {err}"
        if strides is None:
            return None, (f"{o.name}'s layout {buffer.layout} splits a dim over several "
                          "strides")
    if o.is_region:
        strides = [s for s, kept in zip(strides, o.value.type.keep) if kept]
    return tuple(strides), None
