"""The ``vec`` family on the cuda target: the examples' register tiles load and store their
runs as 128-bit accesses (``ld.global.nc.v4.f32``, ``st.global.v4.f32``) with no spills;
the printer's ``tj_vec`` text for f32, f16 and bf16 runs."""
import re

import pytest
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.examples import kernels as K

ARCHS = ("sm_80", "sm_90a")


def _spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype, device="cuda")


def _accesses(ptx: str) -> dict[str, int]:
    """How many of each global load and store (``ld.global.nc.v4.f32`` ...) the PTX has."""
    found = re.findall(r"\b((?:ld|st)\.global(?:\.nc)?(?:\.v[24])?\.\w+)\b", ptx)
    return {kind: found.count(kind) for kind in set(found)}


def _check(compiled, vector: str):
    ptx = compiled.asm["ptx"]
    counts = _accesses(ptx)
    assert counts.get(f"ld.global.nc.{vector}.f32", 0) >= 1, counts
    assert counts.get(f"st.global.{vector}.f32", 0) >= 1, counts
    assert compiled.metadata["spill_bytes"] == 0 and ".local" not in ptx
    text = compiled.asm["cuda"]
    assert f"*reinterpret_cast<const tj_vec<float, {vector[1]}>*>(&x[" in text
    return counts


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cols, vector", [(64, "v2"), (256, "v4")])
def test_the_example_softmax_moves_its_rows_in_vectors(arch, cols, vector, fresh_cache):
    """4 warps over a (4, cols) tile: 2 elements per thread at 64 columns, 8 (two runs of
    4) at 256. The element path of a run stays for rows off alignment and the tensor's end."""
    compiled = K.row_softmax.compile(_spec(100, cols), _spec(100, cols), BM=4, BN=cols,
                                     target="cuda", arch=arch)
    _check(compiled, vector)
    assert [r.rule for r in compiled.dispatch_log if r.primitive == "copy"] == ["vec"]


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_the_example_layer_norm_moves_its_rows_in_vectors(arch, fresh_cache):
    compiled = K.layer_norm.compile(_spec(64, 256), _spec(256), _spec(256), _spec(64, 256),
                                    1e-5, N=256, BM=4, BLOCK=256, target="cuda", arch=arch)
    _check(compiled, "v4")


@needs_nvrtc
def test_the_example_vector_add_has_no_register_tile_to_vectorize(fresh_cache):
    """Its add reads and writes tensors, split cyclically over the threads: no thread holds
    runs, so the ``vec`` family is not tried (its own vectors are a later step)."""
    compiled = K.vector_add.compile(_spec(1000), _spec(1000), _spec(1000), BLOCK=256,
                                    target="cuda", arch="sm_80")
    assert [r.rule for r in compiled.dispatch_log] == ["vector"]
    assert not any(".v" in kind for kind in _accesses(compiled.asm["ptx"]))


@tj.kernel
def _copy_rows(x, out, BN: tj.constexpr):
    r = tj.cta_id(0)
    t = tj.fragment((1, BN), x.dtype)
    tj.copy(t, x[r:r + 1, 0:BN])
    tj.copy(out[r:r + 1, 0:BN], t)


@needs_nvrtc
@pytest.mark.parametrize("dtype, ctype, count", [
    (tj.float16, "__half", 8), (tj.bfloat16, "__nv_bfloat16", 8), (tj.float32, "float", 4)])
def test_narrow_floats_move_16_bytes_per_run(dtype, ctype, count, fresh_cache):
    compiled = _copy_rows.compile(_spec(8, 512, dtype=dtype), _spec(8, 512, dtype=dtype),
                                  BN=512, num_warps=2, target="cuda", arch="sm_80")
    assert f"tj_vec<{ctype}, {count}>" in compiled.asm["cuda"]
    counts = _accesses(compiled.asm["ptx"])
    assert any(kind.startswith("ld.global") and ".v4." in kind for kind in counts), counts
    assert any(kind.startswith("st.global") and ".v4." in kind for kind in counts), counts
    assert compiled.metadata["spill_bytes"] == 0
