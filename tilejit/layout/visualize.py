"""Draw a layout the way the TIRx paper's Figure 3 does.

``visualize(layout, shape)`` draws the logical tile as a grid; every cell is labelled with
the physical location(s) its element maps to (all replicas, e.g. ``w5 l0 r0`` over
``w9 l0 r0``) and coloured by the value of one thread/memory axis. ``cell_labels`` and
``cell_values`` return the same content as data, so it can be checked without pixels.
matplotlib is imported lazily and only its Agg canvas is used (no pyplot global state).
"""
from __future__ import annotations

import math
import textwrap

from ..errors import LayoutError

__all__ = ["visualize", "cell_labels", "cell_values", "location_label", "AXIS_ABBREV", "CHUNK"]

#: Short names used in cell labels; axes not listed print their full name.
AXIS_ABBREV = {
    "pid": "gpu", "cbx": "cbx", "cby": "cby", "cbz": "cbz", "bx": "bx", "by": "by",
    "bz": "bz", "wgid": "wg", "warpid": "w", "wid_in_wg": "wi", "laneid": "l",
    "tid_in_wg": "t", "tx": "tx", "TLane": "lane", "TCol": "col", "P": "P", "F": "F",
    "Bank": "bank",
}
_ORDER = ["pid", "cbx", "cby", "cbz", "bx", "by", "bz", "wgid", "warpid", "wid_in_wg",
          "laneid", "tid_in_wg", "tx", "TLane", "TCol", "P", "F", "Bank"]
_THREAD_AXES = {"warpid", "wid_in_wg", "laneid", "tid_in_wg", "tx", "wgid"}


def _axis_name(a) -> str:
    return a if isinstance(a, str) else getattr(a, "name", str(a))


def _tile_of(layout):
    """The affine TileLayout inside ``layout`` (itself, or a ComposeLayout's tile)."""
    if hasattr(layout, "shard"):
        return layout
    for attr in ("tile_layout", "tile", "layout", "inner"):
        t = getattr(layout, attr, None)
        if t is not None and hasattr(t, "shard"):
            return t
    raise LayoutError(f"cannot visualize {type(layout).__name__}: no tile layout found")


def _axes_in_order(layout) -> list[str]:
    tile = _tile_of(layout)
    seen = []
    for it in list(tile.shard) + list(getattr(tile, "replica", ())):
        n = _axis_name(it.axis)
        if n not in seen:
            seen.append(n)
    for n in getattr(tile, "offset", {}) or {}:
        n = _axis_name(n)
        if n not in seen:
            seen.append(n)
    return seen


def _sort_key(name):
    if name == "m":
        return (2, 0, name)
    if name in _ORDER:
        return (0, _ORDER.index(name), name)
    return (1, 0, name)


def location_label(loc: dict, *, m_name: str = "m") -> str:
    """``{'warpid': 5, 'laneid': 0, 'm': 0}`` -> ``'w5 l0 r0'`` (with ``m_name='r'``)."""
    parts = []
    for name in sorted(loc, key=_sort_key):
        short = m_name if name == "m" else AXIS_ABBREV.get(name, name)
        parts.append(f"{short}{loc[name]}")
    return " ".join(parts)


def _grid_shape(shape) -> tuple[tuple[int, ...], int, int]:
    shape = tuple(int(d) for d in shape)
    if not shape or any(d <= 0 for d in shape):
        raise LayoutError(f"visualize needs a non-empty shape with positive extents, got {shape}")
    if len(shape) == 1:
        return shape, 1, shape[0]
    return shape, math.prod(shape[:-1]), shape[-1]


def _coord(shape, i, j):
    if len(shape) == 1:
        return (j,)
    lead = []
    for d in reversed(shape[:-1]):
        lead.append(i % d)
        i //= d
    return tuple(reversed(lead)) + (j,)


def _locations(layout, coord, shape) -> list[dict]:
    fn = getattr(layout, "locations", None)
    if callable(fn):
        locs = fn(*coord, shape=shape)
    else:  # a layout kind without locations(): its base coordinate only
        locs = [layout.apply(*coord, shape=shape)]
    return [dict(l) for l in locs]


def _m_name(layout) -> str:
    return "r" if _THREAD_AXES & set(_axes_in_order(layout)) else "m"


def cell_labels(layout, shape, *, sep: str = " / ") -> list[list[str]]:
    """Label of every cell of the (flattened to 2-D) logical ``shape``: each physical
    location ``layout`` maps the element to, replicas joined by ``sep``. The ``m`` axis
    prints as ``r`` (register) when the layout also uses thread axes."""
    shape, rows, cols = _grid_shape(shape)
    mn = _m_name(layout)
    return [[sep.join(location_label(l, m_name=mn)
                      for l in _locations(layout, _coord(shape, i, j), shape))
             for j in range(cols)] for i in range(rows)]


#: Pseudo colour axis of a swizzled layout: the 16-byte chunk of ``m`` within its
#: swizzle row, ``(m >> per_element) % 2**atom_len`` — it makes the XOR pattern visible.
CHUNK = "chunk"


def _is_swizzled(layout) -> bool:
    return getattr(layout, "swizzle_len", 0) > 0 and hasattr(layout, "per_element")


def _default_color_axis(layout) -> str:
    if _is_swizzled(layout):
        return CHUNK
    tile = _tile_of(layout)
    for it in tile.shard:
        n = _axis_name(it.axis)
        if n != "m":
            return n
    return "m"


def cell_values(layout, shape, axis: str | None = None) -> list[list[int]]:
    """Value of ``axis`` at the base location of each cell (0 where the element has no
    coordinate on that axis). Default: the first non-``m`` shard axis, else ``m``; for a
    swizzled ``ComposeLayout`` the pseudo axis ``"chunk"`` (16-byte chunk of ``m`` within
    its swizzle row), which shows the XOR pattern."""
    shape, rows, cols = _grid_shape(shape)
    axis = axis or _default_color_axis(layout)
    if axis == CHUNK:
        if not hasattr(layout, "per_element"):
            raise LayoutError("colour axis 'chunk' needs a swizzled ComposeLayout")
        pe, width = layout.per_element, (1 << layout.atom_len) - 1

        def value(loc):
            return (loc.get("m", 0) >> pe) & width
    else:
        def value(loc):
            return int(loc.get(axis, 0))
    return [[value(layout.apply(*_coord(shape, i, j), shape=shape))
             for j in range(cols)] for i in range(rows)]


def visualize(layout, shape, path=None, *, color_axis: str | None = None,
              title: str | None = None, max_text_cells: int = 2048, dpi: int = 120):
    """Draw ``layout`` over the logical ``shape`` (1-D, 2-D, or higher with the leading
    dimensions flattened into rows). Cells show every physical location (replicas on
    separate lines), colour is the value of ``color_axis``. Returns the matplotlib
    ``Figure``; writes a PNG to ``path`` when given. Works for ``ComposeLayout`` (its
    swizzled ``m``) as well as ``TileLayout``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.figure import Figure
    import matplotlib as mpl

    shape, rows, cols = _grid_shape(shape)
    axis = color_axis or _default_color_axis(layout)
    values = cell_values(layout, shape, axis)
    show_text = rows * cols <= max_text_cells
    labels = cell_labels(layout, shape, sep="\n") if show_text else None

    distinct = sorted({v for row in values for v in row})
    lines = max((lab.count("\n") + 1 for row in labels for lab in row), default=1) \
        if labels else 1
    longest = max((max(len(s) for s in lab.split("\n")) for row in labels for lab in row),
                  default=4) if labels else 4
    cw = max(0.35, min(1.6, 0.075 * longest)) if show_text else 0.25
    ch = max(0.3, 0.2 * lines + 0.12) if show_text else 0.25
    fw = min(60.0, cols * cw + 2.2)
    fh = min(60.0, rows * ch + 1.8)
    fig = Figure(figsize=(fw, fh), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)

    if len(distinct) <= 20:
        base = mpl.colormaps["tab20"] if len(distinct) > 10 else mpl.colormaps["tab10"]
        cmap = ListedColormap([base(k % base.N) for k in range(len(distinct))])
        index = {v: k for k, v in enumerate(distinct)}
        data = [[index[v] for v in row] for row in values]
        norm = BoundaryNorm([k - 0.5 for k in range(len(distinct) + 1)], cmap.N)
    else:
        cmap, norm, data = mpl.colormaps["viridis"], None, values
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest",
                   alpha=0.55)

    if show_text:
        fs = max(4.0, min(9.0, 72 * cw / max(longest, 1) * 1.55))
        for i in range(rows):
            for j in range(cols):
                ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=fs,
                        family="monospace", color="black")
    ax.set_xticks(range(cols) if cols <= 64 else [])
    ax.set_yticks(range(rows) if rows <= 64 else [])
    ax.tick_params(labelsize=7, length=0)
    ax.set_xticks([x - 0.5 for x in range(1, cols)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, rows)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(f"logical dim {len(shape) - 1} (extent {shape[-1]})", fontsize=8)
    ylab = "logical dim 0" if len(shape) == 2 else \
        f"logical dims 0..{len(shape) - 2} flattened" if len(shape) > 2 else ""
    ax.set_ylabel(ylab, fontsize=8)

    head = title if title is not None else str(layout)
    wrapped = "\n".join(textwrap.wrap(head, width=max(40, int(fw * 11)))) or head
    what = "16-byte chunk of m in its swizzle row" if axis == CHUNK else axis
    ax.set_title(f"{wrapped}\nlogical shape {shape}; colour = {what}", fontsize=9)
    cbar = fig.colorbar(im, ax=ax, fraction=0.035, pad=0.02)
    cbar.set_label(axis, fontsize=8)
    if len(distinct) <= 20:
        cbar.set_ticks(list(range(len(distinct))))
        cbar.set_ticklabels([str(v) for v in distinct])
    cbar.ax.tick_params(labelsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(str(path), format="png", dpi=dpi)
    return fig
