"""Values a kernel reads from outside (globals, closures, module attributes) are compiled
in: only immutable ones are accepted, so that a launch never reuses a binary built with
contents that have since changed in place."""
import types

import numpy as np
import pytest

from tilejit.frontend import compile_to_ir_with_deps
from tilejit.frontend import language as tj

from .helpers import T, f32, kernel_from_source, raises

SIZES = (4.0, 2.0)
NAME = "tile"
FLAG = True
NOTHING = None
DTYPE = tj.float16
WRAPPED = tj.constexpr((1, 2))
NESTED = ((1, 2.5), ("a", None, tj.int8))

MUTABLE = {
    "list": [4.0],
    "dict": {"a": 4.0},
    "set": {4.0},
    "numpy array": np.array([4.0]),
    "object": types.SimpleNamespace(a=4.0),
    "constexpr list": tj.constexpr([4.0]),
    "tuple holding a list": (1.0, [4.0]),
}


def test_immutable_values_are_compiled_in_and_recorded():
    def kernel(out):
        out[0] = SIZES[1] + WRAPPED[1] + NESTED[0][1] + len(NAME)
        if FLAG and NOTHING is None:
            y = tj.fragment((4,), DTYPE)
    _, deps = compile_to_ir_with_deps(kernel, {"out": T(f32, 1)})
    assert deps.globals == {"SIZES": SIZES, "WRAPPED": (1, 2), "NESTED": NESTED, "NAME": NAME,
                            "FLAG": True, "NOTHING": None, "DTYPE": tj.float16}


@pytest.mark.parametrize("kind", MUTABLE)
def test_a_mutable_global_is_a_located_error(tmp_path, kind):
    fn = kernel_from_source(tmp_path, "def kernel(out):\n    out[0] = 1.0 + VALUE[0]\n")
    fn.__globals__["VALUE"] = MUTABLE[kind]
    err = raises(fn, r"'VALUE' is a \w+.* defined outside the kernel", "out[0] = 1.0 + VALUE[0]",
                 {"out": T(f32, 1)})
    assert "Use a tuple" in err.message and "tj.constexpr argument" in err.message
    assert (err.line, err.col) == (4, 19)
    assert str(err).splitlines()[-2:] == ["        out[0] = 1.0 + VALUE[0]",
                                          "                       ^"]


def test_a_number_the_cache_key_cannot_take_asks_for_a_python_number(tmp_path):
    fn = kernel_from_source(tmp_path, "def kernel(out):\n    out[0] = EPS\n")
    fn.__globals__["EPS"] = np.float32(1e-6)
    raises(fn, r"'EPS' is a float32 .* Convert it with int\(...\) or float\(...\), or pass",
           "out[0] = EPS", {"out": T(f32, 1)})


def test_the_message_names_what_a_tuple_holds(tmp_path):
    fn = kernel_from_source(tmp_path, "def kernel(out):\n    out[0] = VALUE[0]\n")
    fn.__globals__["VALUE"] = (1.0, {"a": 4.0})
    raises(fn, "'VALUE' is a tuple that holds a dict defined outside the kernel",
           "out[0] = VALUE[0]", {"out": T(f32, 1)})


def test_a_mutable_module_attribute_or_closure_value_is_refused(tmp_path):
    config = types.ModuleType("user_config")
    config.SIZES = [4.0]
    fn = kernel_from_source(tmp_path, "def kernel(out):\n    out[0] = config.SIZES[0]\n")
    fn.__globals__["config"] = config
    raises(fn, "'user_config.SIZES' is a list", "out[0] = config.SIZES[0]", {"out": T(f32, 1)})

    sizes = [4.0]

    def kernel(out):
        out[0] = sizes[0]
    raises(kernel, "'sizes' is a list", "out[0] = sizes[0]", {"out": T(f32, 1)})

