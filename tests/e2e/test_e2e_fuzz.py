"""Random small kernels through the public API vs numpy (tilejit.passes.reference).

Each example writes a kernel to a file (kernels are compiled from their source): 1-3
input tiles of shapes (BM, BN), (BM, 1) or (1, BN) loaded from global tensors with
masked edges, a random pointwise expression tree over them (broadcasting, scalar
constants, statement and expression forms), then either the tile stored back (broadcast
by copy) or a random reduce (op, axis, kept or dropped) stored per CTA. Non-power-of-two
tile and tensor shapes; the tensors end inside the last tile."""
import importlib.util
import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.passes import reference

_COUNTER = itertools.count()

FLOAT_UNARY = [("-({})", "-({})"), ("tj.abs({})", "np.abs({})"),
               ("tj.exp(-tj.abs({}))", "np.exp(-np.abs({}))"),
               ("tj.sqrt(tj.abs({}))", "np.sqrt(np.abs({}))"),
               ("tj.log(tj.abs({}) + 1.0)", "np.log(np.abs({}) + np.float32(1))")]
INT_UNARY = [("-({})", "-({})"), ("tj.abs({})", "np.abs({})")]
BINARY = [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
          ("tj.maximum({}, {})", "np.maximum({}, {})"),
          ("tj.minimum({}, {})", "np.minimum({}, {})"),
          ("tj.select({0} < {1}, {0}, {1})", "np.where({0} < {1}, {0}, {1})")]
FLOAT_BINARY = BINARY + [("({} / (tj.abs({}) + 2.0))", "({} / (np.abs({}) + np.float32(2)))")]
SHAPES = {"full": lambda bm, bn: (bm, bn), "col": lambda bm, bn: (bm, 1),
          "row": lambda bm, bn: (1, bn)}


@st.composite
def expressions(draw, leaves, dtype, depth, top=False):
    """(kernel code, numpy code) of a tree whose every node involves a tile."""
    is_float = dtype == "float32"
    if depth == 0 or (not top and draw(st.integers(0, 3)) == 0):
        name = draw(st.sampled_from(leaves))
        return name, name
    kind = draw(st.sampled_from(["unary", "binary", "binary", "scalar"]))
    if kind == "unary":
        code, ref = draw(st.sampled_from(FLOAT_UNARY if is_float else INT_UNARY))
        a = draw(expressions(leaves, dtype, depth - 1))
        return code.format(a[0]), ref.format(a[1])
    if kind == "scalar":
        value = draw(st.sampled_from([0.5, -1.25, 3.0]) if is_float else st.integers(-3, 3))
        a = draw(expressions(leaves, dtype, depth - 1))
        op = draw(st.sampled_from(["+", "-", "*"]))
        np_value = f"np.float32({value})" if is_float else f"np.int32({value})"
        if draw(st.booleans()):
            return f"({a[0]} {op} {value})", f"({a[1]} {op} {np_value})"
        return f"({value} {op} {a[0]})", f"({np_value} {op} {a[1]})"
    code, ref = draw(st.sampled_from(FLOAT_BINARY if is_float else BINARY))
    a = draw(expressions(leaves, dtype, depth - 1))
    b = draw(expressions(leaves, dtype, depth - 1))
    return code.format(a[0], b[0]), ref.format(a[1], b[1])


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(["float32", "int32"]))
    bm, bn = draw(st.integers(1, 12)), draw(st.integers(1, 20))
    h, w = draw(st.integers(1, 2 * bm + 3)), draw(st.integers(1, 2 * bn + 3))
    kinds = [draw(st.sampled_from(sorted(SHAPES))) for _ in range(draw(st.integers(1, 3)))]
    leaves = [f"a{i}" for i in range(len(kinds))]
    code, ref = draw(expressions(leaves, dtype, draw(st.integers(1, 4)), top=True))
    for leaf in leaves:          # every input takes part (and broadcasts): + (a - a)
        if not re.search(rf"\b{leaf}\b", code):
            code, ref = f"({code} + ({leaf} - {leaf}))", f"({ref} + ({leaf} - {leaf}))"
    statement = draw(st.booleans())           # also exercise tj.add(dst, a, b) once
    reduce = draw(st.none() | st.tuples(st.sampled_from(["sum", "max", "min"]),
                                        st.integers(0, 1), st.booleans()))
    return {"dtype": dtype, "bm": bm, "bn": bn, "h": h, "w": w, "kinds": kinds, "code": code,
            "ref": ref, "statement": statement, "reduce": reduce}


def _source(p) -> str:
    bm, bn = p["bm"], p["bn"]
    lines = ["import tilejit as tj", "", "",
             "@tj.kernel",
             f"def fuzz({', '.join(f'x{i}' for i in range(len(p['kinds'])))}, out):",
             "    i = tj.cta_id(0)", "    j = tj.cta_id(1)",
             f"    r = i * {bm}", f"    c = j * {bn}"]
    for n, kind in enumerate(p["kinds"]):
        shape = SHAPES[kind](bm, bn)
        rows = f"r:r + {bm}" if kind != "row" else "0:1"
        cols = f"c:c + {bn}" if kind != "col" else "0:1"
        lines += [f"    a{n} = tj.fragment({shape}, x{n}.dtype)",
                  f"    tj.copy(a{n}, x{n}[{rows}, {cols}])"]
    lines.append(f"    e = {p['code']}")
    if p["statement"]:
        lines += [f"    s = tj.fragment({_result_shape(p)}, e.dtype)", "    tj.add(s, e, a0)",
                  "    e = tj.sub(s, a0)"]
    if p["reduce"] is None:
        lines.append(f"    tj.copy(out[r:r + {bm}, c:c + {bn}], e)")
    else:
        op, axis, _ = p["reduce"]
        lines.append(f"    d = tj.fragment({_reduced_shape(p)}, e.dtype)")
        lines.append(f"    tj.reduce(d, e, {op!r}, axis={axis})")
        lines.append(f"    tj.copy(out[{_out_region(p)}], d)")
    return "\n".join(lines) + "\n"


def _uses(code: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", code) is not None


def _result_shape(p):
    """The broadcast shape of the leaves the expression uses (and a0 for the statement)."""
    used = [SHAPES[k](p["bm"], p["bn"]) for n, k in enumerate(p["kinds"])
            if _uses(p["code"], f"a{n}") or (p["statement"] and n == 0)]
    return tuple(np.broadcast_shapes(*used))


def _reduced_shape(p):
    _, axis, keep = p["reduce"]
    shape = list(_result_shape(p))
    if keep:
        shape[axis] = 1
    else:
        del shape[axis]
    return tuple(shape)


def _out_region(p) -> str:
    bm, bn = p["bm"], p["bn"]
    _, axis, keep = p["reduce"]
    if axis == 0:
        return f"i:i + 1, c:c + {bn}" if keep else f"i, c:c + {bn}"
    return f"r:r + {bm}, j:j + 1" if keep else f"j, r:r + {bm}"


def _out_shape(p, gm, gn):
    if p["reduce"] is None:
        return (p["h"], p["w"])
    _, axis, keep = p["reduce"]
    if axis == 0:
        return (gm, p["w"])
    return (p["h"], gn) if keep else (gn, p["h"])


def _expected(p, inputs, gm, gn):
    dtype = np.dtype(p["dtype"])
    bm, bn = p["bm"], p["bn"]
    out = np.zeros(_out_shape(p, gm, gn), dtype)
    for i in range(gm):
        for j in range(gn):
            r, c = i * bm, j * bn
            env = {"np": np}
            for n, (kind, x) in enumerate(zip(p["kinds"], inputs)):
                starts = (r if kind != "row" else 0, c if kind != "col" else 0)
                env[f"a{n}"] = reference.read_region(x, starts, SHAPES[kind](bm, bn))
            with np.errstate(all="ignore"):
                e = np.asarray(eval(p["ref"], env), dtype)
                if p["statement"]:
                    e = (e + env["a0"]).astype(dtype) - env["a0"]
            e = np.asarray(e, dtype)
            if p["reduce"] is None:
                reference.write_region(out, (r, c), np.broadcast_to(e, (bm, bn)))
                continue
            op, axis, keep = p["reduce"]
            d = reference.reduce(np.zeros(_reduced_shape(p), dtype), e, op, axis)
            if axis == 0:
                tile = np.broadcast_to(d.reshape(1, -1), (1, bn))
                reference.write_region(out, (i, c), tile if keep else tile[0],
                                       None if keep else (False, True))
            elif keep:
                reference.write_region(out, (r, j), np.broadcast_to(d.reshape(-1, 1), (bm, 1)))
            else:
                reference.write_region(out, (j, r), np.broadcast_to(d.reshape(-1), (bm,)),
                                       (False, True))
    return out


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_kernels")


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(p=programs(), seed=st.integers(0, 2**16))
def test_random_kernels_match_numpy(kernel_dir, p, seed):
    path = kernel_dir / f"fuzz_{next(_COUNTER)}.py"
    path.write_text(_source(p))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(seed)
    dtype = np.dtype(p["dtype"])
    inputs = []
    for kind in p["kinds"]:
        shape = {"full": (p["h"], p["w"]), "col": (p["h"], 1), "row": (1, p["w"])}[kind]
        values = rng.integers(-8, 8, shape)
        inputs.append((values / 4 if dtype.kind == "f" else values).astype(dtype))
    gm, gn = tj.cdiv(p["h"], p["bm"]), tj.cdiv(p["w"], p["bn"])
    out = np.full(_out_shape(p, gm, gn), 123, dtype)
    module.fuzz[(gm, gn)](*inputs, out)
    expected = _expected(p, inputs, gm, gn)
    if dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4,
                                   err_msg=path.read_text())
    else:
        np.testing.assert_array_equal(out, expected, err_msg=path.read_text())
