"""Native ops not covered elsewhere: while loops, float math, float atomics on global
memory (f16 through compare-and-swap), narrow scalar parameters, cluster ids and a
CTA-wide fragment shared by thread units."""
import numpy as np
import pytest
import torch
from cpu_kernels import FRAGMENT, KernelBuilder, vector

from tilejit.errors import CompilationError
from tilejit.ir.types import TeamKind, f16, f32, i32, i64


def test_while_loop_counts_collatz_steps():
    with KernelBuilder("collatz", x=vector(i32), steps=vector(i32)) as kb:
        i = kb.cast(kb.tid("cta_id"), i64)
        loop, before, after = kb.while_([kb.load(kb.p["x"], [i]), kb.c(0)])
        with kb.insert_into(before):
            value, count = before.args
            kb.condition(kb.cmp("ne", value, kb.c(1)), [value, count])
        with kb.insert_into(after):
            value, count = after.args
            odd = kb.cmp("eq", kb.op("mod", value, kb.c(2)), kb.c(1))
            next_value = kb.select(odd, kb.op("add", kb.op("mul", value, kb.c(3)), kb.c(1)),
                                   kb.op("floordiv", value, kb.c(2)))
            kb.yield_([next_value, kb.op("add", count, kb.c(1))])
        kb.store(kb.p["steps"], loop.results[1], [i])
    x = np.array([1, 6, 7, 27, 97], np.int32)
    steps = np.zeros(5, np.int32)
    kb.run(5, [x, steps])
    np.testing.assert_array_equal(steps, [0, 8, 16, 111, 118])


@pytest.mark.parametrize("name,reference", [
    ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh), ("sin", np.sin),
    ("floor", np.floor), ("rsqrt", lambda v: 1 / np.sqrt(v)), ("exp2", np.exp2)])
def test_float_math(name, reference):
    with KernelBuilder(f"math_{name}", x=vector(), out=vector()) as kb:
        with kb.loop(kb.c(0, i64), kb.buffer_dim(kb.p["x"], 0)) as (i,):
            kb.store(kb.p["out"], kb.unary(name, kb.load(kb.p["x"], [i])), [i])
    x = np.linspace(0.1, 7.3, 1001, dtype=np.float32)
    out = np.zeros_like(x)
    kb.run(1, [x, out])
    np.testing.assert_allclose(out, reference(x), rtol=2e-6)


@pytest.mark.parametrize("dtype", [f32, f16], ids=str)
def test_float_atomic_add_on_global(dtype):
    with KernelBuilder("fsum", num_warps=2, x=vector(dtype), total=vector(dtype)) as kb:
        g = kb.global_thread_id()
        kb.atomic("add", kb.p["total"], kb.load(kb.p["x"], [g]), [kb.c(0)])
    x = torch.full((9 * 64,), 0.5, dtype=dtype.torch_dtype())
    total = torch.zeros(1, dtype=dtype.torch_dtype())
    kb.run(9, [x, total])
    assert total.item() == 0.5 * 9 * 64


def test_narrow_scalar_parameter_is_rounded_once():
    with KernelBuilder("scale", out=vector(f16), s=f16) as kb:
        kb.store(kb.p["out"], kb.p["s"], [kb.c(0)])
    out = torch.zeros(1, dtype=torch.float16)
    kb.run(1, [out, 1 / 3])
    assert out.item() == torch.tensor(1 / 3).half().item()


def test_cluster_ids():
    with KernelBuilder("cluster", cluster=(2, 1, 1), out=vector(i32)) as kb:
        cta = kb.tid("cta_id")
        kb.store(kb.p["out"], kb.tid("cta_id_in_cluster"), [cta])
    out = np.zeros(6, np.int32)
    kb.run(6, [out])
    np.testing.assert_array_equal(out, [0, 1, 0, 1, 0, 1])


def test_cta_fragment_is_shared_by_thread_units():
    """A fragment at team cta is one copy per CTA: a cta-team single fills it once."""
    with KernelBuilder("cta_frag", num_warps=2, out=vector(i32)) as kb:
        frag = kb.alloc(FRAGMENT, i32, (64,))
        with kb.single(TeamKind.CTA), kb.loop(kb.c(0), kb.c(64)) as (j,):
            kb.store(frag, kb.op("mul", j, kb.op("add", kb.tid("cta_id"), kb.c(1))), [j])
        tid = kb.tid("thread_id")
        g = kb.op("add", kb.op("mul", kb.tid("cta_id"), kb.c(64)), tid)
        kb.store(kb.p["out"], kb.load(frag, [kb.op("sub", kb.c(63), tid)]), [g])
    out = np.zeros(3 * 64, np.int32)
    kb.run(3, [out])
    c, t = np.divmod(np.arange(3 * 64), 64)
    np.testing.assert_array_equal(out, (63 - t) * (c + 1))


def test_unlowered_tile_op_is_a_located_error():
    with KernelBuilder("tiles", x=vector(), out=vector()) as kb:
        kb.line(9)
        kb.tile("copy", kb.p["out"], kb.p["x"])
    with pytest.raises(CompilationError, match="tile.copy reached the CPU backend") as info:
        kb.compile()
    assert info.value.line == 9


def test_foreign_intrinsic_is_rejected():
    with KernelBuilder("ptx", out=vector()) as kb:
        kb.intrinsic("ptx", "fence.proxy.async", [])
    with pytest.raises(CompilationError, match="ptx.fence.proxy.async is not available"):
        kb.compile()
