"""Kernel-level caching: what recompiles, what is reused, and the disk round trip."""
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

import tilejit as tj
from tilejit.knobs import knobs

REPO = Path(__file__).resolve().parents[2]

SCALE = 2.0
# Read as consts.OFFSET: a module attribute. Named like tilejit, but not part of it.
consts = types.ModuleType("tilejit_user_consts")
consts.OFFSET = 0.0


@tj.func
def shift_by_one(v):
    return v + 1.0


@tj.func
def shift_by_hundred(v):
    return v + 100.0


shift = shift_by_one


@tj.kernel
def scaled(x, out, n, BLOCK: tj.constexpr = 8):
    """out = shift(x * SCALE) + consts.OFFSET"""
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = shift(x[base + i] * SCALE) + consts.OFFSET


pytestmark = pytest.mark.usefixtures("fresh_cache")


@pytest.fixture
def compiles():
    """Compiles of ``scaled`` since the test started (its counters live as long as it)."""
    start = scaled.cache_info().compiles
    return lambda: scaled.cache_info().compiles - start


def launch(x, out=None, **meta):
    out = torch.zeros(16, dtype=x.dtype) if out is None else out
    scaled[(2,)](x, out, 16, **meta)
    return out


def test_same_call_compiles_once():
    before = scaled.cache_info()
    x = torch.arange(16.0)
    for _ in range(3):
        torch.testing.assert_close(launch(x), x * 2 + 1)
    after = scaled.cache_info()
    assert (after.compiles - before.compiles, after.disk_hits - before.disk_hits,
            after.memory_hits - before.memory_hits, after.size) == (1, 0, 2, 1)


def test_changed_global_constant_recompiles(monkeypatch, compiles):
    x = torch.arange(16.0)
    launch(x)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    torch.testing.assert_close(launch(x), x * 3 + 1)
    assert compiles() == 2
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 2.0)   # back: the first binary again
    torch.testing.assert_close(launch(x), x * 2 + 1)
    assert compiles() == 2


def test_changed_module_attribute_recompiles(monkeypatch, compiles):
    x = torch.arange(16.0)
    launch(x)
    monkeypatch.setattr(consts, "OFFSET", 0.5)
    torch.testing.assert_close(launch(x), x * 2 + 1.5)
    assert compiles() == 2


def test_rebinding_a_device_function_recompiles(monkeypatch, compiles):
    x = torch.arange(16.0)
    launch(x)
    monkeypatch.setattr(sys.modules[__name__], "shift", shift_by_hundred)
    torch.testing.assert_close(launch(x), x * 2 + 100)
    assert compiles() == 2


def test_a_global_of_the_same_value_but_another_type_recompiles(monkeypatch, compiles):
    x = torch.arange(16.0)
    launch(x)
    monkeypatch.setattr(consts, "OFFSET", 0)   # int 0 == float 0.0, but compiles differently
    launch(x)
    assert compiles() == 2


@pytest.mark.parametrize("change", ["constexpr", "dtype", "num_warps", "alignment",
                                    "unit stride", "debug"])
def test_each_specialization_recompiles(change, compiles):
    x = torch.arange(33.0)
    base = {"x": x[:16], "meta": {}}
    changed = {
        "constexpr": {"x": x[:16], "meta": {"BLOCK": 16}},
        "dtype": {"x": x[:16].double(), "meta": {}},
        "num_warps": {"x": x[:16], "meta": {"num_warps": 2}},
        "alignment": {"x": x[1:17], "meta": {}},            # 4 bytes past a 16-byte boundary
        "unit stride": {"x": x[:32:2], "meta": {}},
        "debug": {"x": x[:16], "meta": {}},
    }[change]
    torch.testing.assert_close(launch(base["x"], **base["meta"]), base["x"] * 2 + 1)
    with knobs.scoped(debug=change == "debug"):
        out = launch(changed["x"], **changed["meta"])
        torch.testing.assert_close(out, changed["x"] * 2 + 1)
        assert compiles() == 2
        launch(changed["x"], **changed["meta"])
        assert compiles() == 2


def test_an_int_divisible_by_16_recompiles_unless_not_specialized(compiles):
    x, out = torch.arange(16.0), torch.zeros(16)
    scaled[(2,)](x, torch.zeros(16), 16)
    scaled[(2,)](x, out, 15)    # not a multiple of 16: another binary
    assert compiles() == 2
    assert out[15] == 0 and torch.equal(out[:15], x[:15] * 2 + 1)
    scaled[(2,)](x, out, 0)     # a multiple of 16: the first binary again
    assert compiles() == 2
    flags = sorted(c.asm["ir"].split("\n")[0].count('n = ["div16"]')
                   for c in scaled.compiled_kernels())
    assert flags == [0, 1]
    loose = tj.kernel(scaled.fn, do_not_specialize=("n",))
    loose[(2,)](x, out, 16)
    loose[(2,)](x, out, 15)
    info = loose.cache_info()   # one binary (the one made for n=15 above: the same key)
    assert info.size == 1 and info.compiles + info.disk_hits == 1


def test_constexpr_types_are_told_apart(compiles):
    x = torch.arange(16.0)
    launch(x, BLOCK=8)
    launch(x, BLOCK=tj.constexpr(8))   # the same value, wrapped: the same binary
    assert compiles() == 1
    assert scaled.compile(x, torch.zeros(16), 16, BLOCK=8) is scaled.compiled_kernels()[0]


def test_always_compile(monkeypatch, compiles):
    x = torch.arange(16.0)
    launch(x)
    monkeypatch.setenv("TILEJIT_ALWAYS_COMPILE", "1")
    launch(x)
    launch(x)
    assert compiles() == 3
    monkeypatch.delenv("TILEJIT_ALWAYS_COMPILE")
    launch(x)
    assert compiles() == 3


def test_cache_clear_forgets_memory_and_disk(compiles):
    x = torch.arange(16.0)
    launch(x)
    tj.cache.clear()
    assert scaled.cache_info().size == 0
    disk_hits = scaled.cache_info().disk_hits
    torch.testing.assert_close(launch(x), x * 2 + 1)
    assert compiles() == 2 and scaled.cache_info().disk_hits == disk_hits


def test_a_new_kernel_object_loads_from_disk():
    x = torch.arange(16.0)
    launch(x)
    again = tj.kernel(scaled.fn)
    out = torch.zeros(16)
    again[(2,)](x, out, 16)
    torch.testing.assert_close(out, x * 2 + 1)
    assert (again.cache_info().compiles, again.cache_info().disk_hits) == (0, 1)


def edit_stored_metadata(edit) -> None:
    """Apply ``edit`` to the metadata of every entry on disk, keeping the checksums valid
    (damage that only loading the entry finds)."""
    for marker_path in tj.cache.default_disk_cache().root.glob("*/*/COMPLETE"):
        metadata_path = marker_path.with_name("metadata.json")
        metadata = json.loads(metadata_path.read_text())
        edit(metadata)
        metadata_path.write_text(json.dumps(metadata))
        marker = json.loads(marker_path.read_text())
        marker["files"]["metadata.json"] = hashlib.sha256(metadata_path.read_bytes()).hexdigest()
        marker_path.write_text(json.dumps(marker))


@pytest.mark.parametrize("edit", [lambda meta: meta.pop("dispatch_log"),
                                  lambda meta: meta["backend"].update(host_cpu="other-cpu")],
                         ids=["a field missing", "built for another CPU"])
def test_an_entry_that_does_not_load_is_rebuilt(edit, compiles):
    x = torch.arange(16.0)
    launch(x)
    edit_stored_metadata(edit)
    scaled.clear_memory_cache()
    torch.testing.assert_close(launch(x), x * 2 + 1)
    assert compiles() == 2
    scaled.clear_memory_cache()
    disk_hits = scaled.cache_info().disk_hits
    launch(x)   # the rebuilt entry replaced the bad one
    assert compiles() == 2 and scaled.cache_info().disk_hits == disk_hits + 1


# -- across processes ----------------------------------------------------------------------
GEMM_SCRIPT = """
import json, sys
import numpy as np
from tilejit.examples import matmul, run_matmul
rng = np.random.default_rng(0)
a = rng.standard_normal((96, 80), dtype=np.float32)
b = rng.standard_normal((80, 72), dtype=np.float32)
c = np.zeros((96, 72), np.float32)
run_matmul(a, b, c, bm=32, bn=32, bk=32)
info = matmul.cache_info()
compiler_parts = sorted(m for m in ("tilejit.targets.cpu.codegen", "tilejit.targets.cpu.rules")
                        if m in sys.modules)
print(json.dumps({"compiles": info.compiles, "disk_hits": info.disk_hits,
                  "error": float(np.abs(c - a @ b).max()), "compiler_parts": compiler_parts}))
"""


def run_python(script: str, cache_dir: Path, cwd: Path = REPO) -> dict:
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd)])}
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    first = run_python(GEMM_SCRIPT, tmp_path / "cache")
    second = run_python(GEMM_SCRIPT, tmp_path / "cache")
    assert (first["compiles"], first["disk_hits"]) == (1, 0)
    assert (second["compiles"], second["disk_hits"]) == (0, 1)
    assert first["error"] < 1e-3 and second["error"] < 1e-3
    assert first["compiler_parts"] and second["compiler_parts"] == []   # loading imports none


KERNEL_MODULE = """
import tilejit as tj

OFFSET = {offset}

@tj.func
def bump(v):
    return v + {bump}

@tj.kernel
def kern(x, out, n):
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(n):
                out[i] = bump(x[i]) + OFFSET
"""

KERNEL_SCRIPT = """
import json, numpy as np, kernel_module
x = np.arange(4, dtype=np.float32)
out = np.zeros(4, np.float32)
kernel_module.kern[(1,)](x, out, 4)
info = kernel_module.kern.cache_info()
print(json.dumps({"compiles": info.compiles, "out": out.tolist()}))
"""


@pytest.mark.parametrize("edit", ["device function source", "global constant"])
def test_an_edited_source_file_recompiles_in_the_next_process(tmp_path, edit):
    module = tmp_path / "kernel_module.py"
    module.write_text(textwrap.dedent(KERNEL_MODULE.format(offset=0.0, bump=1.0)))
    first = run_python(KERNEL_SCRIPT, tmp_path / "cache", cwd=tmp_path)
    assert first == {"compiles": 1, "out": [1.0, 2.0, 3.0, 4.0]}
    edited = {"device function source": {"offset": 0.0, "bump": 10.0},
              "global constant": {"offset": 5.0, "bump": 1.0}}[edit]
    module.write_text(textwrap.dedent(KERNEL_MODULE.format(**edited)))
    second = run_python(KERNEL_SCRIPT, tmp_path / "cache", cwd=tmp_path)
    expected = [v + edited["bump"] + edited["offset"] for v in range(4)]
    assert second == {"compiles": 1, "out": expected}
    third = run_python(KERNEL_SCRIPT, tmp_path / "cache", cwd=tmp_path)
    assert third == {"compiles": 0, "out": expected}
