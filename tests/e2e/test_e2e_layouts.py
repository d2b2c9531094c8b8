"""Every primitive on tiles with random layouts vs numpy.

A layout may place a tile's elements on thread axes (lanes, warps, threads of a
warpgroup), on Trainium's partition/free axes, with padding, negative strides, offsets,
replicas, column-major or mixed orders, or with a swizzle; the tile may be a fragment, a
shared buffer or a per-thread local. Whatever the placement, copy / pointwise / reduce /
gemm must compute what numpy computes on the logical tile (the CPU target stores a tile
over all of its layout's axes). Non-power-of-two tile shapes; tensors end inside a tile.
"""
import importlib.util
import itertools

import numpy as np
import pytest
from e2e_helpers import launched_or_refused
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tilejit.layout import Axis, ComposeLayout, Iter, TileLayout

_COUNTER = itertools.count()
THREAD_AXES = ["laneid", "warpid", "tid_in_wg"]


def thread_counts(num_warps: int) -> dict[str, int]:
    return {"laneid": 32, "warpid": num_warps, "tid_in_wg": 32 * min(4, num_warps)}
TRAINIUM_AXES = ["P", "F"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def layouts(draw, shape, scope):
    """An injective random layout of a ``shape`` tile (None: the default row-major)."""
    if draw(st.integers(0, 5)) == 0:
        return None
    extents = []
    for n in shape:                   # each logical dim split into two iters, outer first
        outer = draw(st.sampled_from(_divisors(n)))
        extents += [outer, n // outer]
    swizzled = scope == "shared" and draw(st.integers(0, 3)) == 0
    axes = ["m"] if swizzled else ["m"] * 3 + THREAD_AXES + TRAINIUM_AXES
    chosen = [draw(st.sampled_from(axes)) for _ in extents]
    strides = [0] * len(extents)
    # per axis (first-appearance order: a set's would follow the process's string-hash
    # seed, and the draws with it): a random nesting order, gaps, signs
    for axis in dict.fromkeys(chosen):
        members = [i for i, a in enumerate(chosen) if a == axis]
        order = draw(st.permutations(members))
        step = 1
        for i in order:
            step *= draw(st.sampled_from([1, 1, 2])) if not swizzled else 1
            sign = -1 if not swizzled and draw(st.integers(0, 4)) == 0 else 1
            strides[i] = sign * step
            step *= extents[i]
    shard = [Iter(e, s, Axis(a)) for e, s, a in zip(extents, strides, chosen)]
    offset = {} if swizzled else {a: draw(st.integers(-3, 5))
                                  for a in draw(st.sets(st.sampled_from(sorted(set(chosen)))))}
    replica = []
    if not swizzled and draw(st.booleans()):
        replica = [Iter(2, draw(st.sampled_from([7, 40])), Axis(draw(st.sampled_from(
            THREAD_AXES))))]
    tile = TileLayout.from_iters(shard, replica, offset)
    # Thread coordinates must exist in the CTA (scope-analysis refuses lane -1 or warp 4
    # of 4): shift each thread axis to start at 0 and drop layouts that do not fit.
    counts = thread_counts(1 if scope == "local" else 4)
    for axis in {it.axis.name for it in shard + replica} & set(THREAD_AXES):
        iters = [it for it in shard + replica if it.axis.name == axis]
        low = offset.get(axis, 0) + sum(min(0, (it.extent - 1) * it.stride) for it in iters)
        high = offset.get(axis, 0) + sum(max(0, (it.extent - 1) * it.stride) for it in iters)
        assume(high - low < counts[axis])
        offset[axis] = offset.get(axis, 0) - low
    tile = TileLayout.from_iters(shard, replica, offset)
    if swizzled:
        swizzle_len = draw(st.integers(1, 2))
        return ComposeLayout(draw(st.integers(0, 2)), swizzle_len,
                             draw(st.integers(swizzle_len, 3)), tile)
    return tile


@st.composite
def programs(draw):
    primitive = draw(st.sampled_from(["copy", "pointwise", "reduce", "gemm"]))
    scope = draw(st.sampled_from(["fragment", "shared", "local"]))
    bm, bn, bk = draw(st.integers(1, 9)), draw(st.integers(1, 10)), draw(st.integers(1, 7))
    shapes = {"copy": [(bm, bn)], "pointwise": [(bm, bn), (bm, bn)],
              "reduce": [(bm, bn), (bm,)], "gemm": [(bm, bk), (bk, bn), (bm, bn)]}[primitive]
    return {"primitive": primitive, "scope": scope, "bm": bm, "bn": bn, "bk": bk,
            "shapes": shapes, "layouts": [draw(layouts(s, scope)) for s in shapes],
            "h": draw(st.integers(1, 2 * bm)), "w": draw(st.integers(1, 2 * bn))}


_ALLOC = {"fragment": "tj.fragment", "shared": "tj.alloc_shared", "local": "tj.alloc_local"}


def _source(p) -> str:
    bm, bn, bk = p["bm"], p["bn"], p["bk"]
    alloc = _ALLOC[p["scope"]]
    lines = ["import tilejit as tj", "from tilejit.layout import TileLayout, ComposeLayout",
             "from tilejit.layout.swizzle import parse_layout", ""]
    for n, layout in enumerate(p["layouts"]):
        lines.append(f"L{n} = {'None' if layout is None else f'parse_layout({str(layout)!r})'}")
    lines += ["", "", "@tj.kernel", "def probe(x, y, out):"]
    body = ["r = tj.cta_id(0) * %d" % bm, "c = tj.cta_id(1) * %d" % bn]
    body += [f"t{n} = {alloc}({shape}, tj.float32, layout=L{n})"
             for n, shape in enumerate(p["shapes"])]
    primitive = p["primitive"]
    if primitive == "copy":
        body += [f"tj.copy(t0, x[r:r + {bm}, c:c + {bn}])",
                 f"tj.copy(out[r:r + {bm}, c:c + {bn}], t0)"]
    elif primitive == "pointwise":
        body += [f"tj.copy(t0, x[r:r + {bm}, c:c + {bn}])",
                 f"tj.copy(t1, y[r:r + {bm}, c:c + {bn}])",
                 "tj.mul(t0, t0, 2.0)", "tj.add(t0, t0, t1)",
                 f"tj.copy(out[r:r + {bm}, c:c + {bn}], t0)"]
    elif primitive == "reduce":
        body += [f"tj.copy(t0, x[r:r + {bm}, c:c + {bn}])", "tj.reduce(t1, t0, 'sum', 1)",
                 f"tj.copy(out[r:r + {bm}, tj.cta_id(1)], t1)"]
    else:
        body += [f"tj.copy(t0, x[r:r + {bm}, 0:{bk}])", f"tj.copy(t1, y[0:{bk}, c:c + {bn}])",
                 "tj.fill(t2, 0.5)", "tj.gemm(t2, t0, t1)",
                 f"tj.copy(out[r:r + {bm}, c:c + {bn}], t2)"]
    if p["scope"] == "local":      # a local is one thread's: each thread does the tile
        body = ["with tj.thread():"] + ["    " + line for line in body]
    return "\n".join(lines + ["    " + line for line in body]) + "\n"


def _inputs(p, rng):
    h, w, bk = p["h"], p["w"], p["bk"]
    shapes = {"gemm": ((h, bk), (bk, w)), "pointwise": ((h, w), (h, w))}
    x_shape, y_shape = shapes.get(p["primitive"], ((h, w), (1, 1)))
    return [(rng.integers(-8, 8, s) / 4).astype(np.float32) for s in (x_shape, y_shape)]


def _expected(p, x, y, gm, gn):
    h = p["h"]
    if p["primitive"] == "copy":
        return x
    if p["primitive"] == "pointwise":
        return x * 2 + y
    if p["primitive"] == "gemm":
        return x @ y + np.float32(0.5)
    out = np.zeros((h, gn), np.float32)
    for j in range(gn):
        out[:, j] = x[:, j * p["bn"]:(j + 1) * p["bn"]].sum(axis=1)
    return out


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("layout_kernels")


def _load(kernel_dir, p):
    path = kernel_dir / f"layout_probe_{next(_COUNTER)}.py"
    path.write_text(_source(p))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.probe, path


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(p=programs(), seed=st.integers(0, 2**16))
def test_primitives_on_laid_out_tiles_match_numpy(kernel_dir, p, seed, lowering):
    probe, path = _load(kernel_dir, p)
    x, y = _inputs(p, np.random.default_rng(seed))
    gm, gn = -(-p["h"] // p["bm"]), -(-p["w"] // p["bn"])
    expected = _expected(p, x, y, gm, gn)
    out = np.full(expected.shape, 123, np.float32)
    num_warps = 1 if p["scope"] == "local" else 4
    if launched_or_refused(lowering, path, lambda: probe[(gm, gn)](x, y, out,
                                                                   num_warps=num_warps)):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5,
                                   err_msg=path.read_text())


# The reports that found the class (exact layouts and shapes).
REPORTED = [
    ("fragment", "(4,8):(1@tid_in_wg,1@m)", (4, 8)),
    ("shared", "(4,8):(1@tid_in_wg,1@m)", (4, 8)),
    ("fragment", "(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m)", (8, 16)),
    ("fragment", "(16,32):(40,1@m)", (16, 32)),
    ("shared", "(4,128,8,128):(1024@F,1@F,128@F,1@P)", (512, 1024)),
    # copies overlapping the lanes of the base: no owner per element, so per thread a
    # cyclic split (shared memory is reachable from every thread)
    ("shared", "(2,1,1,4):(2@P,1@warpid,8@laneid,2@laneid) + R[2:7@laneid]", (2, 4)),
]


@pytest.mark.parametrize("scope, layout, shape", REPORTED)
def test_reported_layouts_scale_correctly(kernel_dir, scope, layout, shape):
    p = {"primitive": "pointwise", "scope": scope, "bm": shape[0], "bn": shape[1], "bk": 1,
         "shapes": [shape, shape], "layouts": [TileLayout.parse(layout), None],
         "h": shape[0], "w": shape[1]}
    probe, path = _load(kernel_dir, p)
    x, y = _inputs(p, np.random.default_rng(0))
    out = np.zeros_like(x)
    probe[(1, 1)](x, y, out)
    np.testing.assert_array_equal(out, x * 2 + y, err_msg=path.read_text())


def test_gemm_into_a_trainium_sbuf_layout(kernel_dir):
    """The paper's §5.3 operand layouts (K on P) on shared buffers: exact on the CPU."""
    p = {"primitive": "gemm", "scope": "shared", "bm": 64, "bn": 48, "bk": 128,
         "shapes": [(64, 128), (128, 48), (64, 48)],
         "layouts": [TileLayout.parse("(64,128):(1@F,1@P)"),
                     TileLayout.parse("(128,48):(1@P,1@F)"),
                     TileLayout.parse("(64,48):(1@P,1@F)")],
         "h": 64, "w": 48}
    probe, path = _load(kernel_dir, p)
    x, y = _inputs(p, np.random.default_rng(1))
    out = np.zeros((64, 48), np.float32)
    probe[(1, 1)](x, y, out)
    np.testing.assert_allclose(out, x @ y + np.float32(0.5), rtol=1e-6, err_msg=path.read_text())
