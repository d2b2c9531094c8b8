"""Errors: every one is a located CompilationError quoting the user's line with a caret."""
import pytest

from tilejit.errors import CompilationError, TilejitError
from tilejit.frontend import compile_to_ir
from tilejit.frontend import language as tj
from tilejit.frontend.semantics_memory import MemorySemantics

from .helpers import S, T, f32, i32, kernel_from_source, line_of, raises

UNSUPPORTED = [
    ("f = lambda v: v", "lambda expressions"),
    ("class C:\n        pass", "class definitions"),
    ("try:\n        pass\n    except Exception:\n        pass", "try statements"),
    ("yield 1", "yield"),
    ("global g", "global declarations"),
    ("v = [i for i in range(3)]", "list comprehensions"),
    ("v = sum(i for i in range(3))", "generator expressions"),
    ("v = {1, 2}", "set literals"),
    ("del x", "del statements"),
    ("import os", "import statements"),
    ("raise ValueError()", "raise statements"),
    ("def inner():\n        pass", "nested functions"),
    ("if (v := 3):\n        pass", r"assignment expressions \(:=\)"),
    ("a, *b = (1, 2, 3)", r"starred assignment"),
    ("with open('f') as fh:\n        pass", "'with ... as name' is not supported"),
    ("with tj.warp:\n        pass", r"write 'with tj.warp\(\):'"),
    ("with tj.sync():\n        pass", "cannot open a with block"),
    ("for i in range(3):\n        pass\n    else:\n        pass", "for ... else is not supported"),
    ("x.attr = 1", "only names, tuples of names and buffer elements"),
    ("open('f')", "the Python builtin 'open' is not supported"),
]


@pytest.mark.parametrize("statement, message", UNSUPPORTED, ids=[m for _, m in UNSUPPORTED])
def test_unsupported_syntax_is_located(tmp_path, statement, message):
    fn = kernel_from_source(tmp_path, f"def kernel(x, n):\n    {statement}\n")
    raises(fn, message, statement.splitlines()[0].strip(), {"x": T(f32, 1), "n": S(i32)})


def test_message_line_column_and_caret(tmp_path):
    fn = kernel_from_source(tmp_path, "def kernel(x):\n    y = 1\n    z = y + missing\n")
    with pytest.raises(CompilationError) as info:
        compile_to_ir(fn, {"x": T(f32, 1)})
    err = info.value
    assert err.message == "name 'missing' is not defined"
    assert (err.line, err.col) == (5, 12)   # line 3 of the source, after the two header lines
    assert err.file == str(tmp_path / fn.__module__) + ".py"
    text = str(err)
    assert text.splitlines()[-2:] == ["        z = y + missing", "                ^"]
    assert f"{err.file}:5:12: CompilationError: name 'missing' is not defined" in text


RUNTIME_MISUSE = [
    ("v = n + 'a'", "expected a scalar operand, got the compile-time str 'a'"),
    ("v = x + 1", "tensors are not pointers"),
    ("v = n ** n", r"'\*\*' on a run-time integer needs a compile-time integer exponent"),
    ("v = 1.5 << n", "'<<' needs integer operands, got tj.float32"),
    ("v = n is None", "'is' works on compile-time values only"),
    ("v = (1, 2)[n]", "can only be indexed with compile-time values"),
    ("v = len(x)", "len is called with run-time values"),
    ("v = min(n, n, n)", r"min\(\) of run-time values takes 2 positional argument"),
    ("v = f'{n}'", "f-strings can only format compile-time values"),
    ("v = 1 // 0", "cannot evaluate .* at compile time: ZeroDivisionError"),
    ("tj.static_assert(n > 0, 'positive')", "tj.static_assert.* needs a compile-time condition"),
    ("tj.static_assert(1 > 2, 'one is small')", "static assertion failed: one is small"),
    ("assert 1 > 2, 'nope'", "assertion failed: nope"),
    ("assert n > 2", "assert needs a compile-time condition"),
    ("for i in x:\n        pass", "cannot iterate over a buffer"),
    ("for i in tj.static_range(n):\n        pass",
     "tj.static_range bounds must be compile-time ints"),
    ("for i in range(0, n, 0):\n        pass", "range step must not be zero"),
    ("for i in range(0.5, n):\n        pass", "range bounds must be integers"),
    ("for i in tj.range(n, unroll=0):\n        pass",
     "unroll= must be a positive compile-time int"),
    ("tj.cta_id(n)", "the dimension must be a compile-time int"),
    ("tj.cta_id(3)", "dimension must be 0, 1 or 2"),
    ("tj.device_print(n)", "tj.device_print needs a format string first"),
    ("tj.ptx.foo(n, dtype=3)", "dtype= of an intrinsic must be a tj dtype"),
    ("tj.tfilter(warp=(1, 2), lane=0)", "tj.tfilter takes exactly one keyword"),
    ("with tj.tfilter(warp=(3, 1)):\n        pass", "keeps no thread"),
    ("v = tj.range(3)", None),
    ("v = x.nothing", "has no attribute 'nothing'"),
    ("v = tj.nothing", "tj.nothing does not exist"),
    ("v = tj.wg.sync", "tj.wg has no primitive 'sync'"),
    ("n.dtype = 3", "only names, tuples of names and buffer elements"),
    ("v, w = n", "cannot unpack a run-time i32 value"),
    ("v, w = (1, 2, 3)", "cannot unpack 3 values into 2 names"),
    ("return 3", "a kernel cannot return a value"),
    ("x[0] = x", r"buf\[i, ...\] = v stores a scalar"),
    ("v = x.dtype()", "the dtype tj.float32 is not callable"),
    ("tj.reduce(x, x, 'sum', 0)", r"reducing \(\?,\) over axis 0 gives \(\) or \(1,\), but dst has "
     r"shape \(\?,\)"),
]


@pytest.mark.parametrize("statement, message", RUNTIME_MISUSE, ids=[s for s, _ in RUNTIME_MISUSE])
def test_misuse_is_located(tmp_path, statement, message):
    fn = kernel_from_source(tmp_path, f"def kernel(x, n):\n    {statement}\n")
    specs = {"x": T(f32, 1), "n": S(i32)}
    if message is None:   # allowed: a tj.range object that is never iterated is harmless
        compile_to_ir(fn, specs)
        return
    raises(fn, message, statement.splitlines()[0].split(":")[0].strip(), specs)


def test_loop_type_conflicts(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x, n):
    v = tj.fragment((4,), tj.float32)
    for i in range(n):
        v = 1.0
    shape = (4,)
    for i in range(n):
        shape = (8,)
""")
    raises(fn, "loop-carried variable 'v' is a buffer<fragment, f32, \\[4\\]> before the loop but "
               "the compile-time float 1.0 at the end of its body", "for i in range(n):",
           {"x": T(f32, 1), "n": S(i32)})
    fixed = kernel_from_source(tmp_path, """
def kernel(n):
    shape = (4,)
    for i in range(n):
        shape = (8,)
""")
    raises(fixed, "'shape' holds the compile-time tuple \\(4,\\) and is reassigned in a "
                  "run-time loop", "for i in range(n):", {"n": S(i32)})


def test_signature_errors(tmp_path):
    fn = kernel_from_source(tmp_path, "def kernel(x, n, B: tj.constexpr):\n    pass\n")
    raises(fn, "no value for parameter 'n' of kernel kernel", "def kernel", {"x": T(f32, 1)},
           {"B": 1})
    raises(fn, "kernel kernel has no parameter\\(s\\) nope", "def kernel",
           {"x": T(f32, 1), "n": S(i32)}, {"B": 1, "nope": 2})
    raises(fn, "parameter 'B' is a tj.constexpr but was passed as a run-time scalar",
           "def kernel", {"x": T(f32, 1), "n": S(i32), "B": S(i32)})
    star = kernel_from_source(tmp_path, "def kernel(*args):\n    pass\n")
    raises(star, "\\*args and \\*\\*kwargs are not supported", "def kernel")


def test_errors_inside_device_functions_point_into_them(tmp_path):
    fn = kernel_from_source(tmp_path, """
@tj.func
def helper(v, N: tj.constexpr):
    return v + nowhere

def kernel(n):
    w = helper(n, 3)
    z = helper(n, n)
    q = helper(n)
    r = plain(n)

def plain(v):
    return v
""")
    err = raises(fn, "name 'nowhere' is not defined", None, {"n": S(i32)})
    assert err.line == line_of(fn.__globals__["helper"].fn, "return v + nowhere")


PLAIN = "\ndef plain(v):\n    return v\n"


def test_device_function_argument_errors(tmp_path):
    source = """
@tj.func
def helper(v, N: tj.constexpr):
    return v

def kernel(n):
    {call}
"""
    cases = [("helper(n, n)", "parameter 'N' of helper is a tj.constexpr, but got a run-time"),
             ("helper(n)", r"helper\(\): missing a required argument: 'N'"),
             ("plain(n)", "plain is called with run-time values")]
    for call, message in cases:
        fn = kernel_from_source(tmp_path, source.format(call=call) + PLAIN)
        raises(fn, message, call, {"n": S(i32)})


def test_builtins_outside_a_kernel():
    for call in (lambda: tj.copy(1, 2), lambda: tj.warp_id(), lambda: tj.wg.copy(1, 2),
                 lambda: tj.warp(), lambda: tj.ptx.anything(1), lambda: tj.range(3),
                 lambda: tj.func(len)):
        with pytest.raises((CompilationError, TypeError)) as info:
            call()
        if isinstance(info.value, CompilationError):
            assert "can only be used inside a @tj.kernel function" in str(info.value)
    with pytest.raises(CompilationError, match="tj.copy can only be used inside a @tj.kernel"):
        tj.copy(1, 2)

    @tj.func
    def helper(v):
        return v
    with pytest.raises(CompilationError, match="device function helper can only be called inside"):
        helper(1)
    assert tj.cdiv(7, 2) == 4


def test_internal_errors_are_wrapped_and_located(tmp_path, monkeypatch):
    fn = kernel_from_source(tmp_path, "def kernel(x):\n    a = tj.alloc_shared((4,), tj.float32)\n")

    def broken(self, *args):
        raise KeyError("oops")
    monkeypatch.setattr(MemorySemantics, "alloc", broken)
    err = raises(fn, "internal compiler error: KeyError: 'oops'", "a = tj.alloc_shared",
                 {"x": T(f32, 1)})
    assert err.col == 8


def test_unreadable_source():
    namespace = {}
    exec("def kernel(x):\n    pass\n", namespace)
    with pytest.raises(CompilationError, match="cannot read the source of kernel"):
        compile_to_ir(namespace["kernel"], {"x": T(f32, 1)})
    with pytest.raises(TilejitError, match="a kernel must be a Python function"):
        compile_to_ir(42, {})
