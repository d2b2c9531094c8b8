import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilejit.errors import CompilationError, SourceLocation
from tilejit.ir import Builder, KernelIR, parse_kernel, print_op, verify
from tilejit.ir.scope import ExecScope
from tilejit.ir.types import BufferType, MemScope, f16, f32, i1, i32, i64
from tilejit.layout import ComposeLayout, TileLayout

from .samples import ALL, FILE


def lines_of(kernel):
    return [line.strip() for line in str(kernel).splitlines()]


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_kernels_round_trip_exactly(name):
    text = str(ALL[name]())
    parsed = parse_kernel(text)
    verify(parsed)
    assert str(parsed) == text


def test_vector_add_lines():
    lines = lines_of(ALL["vector_add"]())
    assert lines[0] == (
        'kernel @add(%x: buffer<global, f32, [?], strides=[1]>, '
        '%y: buffer<global, f32, [?], strides=[1]>, %out: buffer<global, f32, [?], strides=[1]>, '
        '%n: i32) {constexprs = {BLOCK = 1024}} loc("/src/kernels.py":3:0) {')
    assert "%0 = thread_index {kind = cta_id} : i32 loc(5:11)" in lines  # dim = 0 is the default
    assert "%base = binary(%0, %1) {op = mul} : i32 loc(5:11)" in lines
    assert ("%a = alloc {scope = fragment, dtype = f32, shape = [1024]} : "
            "buffer<fragment, f32, [1024]> loc(6:8)") in lines
    assert "tile.pointwise(%c, %a, %c) {op = add} loc(9:4)" in lines
    assert lines[-1] == "}"


def test_softmax_like_lines():
    lines = lines_of(ALL["softmax_like"]())
    assert "%m = for(%0, %n_cols, %1, %2) {pipeline = 2} : f32 loc(24:4) {" in lines
    assert "^(%col: i32, %3: f32):" in lines
    assert "%2 = const {value = -inf} : f32 loc(24:4)" in lines
    assert ("%4 = region(%x, %row, %col) {sizes = [1, 256], keep = [false, true]} : "
            "region<buffer<global, f32, [?, ?], strides=[?, 1]>, [1, 256], keep=[false, true]> "
            "loc(25:8)") in lines
    assert "tile.reduce(%part, %tile) {op = max, axis = 0} loc(26:8)" in lines
    assert "yield(%m_next) loc(26:8)" in lines
    assert "store(%out, %m, %row) loc(28:4)" in lines


def test_gemm_and_warp_specialized_lines():
    gemm = lines_of(ALL["gemm"]())
    assert "tile.gemm(%acc, %a_s, %b_s) {config = {shape = [64, 128, 16]}} loc(49:8)" in gemm
    assert any(line.startswith("tile.copy(%a_s, ") and 'dispatch = "cp_async"' in line
               for line in gemm)
    assert "tile.pointwise(%acc, %4) {op = fill} loc(40:0)" in gemm
    ws = lines_of(ALL["warp_specialized"]())
    assert "if(%4) {filter = {axis = warpgroup, lo = 0, hi = 1}} loc(70:4) {" in ws
    assert "if(%6) {filter = {axis = elect}} loc(73:12) {" in ws
    assert "tile.copy_async(%a_s, %8, %full, %0) loc(73:12)" in ws
    assert "mbarrier_expect_tx(%full, %0, %7) {arrive = true} loc(73:12)" in ws
    assert "%9 = team {kind = warpgroup} : i1 loc(78:8) {" in ws
    assert "} {" in ws and "^():" in ws
    assert 'tile.copy(%11, %acc) {team = warpgroup} loc("/src/other.py":90:2)' in ws


HAND_WRITTEN = '''
// comments and free spacing are accepted; the printer normalizes them
kernel @k(%x: buffer<global, f32, [?], strides=[1]>,
          %n: i32) {num_warps = 2} loc("/a.py":1:0) {
  %c = const {value = 2.5} : f32 loc(2:4)
  %i = const{value=0}:i32 loc(3:4)
  %v = load(%x, %i) : f32 loc("/b.py":3:4)
  store(%x, %c, %i) loc(4:4)
  device_print(%v) {fmt = "v=\\"%f\\"\\n"} loc(5:4)
}
'''


def test_hand_written_text_parses_and_prints_canonically():
    k = parse_kernel(HAND_WRITTEN)
    verify(k)
    assert k.attrs["num_warps"] == 2 and k.loc == SourceLocation("/a.py", 1, 0)
    load = k.body.ops[2]
    assert load.loc == SourceLocation("/b.py", 3, 4) and k.body.ops[3].loc.file == "/a.py"
    assert k.body.ops[4].attrs["fmt"] == 'v="%f"\n'
    text = str(k)
    assert "%i = const {value = 0} : i32 loc(3:4)" in text
    assert 'device_print(%v) {fmt = "v=\\"%f\\"\\n"} loc(5:4)' in text
    assert str(parse_kernel(text)) == text


def test_value_names_are_unique_and_sanitized():
    k = KernelIR.new("k", ["n"], [i32], {}, SourceLocation(FILE, 1, 0))
    b = Builder(k.loc)
    with b.insert_into(k.body):
        values = [b.const(i, i32) for i in range(5)]
    for value, hint in zip(values, ["n", "acc", "acc", "3d", "a b"]):
        value.name_hint = hint
    lines = lines_of(k)
    assert [line.split(" = ")[0] for line in lines[1:-1]] == ["%n_1", "%acc", "%acc_1", "%v3d", "%a_b"]
    assert str(parse_kernel(str(k))) == str(k)


@pytest.mark.parametrize("value", [0.1, -0.0, 1e-30, 3.4e38, float("inf"), float("nan"), 7.0])
def test_float_constants_round_trip(value):
    k = KernelIR.new("k", [], [], {}, SourceLocation(FILE, 1, 0))
    b = Builder(k.loc)
    with b.insert_into(k.body):
        b.const(value, f32)
    parsed = parse_kernel(str(k)).body.ops[0].attrs["value"]
    assert str(parse_kernel(str(k))) == str(k)
    assert (math.isnan(parsed) and math.isnan(value)) or parsed == value


def test_print_op_shows_one_op_with_full_locations():
    op = ALL["gemm"]().body.ops[0]
    assert print_op(op) == '%0 = thread_index {kind = cta_id} : i32 loc("/src/kernels.py":40:0)'


@pytest.mark.parametrize("text, message, where", [
    ('kernel @k() loc("/a.py":1:0) {\n  %0 = const {value = 1} : i32 loc(2:4)\n'
     '  %0 = const {value = 2} : i32 loc(3:4)\n}',
     "%0 is defined twice", (3, 2)),
    ('kernel @k() loc("/a.py":1:0) {\n  yield(%q) loc(2:4)\n}', "undefined value %q", (2, 8)),
    ('kernel @k() loc("/a.py":1:0) {\n  %0 = const {value = 1} : i32 loc(2:4\n}', "expected ')'", (3, 0)),
    ('kernel @k() loc("/a.py":1:0) {\n  %0 = const {value = $} : i32 loc(2:4)\n}',
     "unexpected character '$'", (2, 22)),
])
def test_syntax_errors_point_into_the_text(text, message, where):
    with pytest.raises(CompilationError, match=re.escape(message)) as err:
        parse_kernel(text, "dump.ir")
    assert (err.value.file, err.value.line, err.value.col) == ("dump.ir", *where)


@pytest.mark.parametrize("body, message", [
    ("tile.frobnicate loc(7:3)", "unknown op 'tile.frobnicate'"),
    ("%0 = const {value = 1, colour = red} : i32 loc(7:3)", "const has no attribute 'colour'"),
    ("%0 = thread_index {kind = warp_id, dim = 1.5} : i32 loc(7:3)", "'dim' of thread_index: expected int"),
    ("%0 = thread_index {kind = warp_id} : f32 loc(7:3)", "thread_index produces i32, not f32"),
    ("%0 = alloc {scope = heap, dtype = f32, shape = [4]} : buffer<local, f32, [4]> loc(7:3)",
     "unknown MemScope 'heap'"),
])
def test_op_errors_while_parsing_point_at_the_ops_location(body, message):
    text = f'kernel @k() loc("/a.py":1:0) {{\n  {body}\n}}'
    with pytest.raises(CompilationError, match=message) as err:
        parse_kernel(text)
    assert (err.value.file, err.value.line, err.value.col) == ("/a.py", 7, 3)


# -- property: random IR built through the builder round-trips ---------------------------
SCALARS = [i32, i64, f32, f16, i1]
HINTS = ["", "", "", "a", "acc", "acc_1", "7", "x y", "n"]


def _const_value(draw, t):
    if t is i1:
        return draw(st.booleans())
    if t.is_float:
        return draw(st.floats(allow_nan=True, allow_infinity=True))
    return draw(st.integers(-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1))


class RandomIR:
    def __init__(self, draw):
        self.draw = draw
        self.b = Builder(SourceLocation(FILE, 1, 0))

    def value(self, visible, t):
        choices = [v for v in visible if v.type == t]
        if choices and self.draw(st.booleans()):
            return self.draw(st.sampled_from(choices))
        value = self.b.const(_const_value(self.draw, t), t)
        visible.append(value)
        return value

    def block(self, block, visible, depth, yield_types):
        visible = visible + list(block.args)
        with self.b.insert_into(block):
            for _ in range(self.draw(st.integers(0, 4))):
                self.b.loc = SourceLocation(self.draw(st.sampled_from([FILE, "/other.py"])),
                                            self.draw(st.integers(1, 300)), self.draw(st.integers(0, 40)))
                kinds = ["const", "binary", "cmp", "unary", "cast", "select", "load", "store"]
                kind = self.draw(st.sampled_from(kinds + (["for", "if", "team"] if depth < 2 else [])))
                for result in getattr(self, kind)(visible, depth):
                    result.name_hint = self.draw(st.sampled_from(HINTS))
                    visible.append(result)
            if yield_types is not None:
                self.b.yield_([self.value(visible, t) for t in yield_types])

    def scalar_type(self):
        return self.draw(st.sampled_from(SCALARS))

    def const(self, visible, depth):
        t = self.scalar_type()
        return [self.b.const(_const_value(self.draw, t), t)]

    def binary(self, visible, depth):
        t = self.draw(st.sampled_from([i32, i64, f32, f16]))
        op = self.draw(st.sampled_from(["add", "sub", "mul", "max", "min"]))
        return [self.b.binary(op, self.value(visible, t), self.value(visible, t))]

    def cmp(self, visible, depth):
        t = self.scalar_type()
        return [self.b.cmp(self.draw(st.sampled_from(["eq", "lt", "ge"])),
                           self.value(visible, t), self.value(visible, t))]

    def unary(self, visible, depth):
        op = self.draw(st.sampled_from(["exp", "neg", "sqrt", "log2"]))
        approx = op in ("exp", "log2") and self.draw(st.booleans())
        return [self.b.unary(op, self.value(visible, f32), approx=approx)]

    def cast(self, visible, depth):
        return [self.b.cast(self.value(visible, self.scalar_type()), self.scalar_type())]

    def select(self, visible, depth):
        t = self.scalar_type()
        return [self.b.select(self.value(visible, i1), self.value(visible, t), self.value(visible, t))]

    def load(self, visible, depth):
        return [self.b.load(visible[1], [self.value(visible, i32)])]

    def store(self, visible, depth):
        self.b.store(visible[1], self.value(visible, f32), [self.value(visible, i32)])
        return []

    def for_types(self):
        return self.draw(st.lists(st.sampled_from(SCALARS), max_size=2))

    def for_(self, visible, depth):
        inits = [self.value(visible, t) for t in self.for_types()]
        op, body = self.b.for_(self.value(visible, i32), visible[0], self.value(visible, i32), inits,
                               unroll=self.draw(st.sampled_from([None, 2])))
        self.block(body, visible, depth + 1, op.result_types)
        return op.results

    locals()["for"] = for_

    def if_(self, visible, depth):
        op, then_block, else_block = self.b.if_(self.value(visible, i1), self.for_types())
        self.block(then_block, visible, depth + 1, op.result_types)
        self.block(else_block, visible, depth + 1, op.result_types)
        return op.results

    locals()["if"] = if_

    def team(self, visible, depth):
        op, body = self.b.team(self.draw(st.sampled_from(["warp", "cta"])), self.for_types())
        self.block(body, visible, depth + 1, op.result_types)
        return op.results


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_builder_ir_round_trips(data):
    k = KernelIR.new("rand", ["n", "x"], [i32, BufferType(f32, (None,), MemScope.GLOBAL, strides=(1,))],
                     {"num_warps": data.draw(st.sampled_from([1, 4, 8]))}, SourceLocation(FILE, 1, 0))
    RandomIR(data.draw).block(k.body, list(k.params), 0, None)
    verify(k)
    text = str(k)
    parsed = parse_kernel(text)
    verify(parsed)
    assert str(parsed) == text


def test_layout_and_exec_scope_attributes_round_trip():
    tile = TileLayout.parse("(128,64):(64,1)")
    swizzled = ComposeLayout(0, 3, 3, tile)
    exec_scope = ExecScope.parse("warpgroup(lane 0:32, warp 4:8, cta 0:1; num_warps=8, cluster=1)")
    k = KernelIR.new("k", [], [], {}, SourceLocation(FILE, 1, 0))
    b = Builder(k.loc)
    with b.insert_into(k.body):
        a = b.alloc(MemScope.SHARED, f16, (128, 64), tile)
        s = b.view(a, (128, 64), swizzled)
        b.tile("copy", s, a, scope=exec_scope)
    text = str(k)
    assert ('shape = [128, 64], layout = "(128,64):(64,1)"} : '
            'buffer<shared, f16, [128, 64], layout="(128,64):(64,1)">') in text
    assert 'layout = "swizzle(0,3,3, (128,64):(64,1))"' in text
    assert f'tile.copy(%1, %0) {{scope = "{exec_scope}"}} loc(1:0)' in text
    parsed = parse_kernel(text)
    verify(parsed)
    assert str(parsed) == text
    assert parsed.body.ops[1].result.type.layout == swizzled
    assert parsed.body.ops[2].attrs["scope"] == exec_scope
