"""Launching real kernels through ``kernel[grid](...)`` on the CPU target."""
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.knobs import knobs

REPO = Path(__file__).resolve().parents[2]


@tj.kernel
def axpb(x, out, a, b, n, BLOCK: tj.constexpr = 8):
    """out = x * a + b, one element per loop step on one thread of each CTA."""
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = x[base + i] * a + b


@tj.kernel
def copy_rows(x, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    tile = tj.fragment((BM, BN), x.dtype)
    tj.copy(tile, x[r:r + BM, 0:BN])
    tj.copy(out[r:r + BM, 0:BN], tile)


@tj.kernel
def nothing():
    pass


def binaries(kernel) -> int:
    """Binaries this kernel has obtained: compiled here or loaded from the disk cache."""
    info = kernel.cache_info()
    return info.compiles + info.disk_hits


def test_torch_tensors_and_scalars():
    x = torch.arange(20, dtype=torch.float32)
    out = torch.zeros(20)
    axpb[(3,)](x, out, 2.0, 1.0, 20)
    torch.testing.assert_close(out, x * 2 + 1)


def test_numpy_arrays_and_an_int_grid():
    x = np.arange(20, dtype=np.float32)
    out = np.zeros(20, np.float32)
    axpb[3](x, out, 2.0, 1.0, 20, BLOCK=8)
    np.testing.assert_allclose(out, x * 2 + 1)


def test_numpy_scalars_pass_as_scalars():
    x, out = torch.arange(8.0), torch.zeros(8)
    axpb[(1,)](x, out, np.float32(2.0), np.float64(1.0), np.int64(8))
    torch.testing.assert_close(out, x * 2 + 1)


def test_callable_grid_gets_named_arguments_and_options():
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (tj.cdiv(meta["n"], meta["BLOCK"]),)

    x, out = torch.arange(20.0), torch.zeros(20)
    axpb[grid](x, out, 1.0, 0.5, n=20, BLOCK=4, num_warps=2)
    torch.testing.assert_close(out, x + 0.5)
    assert seen["x"] is x and seen["n"] == 20 and seen["BLOCK"] == 4
    assert seen["num_warps"] == 2 and seen["a"] == 1.0


def test_launch_options_are_accepted():
    x, out = torch.arange(10.0), torch.zeros(10)
    axpb[(2,)](x, out, 1.0, 1.0, 10, num_warps=8, cluster=(1, 1, 1), stream=None, target="cpu")
    torch.testing.assert_close(out, x + 1)
    axpb[(2,)](x, out, 1.0, 2.0, 10, stream=object())   # the CPU target runs synchronously
    torch.testing.assert_close(out, x + 2)


def test_a_kernel_without_parameters():
    nothing[(1,)]()
    nothing[(2, 2)]()
    assert nothing.cache_info().size == 1


def test_second_launch_is_a_memory_hit():
    axpb.clear_memory_cache()
    x, out = torch.arange(16.0), torch.zeros(16)
    axpb[(2,)](x, out, 1.0, 0.0, 16)
    before = axpb.cache_info()
    for _ in range(3):
        axpb[(2,)](x, out, 3.0, 0.0, 16)
    after = axpb.cache_info()
    assert after.memory_hits - before.memory_hits == 3
    assert (after.compiles, after.disk_hits) == (before.compiles, before.disk_hits)
    torch.testing.assert_close(out, x * 3)


def test_the_launcher_is_generated_once_even_through_an_early_grid_binding(monkeypatch):
    from tilejit.runtime import jit
    generated = []
    real = jit.generate_launcher
    monkeypatch.setattr(jit, "generate_launcher", lambda k: generated.append(k) or real(k))
    fresh = tj.kernel(axpb.fn)
    launch = fresh[(2,)]                  # bound before the first launch
    x, out = torch.arange(16.0), torch.zeros(16)
    for a in (1.0, 2.0, 3.0):
        launch(x, out, a, 0.0, 16)
        fresh[(2,)](x, out, a, 1.0, 16)
    assert generated == [fresh]
    torch.testing.assert_close(out, x * 3 + 1)


def test_constexpr_value_for_an_ordinary_parameter_is_compiled_in():
    x, out = torch.arange(16.0), torch.zeros(16)
    axpb[(2,)](x, out, 2.0, 0.0, tj.constexpr(16))
    torch.testing.assert_close(out, x * 2)
    compiled = axpb.compile(x, out, 2.0, 0.0, tj.constexpr(16))
    assert compiled.runtime_params == ("x", "out", "a", "b")


def test_non_contiguous_relaunch_recompiles_and_reads_the_right_data():
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 4), np.float32)
    copy_rows[(4,)](np.ascontiguousarray(a[:, :4]), out, BM=1, BN=4)
    before = binaries(copy_rows)
    copy_rows[(4,)](a[:, ::2], out, BM=1, BN=4)   # innermost stride 2: not the compiled 1
    assert binaries(copy_rows) == before + 1
    np.testing.assert_array_equal(out, a[:, ::2])
    t = torch.arange(32.0).reshape(4, 8)
    tout = torch.zeros(4, 4)
    copy_rows[(4,)](t.t()[:4, :4], tout, BM=1, BN=4)   # a transposed view
    torch.testing.assert_close(tout, t.t()[:4, :4])


def test_misaligned_view_recompiles_unless_not_specialized():
    x, out = torch.arange(17.0), torch.zeros(16)
    axpb[(2,)](x[:16], out, 1.0, 0.0, 16)
    before = binaries(axpb)
    axpb[(2,)](x[1:], out, 1.0, 0.0, 16)   # 4 bytes past a 16-byte boundary
    assert binaries(axpb) == before + 1
    torch.testing.assert_close(out, x[1:])

    loose = tj.kernel(axpb.fn, do_not_specialize=("x",))
    loose[(2,)](x[:16], out, 1.0, 0.0, 16)
    loose[(2,)](x[1:], out, 1.0, 0.0, 16)
    assert binaries(loose) == 1
    torch.testing.assert_close(out, x[1:])


def test_compile_with_tensor_specs_then_launch_reuses_the_binary():
    axpb.clear_memory_cache()
    spec = tj.TensorSpec((32,), tj.float32)
    compiled = axpb.compile(spec, spec, 1.0, 1.0, 32)
    assert {"ir", "lowered", "llir"} <= set(compiled.asm)
    assert "ret" in compiled.asm["asm"]   # host assembly, made on first access
    assert compiled.runtime_params == ("x", "out", "a", "b", "n")
    before = binaries(axpb)
    x = torch.arange(32.0)
    out = torch.zeros(32)
    axpb[(4,)](x, out, 1.0, 1.0, 32)
    assert binaries(axpb) == before
    torch.testing.assert_close(out, x + 1)


def test_launches_from_several_threads_keep_their_arguments_and_errors():
    x = torch.arange(64.0)
    checked = tj.kernel(axpb.fn, debug=True)
    axpb[(8,)](x, torch.zeros(64), 1.0, 0.0, 64)
    checked[(8,)](x, torch.zeros(64), 1.0, 0.0, 64)

    def work(i: int):
        out = torch.zeros(64)
        for _ in range(200):
            if i % 2:   # every CTA past the 4th reads and writes beyond 32 elements
                with pytest.raises(tj.LaunchError, match="out-of-bounds"):
                    checked[(8,)](x[:32], out[:32], float(i), 1.0, 64)
            else:
                axpb[(8,)](x, out, float(i), 1.0, 64)
        return out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for i, out in enumerate(results):
        expected = x * i + 1 if i % 2 == 0 else torch.cat([x[:32] * i + 1, torch.zeros(32)])
        torch.testing.assert_close(out, expected)


def test_compiled_kernel_launches_directly():
    x, out = torch.arange(8.0), torch.zeros(8)
    compiled = axpb.compile(x, out, 1.0, 0.0, 8)
    compiled[(1, 1, 1)](x, out, 5.0, 0.0, 8)
    torch.testing.assert_close(out, x * 5)


def test_dump_prints_stages_on_compile_and_on_disk_load(capsys):
    x, out = torch.arange(8.0), torch.zeros(8)
    with knobs.scoped(dump=frozenset({"ir", "llir", "dispatch"})):
        with knobs.scoped(always_compile=True):
            axpb[(1,)](x, out, 7.0, 0.0, 8)
        err = capsys.readouterr().err
        assert "----- ir of axpb" in err and "----- llir of axpb" in err
        assert "----- dispatch of axpb" in err
        reloaded = tj.kernel(axpb.fn)   # a fresh kernel object finds the binary on disk
        reloaded[(1,)](x, out, 7.0, 0.0, 8)
        assert reloaded.cache_info().disk_hits == 1
        assert "----- llir of axpb" in capsys.readouterr().err
        reloaded[(1,)](x, out, 7.0, 0.0, 8)
        assert capsys.readouterr().err == ""


def test_target_from_environment(monkeypatch):
    x, out = torch.arange(8.0), torch.zeros(8)
    monkeypatch.setenv("TILEJIT_TARGET", "cpu")
    axpb[(1,)](x, out, 1.0, 3.0, 8)
    torch.testing.assert_close(out, x + 3)
    monkeypatch.setenv("TILEJIT_TARGET", "nowhere")
    with pytest.raises(tj.LaunchError, match="unknown target 'nowhere'"):
        axpb[(1,)](x, out, 1.0, 3.0, 8)


def test_run_follows_the_kernel_protocol():
    x, out = torch.arange(8.0), torch.zeros(8)
    axpb.run((1,), (x, out, 2.0), {"b": 1.0, "n": 8})
    torch.testing.assert_close(out, x * 2 + 1)
    assert axpb.arg_names == ["x", "out", "a", "b", "n", "BLOCK"]


def test_importing_tilejit_does_not_load_llvm():
    code = "import sys, tilejit; print('llvmlite' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
