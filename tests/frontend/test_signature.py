"""ArgSpec, LaunchOptions, dependencies and the compile_to_ir entry point."""
import math

import pytest

from tilejit.frontend import (ArgSpec, LaunchOptions, compile_to_ir, compile_to_ir_with_deps,
                              find_dependencies)
from tilejit.frontend import language as tj
from tilejit.ir.types import MemScope, bf16, i1

from .helpers import S, T, build, f16, f32, i32, i64, ops

TILE = 32
SHAPE = (TILE, 2 * TILE)


def test_arg_specs_are_frozen_hashable_and_checked():
    spec = ArgSpec.tensor(f16, 2, aligned16=True, unit_stride=True)
    assert spec == ArgSpec("tensor", f16, 2, None, True, False, True)
    assert len({spec, ArgSpec.tensor(f16, 2, aligned16=True, unit_stride=True)}) == 1
    assert spec.specialization == ("aligned16", "unit_stride")
    with pytest.raises(AttributeError):
        spec.rank = 3
    assert [ArgSpec.of_python_scalar(v).dtype for v in (True, 3, 2**40, 1.5)] == [i1, i32, i64, f32]
    assert hash(ArgSpec.constexpr([1, 2])) == hash(ArgSpec.constexpr((1, 2)))
    for bad in (lambda: ArgSpec("pointer", f32), lambda: ArgSpec.tensor(f32, 2, shape=(4,)),
                lambda: ArgSpec.tensor(f32, 1, fast=True), lambda: ArgSpec("scalar")):
        with pytest.raises(ValueError):
            bad()


def test_launch_options():
    options = LaunchOptions(num_warps=8, cluster=(2,), target="cuda", arch="sm_90a")
    assert options.cluster == (2, 1, 1) and options.cluster_size == 2
    assert hash(options) == hash(LaunchOptions(8, (2, 1, 1), "cuda", "sm_90a"))
    for bad in ({"num_warps": 0}, {"cluster": (1, 1, 1, 1)}, {"cluster": (0,)}):
        with pytest.raises(ValueError):
            LaunchOptions(**bad)


def test_options_and_specs_become_kernel_attributes():
    def kernel(x, n, flag, scale, BLOCK: tj.constexpr, DT: tj.constexpr = tj.bfloat16):
        pass
    specs = {"x": T(f16, 3, shape=(None, 4, None), div16=True, unit_stride=True), "n": S(i64),
             "flag": S(i1), "scale": ArgSpec.constexpr(tj.constexpr(2.5))}
    k = build(kernel, specs, {"BLOCK": tj.constexpr(64)}, num_warps=8, cluster=(2, 1),
              target="cuda", arch="sm_90a")
    assert k.attrs == {"num_warps": 8, "cluster": (2, 1, 1), "target": "cuda", "arch": "sm_90a",
                       "constexprs": {"scale": 2.5, "BLOCK": 64, "DT": bf16},
                       "specialization": {"x": ("div16", "unit_stride")}, "shared_bytes": None,
                       "distribution": None, "auto_sync": True}
    x, n, flag = k.params
    assert (x.type.scope, x.type.shape, x.type.strides) == (MemScope.GLOBAL, (None, 4, None),
                                                            (None, None, 1))
    assert (n.type, flag.type) == (i64, i1)
    assert k.param_names == ("x", "n", "flag")


class FakeKernelObject:
    """What @tj.kernel returns: the runtime passes either it or its .fn."""

    def __init__(self, fn):
        self.fn = fn


def test_kernel_objects_and_verification_knob():
    from tilejit.knobs import knobs

    def kernel(x):
        x[0] = 1.0
    with knobs.scoped(verify=True):
        k = compile_to_ir(FakeKernelObject(kernel), {"x": T(f32, 1)})
    assert k.name == "kernel"


@tj.func
def leaf(v):
    return v * TILE


@tj.func
def middle(v):
    return leaf(v) + math.floor(1.5)


def test_find_dependencies_is_static_and_transitive():
    limit = 3

    def kernel(x, SHAPE=None):
        if False:
            y = middle(x[0])
        z = SHAPE          # a parameter shadows the global of the same name
        x[0] = limit + math.pi

    deps = find_dependencies(kernel)
    assert deps.functions == (middle, leaf)
    assert deps.globals == {"limit": 3, "math.pi": math.pi, "TILE": 32}
    exact_kernel, exact = compile_to_ir_with_deps(kernel, {"x": T(f32, 1)})
    assert exact.functions == () and exact.globals == {"limit": 3, "math.pi": math.pi}


def test_closure_variables_are_visible():
    block = 8
    dtype = tj.float16

    def kernel(x):
        f = tj.fragment((block,), dtype)
    k = build(kernel, {"x": T(f32, 1)})
    assert ops(k, "alloc")[0].result.type.shape == (8,)
