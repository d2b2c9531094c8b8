"""Fuzzing: random small kernels either compile to verifiable IR or raise a TilejitError.

The grammar mixes what the frontend supports with what it rejects (unsupported syntax,
unknown names, wrong types and shapes), so both paths are exercised. A kernel that
compiles must verify and print -> parse -> print identically; any exception that is not a
``TilejitError`` is a compiler bug.
"""
import pathlib
import re
import tempfile
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilejit.errors import TilejitError
from tilejit.frontend import LaunchOptions, compile_to_ir
from tilejit.ir import parse_kernel, verify
from tilejit.ir.types import f16

from .helpers import S, T, f32, i32, kernel_from_source

SPECS = {"x": T(f32, 1), "y": T(f16, 2), "n": S(i32), "v": S(f32)}
# Mostly defined names; a, b, c may be assigned before use, zz never is.
NAMES = ["x", "y", "n", "v", "B"] * 3 + ["a", "b", "c", "zz"]
PRELUDE = """
@tj.func
def helper(p, q=1):
    return p * q + 1

"""

literals = st.sampled_from(["0", "1", "2", "3", "-1", "0.5", "2.0", "True", "False", "None",
                            "'s'", "(1, 2)", "tj.float32", "tj.int8", "B"])
binops = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "@",
                          "<", "<=", "==", "!=", ">", ">=", "and", "or", "is", "in"])
unops = st.sampled_from(["-", "+", "~", "not "])
dtypes = st.sampled_from(["tj.float32", "tj.float16", "tj.int32", "x.dtype", "tj.bool"])
leaves = st.one_of(literals, st.sampled_from(NAMES))

# Expression templates: $E is a sub-expression, $O a binary operator, $U a unary one, $D a
# dtype, $L a name (f-strings cannot nest); statement templates add $N, an assignment target,
# and $C, a condition.
EXPRESSIONS = [
    "($E $O $E)", "($U $E)", "($E if $E else $E)", "($E, $E)", "($E)[$E]", "x[$E]",
    "x[$E:$E + B]", "y[$E, $E:$E + 4]", "x.shape[$E]", "x.strides[0]", "($E).dtype",
    "($E).shape", "tj.cdiv($E, $E)", "tj.exp($E)", "tj.maximum($E, $E)", "min($E, $E)",
    "abs($E)", "len($E)", "int($E)", "float($E)", "tj.cta_id($E)", "tj.warp_id()",
    "tj.lane_id()", "tj.elect_sync()", "tj.fragment((B,), $D)", "tj.fragment(($E,), tj.float32)",
    "tj.alloc_shared((4, B), $D)", "helper($E)", "helper($E, q=$E)", "tj.cast($E, $D)",
    "tj.select($E, $E, 1.0)", "tj.ptx.nop($E)", "(lambda q: q)($E)", "[i for i in $E]",
    "tj.nothing($E)", "zz($E)", 'f"{$L}"', "($E).view((B,))", "tj.alloc_barriers(2)[$E]",
]


PLACEHOLDER = re.compile(r"\$([EOUDLNC])")


def _template(template: str, slots: dict):
    """Strings of ``template`` with each placeholder replaced by a draw from its slot."""
    kinds = PLACEHOLDER.findall(template)
    return st.tuples(*(slots[k] for k in kinds)).map(
        lambda parts: PLACEHOLDER.sub(lambda m, it=iter(parts): next(it), template))


def exprs(depth=0):
    if depth >= 3:
        return leaves
    sub = st.deferred(lambda: exprs(depth + 1))
    slots = {"E": sub, "O": binops, "U": unops, "D": dtypes, "L": st.sampled_from(NAMES)}
    return st.one_of(leaves, *(_template(t, slots) for t in EXPRESSIONS))


SIMPLE_STATEMENTS = [
    "pass", "tj.sync()", "return", "$N = $E", "$N += $E", "a, b = $E, $E", "x[$E] = $E",
    "tj.copy($E, $E)", "tj.fill($E, $E)", "tj.exp($E, $E)", "tj.reduce($E, $E, 'sum', 0)",
    "tj.gemm($E, $E, $E)", "tj.static_assert($E, 'm')", "tj.device_print('p', $E)", "return $E",
    "tj.mbarrier_arrive($E)", "assert $E", "del a", "import os", "raise ValueError()",
    "tj.wg.copy($E, $E)",
]
COMPOUND_STATEMENTS = [
    "if $E:\n{body}", "if $E:\n{body}{indent}else:\n{loop_body}",
    "for i in range($E):\n{loop_body}", "for i in tj.static_range(3):\n{loop_body}",
    "for i in tj.range(0, $E, 2, pipeline=2):\n{loop_body}", "while $E:\n{loop_body}",
    "with tj.warpgroup():\n{body}", "with tj.tfilter(warp=(0, 2)):\n{body}",
    "try:\n{body}{indent}except Exception:\n{indent}    pass\n",
    "def inner():\n{indent}    pass\n", "class Inner:\n{indent}    pass\n",
]
targets = st.sampled_from(["a", "b", "c", "n", "x"])


def _simple(template: str):
    return _template(template, {"E": exprs(), "N": targets})


@st.composite
def blocks(draw, depth=0, in_loop=False, indent="    "):
    count = draw(st.integers(1, 3))
    lines = []
    for _ in range(count):
        options = SIMPLE_STATEMENTS + (["break", "continue"] if in_loop else [])
        choice = draw(st.sampled_from(options + ([] if depth >= 2 else COMPOUND_STATEMENTS)))
        if choice in COMPOUND_STATEMENTS:
            inner = indent + "    "
            body = draw(blocks(depth + 1, in_loop, inner))
            loop_body = draw(blocks(depth + 1, True, inner))
            head, _, rest = choice.partition(":\n")
            head = draw(_simple(head))
            lines.append(indent + head + ":\n" + rest.format(
                body=body, indent=indent,
                loop_body=loop_body if head.startswith(("for ", "while ")) or in_loop else body))
        else:
            lines.append(indent + draw(_simple(choice)) + "\n")
    return "".join(lines)


@st.composite
def kernels(draw):
    return PRELUDE + "def kernel(x, y, n, v, B: tj.constexpr = 16):\n" + draw(blocks())


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(source=kernels(), num_warps=st.sampled_from([4, 8]))
def test_random_kernels_compile_or_raise_a_tilejit_error(source, num_warps):
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # `2[0]` is meant to be wrong
        fn = kernel_from_source(pathlib.Path(folder), source)
        try:
            kernel = compile_to_ir(fn, SPECS, {}, LaunchOptions(num_warps=num_warps))
        except TilejitError as err:
            assert err.message and (err.loc is None or err.line >= 1), source
            assert "internal compiler error" not in err.message, f"{err}\n--- source ---\n{source}"
            return
        verify(kernel)
        text = str(kernel)
        assert str(parse_kernel(text)) == text


# Well-formed scalar programs: every one must compile. They stress the SSA construction
# (if merges, loop-carried values that change type, break/continue flags, team yields).
scalar_leaves = ["a", "b", "c", "n", "v", "B", "1", "2", "0.5", "True"]


def scalar_exprs(names, depth=0):
    leaves = st.sampled_from(scalar_leaves + names)
    if depth >= 2:
        return leaves
    sub = st.deferred(lambda: scalar_exprs(names, depth + 1))
    cond = st.deferred(lambda: conditions(names, depth + 1))
    slots = {"E": sub, "C": cond}
    templates = ["($E + $E)", "($E - $E)", "($E * $E)", "max($E, $E)", "abs($E)",
                 "($E if $C else $E)", "tj.cdiv(n, 4)", "x[0]"]
    return st.one_of(leaves, *(_template(t, slots) for t in templates))


def conditions(names, depth=0):
    sub = scalar_exprs(names, depth + 1)
    slots = {"E": sub, "C": st.deferred(lambda: conditions(names, depth + 1))}
    templates = ["($E < $E)", "($E == $E)", "(not $E)", "tj.warp_id() == 0", "tj.elect_sync()"]
    if depth < 2:
        templates += ["($C and $C)", "($C or $C)"]
    return st.one_of(*(_template(t, slots) for t in templates))


@st.composite
def scalar_blocks(draw, names=(), depth=0, in_loop=False, indent="    "):
    names = list(names)
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        expr, cond = scalar_exprs(names), conditions(names)
        simple = ["a = $E", "b += $E", "c = $E", "x[0] = $E", "pass"]
        if in_loop:
            simple += ["break", "continue", "if $C:\n{inner}break", "if $C:\n{inner}continue"]
        compound = ["if $C:\n{body}", "if $C:\n{body}{indent}else:\n{body2}",
                    "for i{d} in range(n):\n{loop}", "for i{d} in tj.static_range(2):\n{loop}",
                    "while $C:\n{loop}", "with tj.warpgroup():\n{body}",
                    "with tj.tfilter(warp=(0, 2)):\n{body}"]
        choice = draw(st.sampled_from(simple + (compound if depth < 2 else [])))
        inner = indent + "    "
        loop_var = [f"i{depth}"] if "for i" in choice else []
        def nested(slot, *args):
            return draw(scalar_blocks(*args)) if slot in choice else ""
        text = choice.format(
            inner=inner, indent=indent, d=depth,
            body=nested("{body", names, depth + 1, in_loop, inner),
            body2=nested("{body2}", names, depth + 1, in_loop, inner),
            loop=nested("{loop}", names + loop_var, depth + 1, True, inner))
        lines.append(indent + draw(_template(text, {"E": expr, "C": cond})) + "\n")
    return "".join(lines).replace("\n\n", "\n")


SCALAR_HEADER = "def kernel(x, n, v, B: tj.constexpr = 16):\n    a = 0\n    b = 1.0\n    c = n\n"


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(body=scalar_blocks(), num_warps=st.sampled_from([4, 8]))
def test_well_formed_scalar_programs_always_compile(body, num_warps):
    source = SCALAR_HEADER + body
    with tempfile.TemporaryDirectory() as folder:
        fn = kernel_from_source(pathlib.Path(folder), source)
        try:
            kernel = compile_to_ir(fn, {"x": T(f32, 1), "n": S(i32), "v": S(f32)}, {},
                                   LaunchOptions(num_warps=num_warps))
        except TilejitError as err:
            raise AssertionError(f"{err}\n--- source ---\n{source}") from None
        verify(kernel)
        text = str(kernel)
        assert str(parse_kernel(text)) == text
