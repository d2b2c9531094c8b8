"""The fuse-pointwise pass (tilejit/passes/fusion.py): which temporaries it folds, which
it must leave alone, the fused IR's text and verifier, and results against numpy/torch."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.errors import CompilationError
from tilejit.examples.kernels import layer_norm, run_layer_norm
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.passes.pipeline import run_pipeline


def fused_ir(kernel, *args, **constexprs) -> str:
    """The IR of ``kernel`` after fuse-pointwise, for these arguments."""
    text = kernel.compile(*args, **constexprs).asm["ir"]
    _, stages = run_pipeline(parse_kernel(text), passes=["scope-analysis", "fuse-pointwise"])
    return stages["fuse-pointwise"]


def tile_ops(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("tile.")]


# ----------------------------------------------------------------------------- layer norm
def test_layer_norm_reads_its_tile_three_times():
    x, w, b = torch.randn(8, 40), torch.randn(40), torch.randn(40)
    text = fused_ir(layer_norm, x, w, b, torch.empty_like(x), 1e-5, N=40, BM=2, BLOCK=40)
    ops = tile_ops(text)
    # copy in, sum, fused sum of squares, the (BM, 1) statistics, the fused output store
    assert [op.split("(")[0] for op in ops] == ["tile.copy", "tile.reduce", "tile.pointwise",
                                                "tile.reduce", "tile.pointwise",
                                                "tile.pointwise"]
    # (t - mean)^2 summed from t, the centred tile recomputed rather than stored
    assert ops[3].startswith("tile.reduce(%8, %t, %mean) {op = sum, axis = 1, "
                             "steps = [[sub, f32, 0, 1], [mul, f32, 2, 2]]")
    assert "steps = [[div, f32, 0, 1], [add, f32, 3, 2], [rsqrt, f32, 4]]" in ops[4]
    # fma((t - mean) * rstd, w, b) stored straight into out's region (%13)
    assert ops[5].startswith("tile.pointwise(%13, %t, %mean, %rstd, %15, %17) {op = expr, "
                             "steps = [[sub, f32, 0, 1], [mul, f32, 5, 2], [fma, f32, 6, 3, 4]]")
    assert text.count("alloc {scope = fragment, dtype = f32, shape = [2, 40]}") == 1


@pytest.mark.parametrize("rows, cols, block, cache", [
    (37, 100, None, None), (5, 81, 96, None), (3, 1000, None, None), (7, 300, None, "stream")])
def test_layer_norm_matches_torch(rows, cols, block, cache):
    torch.manual_seed(rows)
    x, w, b = torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)
    out = torch.empty_like(x)
    run_layer_norm(x, w, b, out, block=block, cache=cache)
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5),
                               rtol=1e-5, atol=1e-5)


def test_fused_reduce_uses_the_vector_family():
    x, w, b = torch.randn(8, 40), torch.randn(40), torch.randn(40)
    log = layer_norm.compile(x, w, b, torch.empty_like(x), 1e-5, N=40, BM=2,
                             BLOCK=40).dispatch_log
    # twice each: reading x in place, and from the copy (cpu-read-copies-in-place)
    assert [r.rule for r in log if r.primitive == "reduce"] == ["lanes", "lanes"] * 2


# ----------------------------------------------------------------------------- left alone
@tj.kernel
def read_by_element(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    y = t * 2.0
    out[0] = y[1]               # an element access: y must exist
    tj.copy(out[1:N + 1], y + 1.0)


@tj.kernel
def source_overwritten(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    y = t * 2.0
    tj.fill(t, 0.0)             # y holds the old t: folding y past this would read zeros
    tj.copy(out[0:N], y)


@tj.kernel
def used_in_a_loop(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    y = t * 2.0
    for i in tj.range(0, 2):
        tj.copy(out[i * N:i * N + N], y)


@tj.kernel
def shifted_in_place(x, out, N: tj.constexpr):
    t = tj.fragment((N + 1,), tj.float32)
    tj.copy(t, x[0:N + 1])
    y = t[0:N] * 2.0
    tj.copy(t[1:N + 1], y)      # would read t[i] after writing it, fused
    tj.copy(out[0:N + 1], t)


@tj.kernel
def approximate_consumer(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    y = t * 2.0
    tj.copy(out[0:N], tj.exp(y, config={"approx": True}))   # a chain's steps have no config


@tj.kernel
def exported_by_a_team(x, out, N: tj.constexpr):
    with tj.warpgroup():
        t = tj.fragment((N,), tj.float32)
        tj.copy(t, x[0:N])
        y = t * 2.0     # read by the add and by the team's yield, which binds it outside
        tj.copy(out[0:N], y + 1.0)


def test_a_temporary_a_team_exports_stays():
    """The team's yield is one of y's consumers, not a tile op: y is not folded (the pass
    used to ask the yield for a config and fail)."""
    x, out = torch.randn(7), torch.zeros(7)
    exported_by_a_team[(1,)](x, out, N=7)
    torch.testing.assert_close(out, x * 2 + 1)
    assert "%y_1 = alloc" in fused_ir(exported_by_a_team, x, out, N=7)


@pytest.mark.parametrize("kernel, length, expected", [
    (read_by_element, 7, lambda x: np.concatenate([[x[1] * 2], x[:6] * 2 + 1])),
    (approximate_consumer, 7, lambda x: np.exp(x[:7] * 2)),
    (source_overwritten, 7, lambda x: x[:7] * 2),
    (used_in_a_loop, 7, lambda x: np.concatenate([x[:7] * 2, x[:7] * 2])),
    (shifted_in_place, 7, lambda x: np.concatenate([x[:1], x[:7] * 2])),
])
def test_temporaries_that_must_stay(kernel, length, expected):
    x = torch.randn(16)
    out = torch.zeros(2 * length)
    kernel[(1,)](x, out, N=length)
    want = expected(x.numpy())
    np.testing.assert_allclose(out.numpy()[:len(want)], want, rtol=1e-6)
    assert "%y = alloc" in fused_ir(kernel, x, out, N=length)   # y was not folded


@tj.kernel
def chain_to_bf16(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    tj.copy(out[0:N], tj.exp(t - 1.0) * 3.0)


def test_copy_into_another_dtype_converts_once():
    x = torch.randn(33)
    out = torch.empty(33, dtype=torch.bfloat16)
    chain_to_bf16[(1,)](x, out, N=33)
    torch.testing.assert_close(out, (torch.exp(x - 1.0) * 3.0).to(torch.bfloat16))
    ops = tile_ops(fused_ir(chain_to_bf16, x, out, N=33))
    assert len(ops) == 2 and ops[1].count("[cast, bf16, 5]]") == 1


# ----------------------------------------------------------------------------- random chains
UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
          "div": lambda a, b: a / (np.abs(b) + 1.0)}


def _program(draw_ops):
    """Python source of a kernel computing a random chain, and the numpy reference."""
    body, ref = ["    v0 = a", "    v1 = b"], ["v0 = a", "v1 = b"]
    for k, (name, i, j) in enumerate(draw_ops, start=2):
        i, j = i % k, j % k
        if name in UNARY:
            body.append(f"    v{k} = tj.{name}(v{i})")
            ref.append(f"v{k} = UNARY[{name!r}](v{i})")
        elif name == "div":       # a divisor away from zero
            body.append(f"    v{k} = v{i} / (tj.abs(v{j}) + 1.0)")
            ref.append(f"v{k} = BINARY[{name!r}](v{i}, v{j})")
        else:
            body.append(f"    v{k} = tj.{name}(v{i}, v{j})")
            ref.append(f"v{k} = BINARY[{name!r}](v{i}, v{j})")
    return body, ref, len(draw_ops) + 1


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(ops=st.lists(st.tuples(st.sampled_from([*UNARY, *BINARY]), st.integers(0, 50),
                              st.integers(0, 50)), min_size=1, max_size=6),
       rows=st.integers(1, 5), cols=st.integers(1, 45))
def test_random_chains_match_numpy(ops, rows, cols, tmp_path_factory):
    body, ref, last = _program(ops)
    source = "\n".join([
        "import tilejit as tj",
        "@tj.kernel",
        "def chain(x, y, out, R: tj.constexpr, C: tj.constexpr):",
        "    a = tj.fragment((R, C), tj.float32)",
        "    b = tj.fragment((R, C), tj.float32)",
        "    tj.copy(a, x[0:R, 0:C])",
        "    tj.copy(b, y[0:R, 0:C])",
        *body,
        f"    tj.copy(out[0:R, 0:C], v{last})",
        f"    tj.copy(out[R:R + 1, 0:C], tj.sum(v{last}, axis=0, keep_dims=True))",
        f"    tj.copy(out[0:R, C:C + 1], tj.sum(v{last} * v{last}, axis=1, keep_dims=True))",
    ])
    path = tmp_path_factory.mktemp("chain") / "chain_kernel.py"
    path.write_text(source)
    namespace = {"__name__": "chain_kernel", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    rng = np.random.default_rng(len(ops) * 100 + rows * 10 + cols)
    a = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    b = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    out = torch.zeros(rows + 1, cols + 1)
    namespace["chain"][(1,)](torch.from_numpy(a), torch.from_numpy(b), out, R=rows, C=cols)
    scope = {"a": a, "b": b, "UNARY": UNARY, "BINARY": BINARY}
    with np.errstate(all="ignore"):
        exec("\n".join(ref), scope)
    want = scope[f"v{last}"]
    np.testing.assert_allclose(out.numpy()[:rows, :cols], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy()[rows, :cols], want.sum(axis=0), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(out.numpy()[:rows, cols], (want * want).sum(axis=1),
                               rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- IR text
FUSED_TEXT = """\
kernel @k(%x: buffer<global, f32, [8], strides=[1]>) loc("/a.py":1:0) {
  %a = alloc {scope = fragment, dtype = f32, shape = [8]} : buffer<fragment, f32, [8]> loc(3:2)
  %s = alloc {scope = fragment, dtype = f32, shape = [1]} : buffer<fragment, f32, [1]> loc(4:2)
  %c = const {value = 2.0} : f32 loc(5:2)
  tile.copy(%a, %x) loc(6:2)
  tile.pointwise(%x, %a, %c) {op = expr, steps = [[mul, f32, 0, 1], [neg, f32, 2]]} loc(7:2)
  tile.reduce(%s, %a, %c) {op = sum, axis = 0, steps = [[add, f32, 0, 1]]} loc(8:2)
}
"""


def test_fused_ops_round_trip():
    kernel = parse_kernel(FUSED_TEXT)
    verify(kernel)
    assert str(parse_kernel(str(kernel))) == str(kernel)
    assert "steps = [[mul, f32, 0, 1], [neg, f32, 2]]" in str(kernel)


@pytest.mark.parametrize("steps, message", [
    ("[[mul, f32, 0, 2]]", "reads a value defined at or after it"),
    ("[[mul, f32, 0]]", r"takes 2 value\(s\), got 1"),
    ("[[mul, f64, 0, 1]]", "the last step computes f64"),
    ("[[iota, f32, 0]]", "cannot hold iota"),
    ("[[frobnicate, f32, 0]]", "step op must be one of"),
])
def test_bad_chains_are_refused(steps, message):
    text = FUSED_TEXT.replace("[[mul, f32, 0, 1], [neg, f32, 2]]", steps)
    with pytest.raises(CompilationError, match=message):
        verify(parse_kernel(text))


def test_steps_only_on_fused_ops():
    text = FUSED_TEXT.replace("op = expr, steps", "op = mul, steps")
    with pytest.raises(CompilationError, match="only it"):
        verify(parse_kernel(text))
