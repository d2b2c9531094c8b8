"""TMA on the cuda target: the PTX of a load -> compute -> store kernel holds
``cp.async.bulk.tensor`` (loads completing on an mbarrier, stores in bulk groups),
``mbarrier.try_wait``, the bulk waits and ``fence.proxy.async``; tensor maps travel as
``const __grid_constant__`` parameters the metadata lists; sm_80 is refused at the line;
the SASS holds UTMALDG / UTMASTG where ``nvdisasm`` is installed. The tensor-map record
is checked field by field against cuTensorMapEncodeTiled's requirements; a launch encodes
each map once per (address, shape, strides) and a hit is cheap; encoding runs where the
driver loads (on a GPU)."""
import dataclasses
import re
import sys
import timeit
from pathlib import Path

import pytest
from support.gpu import needs_gpu, needs_nvdisasm, needs_nvrtc, sass

import tilejit as tj
from tilejit.errors import LaunchError
from tilejit.ir.types import f16, i8
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.targets.cuda import tensor_map
from tilejit.targets.cuda.driver import driver_unavailable_reason
from tilejit.targets.cuda.nvrtc import resource_usage
from tilejit.targets.cuda.tensor_map import TensorMap, encode

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_e2e_tma import affine  # noqa: E402


def _spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype, device="cuda")


def _ptx_lines(compiled, word: str) -> list[str]:
    return [line.strip() for line in compiled.asm["ptx"].splitlines() if word in line]


def _compile(arch="sm_90a", dtype=tj.float16, swizzle=SwizzleMode.B128, bn=128):
    x = _spec(40, 256, dtype=dtype)
    layout = smem_layout((8, bn), dtype, swizzle)
    return affine.compile(x, x, BM=8, BN=bn, LAYOUT=layout, target="cuda", arch=arch)


@needs_nvrtc
def test_tma_ptx_holds_bulk_tensor_copies_and_barrier_waits(fresh_cache):
    compiled = _compile()
    loads = _ptx_lines(compiled, "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                                 "complete_tx::bytes")
    stores = _ptx_lines(compiled, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
    assert len(loads) == 2 and len(stores) == 2      # two 64-element slabs each way
    assert _ptx_lines(compiled, "mbarrier.try_wait")
    assert _ptx_lines(compiled, "cp.async.bulk.commit_group")
    assert _ptx_lines(compiled, "cp.async.bulk.wait_group 0")
    assert _ptx_lines(compiled, "fence.proxy.async.shared::cta")
    assert compiled.metadata["spill_bytes"] == 0
    maps = compiled.metadata["tensor_maps"]
    assert maps == [{"param": "x", "box": [8, 64], "swizzle": 128, "dtype": "f16"},
                    {"param": "out", "box": [8, 64], "swizzle": 128, "dtype": "f16"}]
    source = compiled.asm["cuda"]
    assert "struct __align__(64) tj_tensor_map { unsigned long long opaque[16]; };" in source
    assert "const __grid_constant__ tj_tensor_map map_x" in source
    assert "const __grid_constant__ tj_tensor_map map_out" in source
    # the launch packs each map as 128 bytes after the tensors' records, as the CUBIN takes them
    assert compiled.metadata["param_formats"][-2:] == ["128s", "128s"]
    assert compiled.module._param_struct.sizes == \
        resource_usage(compiled.asm["cubin"])["affine"].param_sizes


@needs_nvrtc
def test_unswizzled_f32_boxes_and_ptx_coordinates_innermost_first(fresh_cache):
    x = _spec(45, 72)
    compiled = affine.compile(x, x, BM=16, BN=32, target="cuda", arch="sm_90a")
    assert compiled.metadata["tensor_maps"][0] == {"param": "x", "box": [16, 32],
                                                  "swizzle": 0, "dtype": "f32"}
    source = compiled.asm["cuda"]
    (load,) = [line for line in source.splitlines() if "bulk.tensor" in line
               and "mbarrier" in line]
    # the column (innermost) coordinate is %2, the row %3
    widened = dict(re.findall(r"const long long (\w+) = \(long long\)(\w+);", source))
    coords = [widened[name] for name in re.findall(r'"r"\(\(int\)(\w+)\)', load)]
    assert "[%1, {%2, %3}]" in load and coords == ["c", "r"]


@needs_nvrtc
def test_a_ring_slot_and_a_1d_tensor_compile_to_bulk_copies(fresh_cache):
    from test_e2e_async import ring_copy
    from test_e2e_tma import ring
    x = _spec(70, 64, dtype=tj.float16)
    layout = smem_layout((3, 8, 64), tj.float16, SwizzleMode.B128)
    slots = ring.compile(x, x, STAGES=3, BM=8, BN=64, LAYOUT=layout, num_warps=2,
                         target="cuda", arch="sm_90a")
    assert len(_ptx_lines(slots, "cp.async.bulk.tensor.2d.shared::cluster")) == 1
    assert slots.metadata["tensor_maps"] == [{"param": "x", "box": [8, 64], "swizzle": 128,
                                              "dtype": "f16"}]
    v = _spec(1000)
    flat = ring_copy.compile(v, v, STAGES=3, CHUNK=96, FAMILY="tma", num_warps=2,
                             target="cuda", arch="sm_90a")
    assert len(_ptx_lines(flat, "cp.async.bulk.tensor.1d.shared::cluster")) == 1
    assert flat.metadata["tensor_maps"][0]["box"] == [96]


@needs_nvrtc
def test_tma_needs_sm90_and_says_so_at_the_line(fresh_cache):
    from test_e2e_async import tma_store
    x = _spec(50, 24, dtype=tj.float64)
    with pytest.raises(tj.CompilationError, match=r"fence_proxy_async \(the async proxy\) needs "
                       r"sm_90 or later; compiling for sm_80") as info:
        tma_store.compile(x, x, BM=16, BN=24, FAMILY="tma", target="cuda", arch="sm_80")
    assert info.value.line is not None and "fence_proxy_async()" in str(info.value)


@needs_nvrtc
@needs_nvdisasm
def test_tma_sass_holds_utmaldg_and_utmastg(fresh_cache, tmp_path):
    text = sass(_compile().asm["cubin"], tmp_path)
    assert "UTMALDG" in text and "UTMASTG" in text


# ------------------------------------------------------------------------- tensor maps
GOOD = TensorMap(f16, 0x7f0000001000, (40, 256), (256, 1), (8, 64), 128)


def test_a_legal_record_has_no_problems_and_driver_order_arguments():
    assert GOOD.problems() == []
    kind, rank, address, dims, strides, box, steps, *enums = GOOD.driver_arguments()
    assert (kind, rank, address) == (6, 2, 0x7f0000001000)       # FLOAT16
    assert (dims, strides, box, steps) == ([256, 40], [512], [64, 8], [1, 1])
    assert enums == [0, 3, 0, 0]       # no interleave, 128-byte swizzle, no L2 promotion, zeros


@pytest.mark.parametrize("change, problem", [
    ({"address": 0x7f0000001008}, r"globalAddress: 0x7f0000001008 is not 16-byte aligned"),
    ({"dims": (40, 0)}, r"globalDim: each in \[1, 2\^32\]"),
    ({"strides": (70, 1), "dims": (40, 70)}, r"globalStrides: multiples of 16 bytes below "
                                             r"2\^40, got \[140\]"),
    ({"strides": (128, 1)}, r"dim 0's 256 bytes are fewer than the 512 bytes of the dims"),
    ({"strides": (256, 2)}, r"the innermost dim is contiguous \(stride 1\), not 2"),
    ({"box": (8, 300), "swizzle": 0}, r"boxDim: each in \[1, 256\]"),
    ({"box": (8, 4), "swizzle": 0}, r"the inner dim's 8 bytes are not a multiple of 16"),
    ({"box": (8, 128)}, r"the inner box dim's 256 bytes exceed the 128-byte span"),
    ({"swizzle": 48}, r"swizzle: 0, 32, 64 or 128 bytes, not 48"),
    ({"element_strides": (1, 9)}, r"elementStrides: each in \[1, 8\]"),
    ({"interleave": "32B", "swizzle": 0}, r"tensorRank: 3 to 5 \(interleave 32B\)"),
    ({"l2_promotion": 32}, r"l2Promotion: 0, 64, 128 or 256 bytes, not 32"),
    ({"oob_fill": "nan", "dtype": i8, "box": (8, 64), "swizzle": 64},
     r"NaN fill needs floating-point elements, not i8"),
    ({"dims": (1, 2, 3, 4, 5, 6), "strides": (1,) * 6, "box": (1,) * 6},
     r"tensorRank: 1 to 5 \(interleave none\), not 6"),
], ids=["address", "dim", "stride16", "stride-span", "inner", "box256", "inner16", "span",
        "swizzle", "element-strides", "interleave-rank", "l2", "nan-int", "rank"])
def test_each_requirement_of_the_encoding_is_checked(change, problem):
    record = dataclasses.replace(GOOD, **change)
    assert any(re.search(problem, p) for p in record.problems()), \
        record.problems()
    with pytest.raises(LaunchError, match="no tensor map describes this tensor"):
        encode(record)


def _module(monkeypatch, encoded: list):
    """A kernel module of two tensor maps whose encoding records each record it encodes
    (no driver here: the cache around it is what is checked)."""
    from tilejit.targets.cuda.module import CudaKernelModule

    def fake_encode(record):
        encoded.append(record)
        return bytes([len(encoded)]) * 128
    monkeypatch.setattr(tensor_map, "encode", fake_encode)
    specs = ({"param": "x", "box": [8, 64], "swizzle": 128, "dtype": "f16"},
             {"param": "out", "box": [8, 64], "swizzle": 128, "dtype": "f16"})
    return CudaKernelModule(b"", "k", 128, 0, "sm_90a", ("x", "n", "out"), tensor_maps=specs)


def test_a_launch_encodes_each_map_once_per_address_shape_and_strides(monkeypatch):
    encoded = []
    module = _module(monkeypatch, encoded)
    x, out = (GOOD.address, 40, 256, 256, 1), (GOOD.address + 65536, 40, 256, 256, 1)
    first = module.encoded_maps([x, 7, out])
    assert encoded == [GOOD, dataclasses.replace(GOOD, address=GOOD.address + 65536)]
    assert module.encoded_maps([x, 9, out]) == first and len(encoded) == 2     # hits
    moved = (GOOD.address + 1024, 40, 256, 256, 1)
    taller = (GOOD.address, 48, 256, 256, 1)
    wider = (GOOD.address, 40, 256, 512, 1)
    for record in (moved, taller, wider):
        module.encoded_maps([record, 7, out])
    assert [r.address for r in encoded[2:]] == [moved[0], GOOD.address, GOOD.address]
    assert (encoded[3].dims, encoded[4].strides) == ((48, 256), (512, 1))


def test_a_cache_hit_launch_is_cheap(monkeypatch):
    module = _module(monkeypatch, [])
    records = [(GOOD.address, 40, 256, 256, 1), 7, (GOOD.address + 65536, 40, 256, 256, 1)]
    module.encoded_maps(records)
    per_launch = min(timeit.repeat(lambda: module.encoded_maps(records), number=2000,
                                   repeat=5)) / 2000
    assert per_launch < 20e-6     # seconds for both maps (1.7 us measured on a 2-core VM)


@pytest.mark.gpu
@pytest.mark.skipif(driver_unavailable_reason() is not None,
                    reason=f"needs the CUDA driver: {driver_unavailable_reason()}")
def test_the_driver_encodes_a_record():
    assert len(encode(GOOD)) == 128


@pytest.mark.gpu
@needs_gpu
def test_tma_kernel_on_the_gpu_matches_torch():
    import torch
    x = torch.randn(40, 256, device="cuda").half()
    out = torch.zeros_like(x)
    layout = smem_layout((8, 128), x.dtype, SwizzleMode.B128)
    affine[(5, 2)](x, out, BM=8, BN=128, LAYOUT=layout)
    torch.testing.assert_close(out, x * 2 + 1)
