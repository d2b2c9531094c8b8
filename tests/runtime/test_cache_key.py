import dataclasses

import numpy as np
import pytest
import torch

from tilejit.runtime.cache_key import (
    CacheKeyError,
    CacheKeyParts,
    compiler_fingerprint,
    make_key,
    source_hash,
)

BASE = dict(
    kernel_source_hash="k0",
    called_function_hashes={"helpers.add": "h0"},
    constexprs={"BLOCK": 128},
    globals_read={"SCALE": 2.0},
    arg_specs=[("array", "float32", 1, True, True), ("int", True)],
    options={"num_warps": 4},
    target="cuda",
    arch="sm_90",
    debug=False,
    version="0.1.0",
)

# One change per ingredient; each must give a different key.
FLIPS = {
    "kernel_source_hash": "k1",
    "called_function_hashes": {"helpers.add": "h1"},
    "constexprs": {"BLOCK": 256},
    "globals_read": {"SCALE": 3.0},
    "arg_specs": [("array", "float16", 1, True, True), ("int", True)],
    "options": {"num_warps": 8},
    "target": "cpu",
    "arch": "sm_80",
    "debug": True,
    "version": "0.2.0",
    "compiler": "f" * 64,
}


def key(**changes):
    return make_key(CacheKeyParts(**{**BASE, **changes}))


def test_flips_cover_every_field():
    assert set(FLIPS) == {f.name for f in dataclasses.fields(CacheKeyParts)}


@pytest.mark.parametrize("field", sorted(FLIPS))
def test_each_ingredient_changes_the_key(field):
    assert key(**{field: FLIPS[field]}) != key()


@pytest.mark.parametrize("spec", [
    ("array", "float32", 2, True, True),     # rank
    ("array", "float32", 1, False, True),    # 16-byte alignment
    ("array", "float32", 1, True, False),    # unit innermost stride
])
def test_array_specializations_change_the_key(spec):
    assert key(arg_specs=[spec, ("int", True)]) != key()


def test_integer_divisibility_changes_the_key():
    assert key(arg_specs=[BASE["arg_specs"][0], ("int", False)]) != key()


@pytest.mark.parametrize("a,b", [(1, True), (1, 1.0), (1, "1"), (None, 0)])
def test_values_of_different_types_key_differently(a, b):
    assert key(constexprs={"X": a}) != key(constexprs={"X": b})


def test_changed_global_constant_changes_the_key():
    assert key(globals_read={"SCALE": 2.0, "EPS": 1e-6}) != key(
        globals_read={"SCALE": 2.0, "EPS": 1e-5})


def test_equal_inputs_give_equal_keys_whatever_the_order():
    a = key(constexprs={"A": 1, "B": (2, 3)}, options=[("num_warps", 4), ("cluster", [2, 1])])
    b = key(constexprs=[("B", [2, 3]), ("A", 1)], options={"cluster": (2, 1), "num_warps": 4})
    assert a == b
    assert len(a) == 64 and int(a, 16) >= 0


def test_parts_are_hashable():
    parts = CacheKeyParts(**BASE)
    assert hash(parts) == hash(CacheKeyParts(**BASE))


@pytest.mark.parametrize("bad", [object(), np.float32(1.0), {1: 2}, b"bytes"])
def test_non_json_safe_values_are_rejected(bad):
    with pytest.raises(CacheKeyError, match="constexprs"):
        CacheKeyParts(**{**BASE, "constexprs": {"X": bad}})


def test_non_finite_floats_key_apart():
    """other=-inf is a common constexpr: inf, -inf and nan each key on their own."""
    keys = {make_key(CacheKeyParts(**{**BASE, "constexprs": {"FILL": v}}))
            for v in (float("inf"), float("-inf"), float("nan"), 0.0)}
    assert len(keys) == 4
    nan = CacheKeyParts(**{**BASE, "constexprs": {"FILL": float("nan")}})
    assert make_key(nan) == make_key(CacheKeyParts(**{**BASE, "constexprs": {"FILL": float("nan")}}))


def test_non_json_safe_arg_spec_is_rejected():
    with pytest.raises(CacheKeyError, match="arg_specs"):
        CacheKeyParts(**{**BASE, "arg_specs": [torch.float32]})


def test_duplicate_names_are_rejected():
    with pytest.raises(CacheKeyError, match="duplicate"):
        CacheKeyParts(**{**BASE, "constexprs": [("A", 1), ("A", 2)]})


def test_source_hash_ignores_indentation_but_not_text():
    def outer():
        def f(x):
            return x + 1
        return f

    def f(x):
        return x + 1

    def g(x):
        return x + 2

    assert source_hash(outer()) == source_hash(f)
    assert source_hash(f) != source_hash(g)


def test_compiler_sources_are_part_of_the_key():
    parts = CacheKeyParts(**BASE)
    assert parts.compiler == compiler_fingerprint() and len(parts.compiler) == 64
    assert make_key(parts) != make_key(dataclasses.replace(parts, compiler="edited tilejit"))
