"""The target registry: backends, their capabilities, and how the runtime reads them."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilejit as tj
from tilejit.errors import CompilationError, DispatchError, LaunchError
from tilejit.passes.dispatch import PER_THREAD, TEAM_ONCE, unregister_target
from tilejit.targets import cpu
from tilejit.targets.backend import (Capabilities, Placeholder, backends, get_backend,
                                     register_backend, target_for_devices,
                                     unregister_backend)
from tilejit.targets.cpu.backend import CpuBackend

REPO = Path(__file__).resolve().parents[2]


@tj.kernel
def double(x, out, n, BLOCK: tj.constexpr = 16):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], a + a)


def test_the_shipped_targets_are_registered_in_order():
    assert [b.name for b in backends()] == ["cpu", "cuda", "nki"]
    assert [get_backend(n).device for n in ("cpu", "cuda", "nki")] == ["cpu", "cuda", None]


def test_an_unknown_target_lists_the_registered_ones():
    with pytest.raises(LaunchError, match="unknown target 'tpu'; the registered targets "
                                          "are cpu, cuda, nki"):
        get_backend("tpu")
    with pytest.raises(LaunchError, match="double: unknown target 'tpu'; .* cpu, cuda, nki"):
        double[(1,)](torch.zeros(16), torch.zeros(16), 16, target="tpu")


def test_the_default_target_follows_the_tensors_device():
    assert target_for_devices(set()) == target_for_devices({"cpu"}) == "cpu"
    assert target_for_devices({"cuda"}) == target_for_devices({"cpu", "cuda"}) == "cuda"
    assert target_for_devices({"meta"}) == "cpu"   # no target takes it: the device check says so


def test_cpu_dispatch_context_is_read_off_its_capabilities():
    caps = get_backend("cpu").capabilities
    assert caps.distribution == TEAM_ONCE and caps.element_loops
    assert caps.vector_bytes in (16, 32, 64) and caps.registers_per_thread in (16, 32)
    assert caps.shared_memory_per_cta == 2 << 30 and caps.max_threads_per_cta is None
    context = cpu.CONTEXT
    assert (context.target, context.distribution, context.vector_bytes, context.registers,
            context.element_loops) == ("cpu", TEAM_ONCE, caps.vector_bytes,
                                       caps.registers_per_thread, True)


def test_gpu_and_trainium_capabilities():
    hopper = get_backend("cuda").capabilities
    assert (hopper.distribution, hopper.registers_per_thread, hopper.max_threads_per_cta,
            hopper.shared_memory_per_cta) == (PER_THREAD, 255, 1024, 227 * 1024)
    assert hopper.tensor_core_shapes["mma"] == ((16, 8, 16), (16, 8, 32))
    wgmma = hopper.tensor_core_shapes["wgmma"]
    # k16 for f16 / bf16, k32 for fp8: N a multiple of 8 up to 256 each
    assert set(wgmma) == {(64, n, k) for k in (16, 32) for n in range(8, 257, 8)}
    assert len(wgmma) == 64
    trainium = get_backend("nki").capabilities
    assert not trainium.element_loops and trainium.partitions == 128
    assert trainium.shared_memory_per_cta == 24 << 20      # SBUF: 128 x 192 KiB
    assert trainium.accumulator_memory == 2 << 20          # PSUM: 128 x 8 banks x 2 KiB


def test_capabilities_refuse_an_unknown_distribution():
    with pytest.raises(ValueError, match="distribution must be"):
        Capabilities("per_warp", 16, 32, 0, None, True)


def test_a_placeholder_target_says_code_generation_is_not_implemented():
    class Later(Placeholder):
        name = "later-test"
        capabilities = get_backend("nki").capabilities

    backend = register_backend(Later())
    try:
        spec = tj.TensorSpec((16,), tj.float32, device="cpu")
        with pytest.raises(CompilationError, match="code generation for target 'later-test' "
                                                   "is not implemented yet"):
            double.compile(spec, spec, 16, target="later-test")
        with pytest.raises(CompilationError, match="not implemented yet"):
            backend.compile(None, False)
    finally:
        unregister_backend(backend)


def test_the_nki_target_specializes_shapes_and_launches_nothing():
    spec = tj.TensorSpec((16,), tj.float32, device="cpu")
    with pytest.raises(DispatchError, match="cannot run per-element loops"):
        double.compile(spec, spec, 16, target="nki")   # fragments: no NKI family takes them
    assert get_backend("nki").capabilities.static_shapes
    assert not get_backend("cpu").capabilities.static_shapes


# -- a target of the test's own --------------------------------------------------------------
@pytest.fixture
def test_target(fresh_cache):
    """Registers a CPU-like backend named ``cpu-test`` with the capabilities and passes
    given; unregisters it (and its dispatch context) after the test."""
    made = []

    def make(passes=(), **capabilities):
        class OwnBackend(CpuBackend):
            name = "cpu-test"

        OwnBackend.passes = tuple(passes)
        backend = OwnBackend()
        caps = CpuBackend().capabilities
        backend.capabilities = Capabilities(**{**caps.__dict__, **capabilities})
        made.append((register_backend(backend), backend.register()))
        return backend

    yield make
    for backend, context in made:
        unregister_backend(backend)
        unregister_target(context)


def test_a_registered_backend_runs_kernels_with_its_own_passes(test_target):
    seen = []

    def note(when):
        def run(kernel):   # tile primitives are left only before dispatch lowers them
            tiles = any(op.name.startswith("tile.") for op in kernel.walk())
            seen.append((when, kernel.attrs["target"], tiles))
            return kernel
        return run

    test_target(passes=[("note-target", note("after")),
                        ("note-early", note("before dispatch"), "dispatch")])
    x, out = torch.arange(32.0), torch.zeros(32)
    double[(2,)](x, out, 32, target="cpu-test")
    torch.testing.assert_close(out, 2 * x)
    assert seen == [("before dispatch", "cpu-test", True), ("after", "cpu-test", False)]
    assert double.compile(x, out, 32, target="cpu-test").asm["llir"]


def test_generic_element_rules_decline_on_a_target_without_element_loops(test_target):
    test_target(element_loops=False)
    with pytest.raises(DispatchError, match="target 'cpu-test' cannot run per-element loops"):
        double.compile(torch.zeros(16), torch.zeros(16), 16, target="cpu-test")


def test_an_unregistered_backend_is_unknown(test_target):
    backend = test_target()
    unregister_backend(backend)
    with pytest.raises(ValueError, match="is not the registered backend"):
        unregister_backend(backend)
    with pytest.raises(LaunchError, match="unknown target 'cpu-test'"):
        get_backend("cpu-test")
    register_backend(backend)   # for the fixture to unregister


# -- a process that loads from the disk cache ------------------------------------------------
KERNEL_MODULE = """
import tilejit as tj

@tj.kernel
def double(x, out, n, BLOCK: tj.constexpr = 16):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], a + a)
"""

LOAD_SCRIPT = """
import json, sys
import numpy as np
import kernel_module
x = np.arange(32, dtype=np.float32)
out = np.zeros(32, np.float32)
kernel_module.double[(2,)](x, out, 32)
imported = sorted(m for m in sys.modules if m.startswith(("tilejit.targets.cuda",
    "tilejit.targets.nki", "tilejit.targets.cpu.rules", "tilejit.targets.cpu.codegen")))
print(json.dumps({"compiles": kernel_module.double.cache_info().compiles,
                  "right": bool((out == 2 * x).all()), "imported": imported}))
"""


def test_a_fresh_process_loads_from_the_disk_cache_alone(tmp_path):
    (tmp_path / "kernel_module.py").write_text(textwrap.dedent(KERNEL_MODULE))
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["compiles"] == 1 and first["right"]
    assert "tilejit.targets.cpu.codegen" in first["imported"]
    assert second == {"compiles": 0, "right": True, "imported": []}   # no other target either
