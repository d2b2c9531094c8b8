"""Loading and launching with the CUDA driver API. Argument packing is tested everywhere;
launches need a GPU (``-m gpu``; run by scripts/gpu_check.sh on a GPU machine)."""
import ctypes
import struct
import types

import pytest

from support.fake_cuda_driver import FakeTensor, fake_driver
from support.gpu import needs_gpu, needs_nvrtc
from tilejit.errors import LaunchError
from tilejit.targets.cuda import driver as drv
from tilejit.targets.cuda.nvrtc import compile_cuda, nvrtc_unavailable_reason, nvrtc_version

gpu = pytest.mark.gpu

AXPB = r"""
extern "C" __global__ void axpb(float* out, const float* a, const float* b, float x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * x + b[i];
}
extern "C" __global__ void fill64(long long* out, long long v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v + i;
}
extern "C" __global__ void reverse_smem(float* out, const float* in, int m) {
  extern __shared__ float buf[];  // m floats: more than the 48 KiB a block gets by default
  for (int j = threadIdx.x; j < m; j += blockDim.x) buf[j] = in[blockIdx.x * m + j];
  __syncthreads();
  for (int j = threadIdx.x; j < m; j += blockDim.x) out[blockIdx.x * m + j] = buf[m - 1 - j];
}
"""


# --- argument packing: no GPU needed ---------------------------------------------------------

def test_pack_scalars_at_the_parameters_sizes():
    np = pytest.importorskip("numpy")
    p = drv.pack_args([1, 2.5, np.float64(3.0), b"\x01\x02", -1, 3_000_000_000, ctypes.c_int16(7)],
                      param_sizes=(4, 4, 8, 2, 8, 4, 2))
    assert p.raw == [struct.pack("<i", 1), struct.pack("<f", 2.5), struct.pack("<d", 3.0),
                     b"\x01\x02", struct.pack("<q", -1), struct.pack("<I", 3_000_000_000),
                     struct.pack("<h", 7)]
    # The void** really points at those bytes (what cuLaunchKernelEx reads).
    ptrs = (ctypes.c_void_p * len(p.raw)).from_address(p.address)
    for ptr, raw in zip(ptrs, p.raw):
        assert ctypes.string_at(ptr, len(raw)) == raw


def test_pack_defaults_without_sizes():
    p = drv.pack_args([5, 1.5])
    assert p.raw == [struct.pack("<i", 5), struct.pack("<f", 1.5)]  # int32, float32
    assert drv.pack_args([]).address == 0
    with pytest.raises(LaunchError, match="numpy.int64"):
        drv.pack_args([1 << 40])


def test_pack_errors():
    with pytest.raises(LaunchError, match="takes 2 arguments, got 1"):
        drv.pack_args([1], param_sizes=(4, 4))
    with pytest.raises(LaunchError, match="argument 0 is 3 bytes; the kernel's parameter is 4"):
        drv.pack_args([b"abc"], param_sizes=(4,))
    with pytest.raises(LaunchError, match="does not fit"):
        drv.pack_args([300], param_sizes=(1,))
    with pytest.raises(LaunchError, match="can't pass a dict"):
        drv.pack_args([{}])


def test_pack_rejects_cpu_tensor():
    torch = pytest.importorskip("torch")
    with pytest.raises(LaunchError, match="argument 0 is a tensor on cpu"):
        drv.pack_args([torch.zeros(4)])


def test_dims_are_checked():
    assert drv._dim3(7, "grid") == (7, 1, 1)
    assert drv._dim3((2, 3), "grid") == (2, 3, 1)
    for bad in (0, (1, 2, 3, 4), (1.5,), ()):
        with pytest.raises(LaunchError, match="grid must be"):
            drv._dim3(bad, "grid")


@pytest.mark.skipif(drv.driver_unavailable_reason() is None, reason="a CUDA driver is present")
def test_loading_without_a_driver_is_a_launch_error():
    with pytest.raises(LaunchError, match="cuda-python is not installed|CUDA driver unavailable"):
        drv.load_module(b"\x7fELF")


# --- the launch path against a fake driver: checks the calls we make, without a GPU ------------

@pytest.mark.parametrize("use_cubin", [False, True])
def test_launch_path_with_a_fake_driver(monkeypatch, use_cubin):
    sizes = (8, 8, 8, 4, 4)
    fake = fake_driver(monkeypatch, sizes)
    if use_cubin:  # then param sizes come from the CUBIN's .nv.info
        if nvrtc_unavailable_reason() is not None:
            pytest.skip(f"needs NVRTC: {nvrtc_unavailable_reason()}")
        image = compile_cuda(AXPB, "sm_90a")
    else:
        image = b"fake image"
    mod = drv.load_module(image, device=0)
    f = mod["axpb"]
    assert f.param_sizes == (sizes if use_cubin else None)
    assert f.attribute("NUM_REGS") == 12
    a, b, out = FakeTensor(0x1000), FakeTensor(0x2000), FakeTensor(0x3000)
    f(out, a, b, 1.75, 99, grid=(3, 2), block=128, shared_mem=100_000, stream=0x55)
    launch = fake.launches[-1]
    assert (launch.grid, launch.block, launch.shared, launch.stream, launch.cluster) == \
        ((3, 2, 1), (128, 1, 1), 100_000, 0x55, None)
    assert launch.params == [struct.pack("<Q", 0x3000), struct.pack("<Q", 0x1000),
                             struct.pack("<Q", 0x2000), struct.pack("<f", 1.75),
                             struct.pack("<i", 99)]
    assert fake.set_attrs == [("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 100_000)]
    f(out, a, b, 1.0, 1, grid=1, block=1, shared_mem=50_000, stream=0x55)
    assert len(fake.set_attrs) == 1  # the opt-in is remembered
    with pytest.raises(LaunchError, match="CUDA_ERROR_NOT_FOUND: named symbol not found"):
        mod.get_function("missing")
    with pytest.raises(LaunchError, match="more than 1024 threads"):
        f(out, a, b, 1.0, 1, grid=1, block=(64, 32))


def _axpb(monkeypatch, **options):
    fake = fake_driver(monkeypatch, (8, 8, 8, 4, 4), **options)
    f = drv.load_module(b"fake image", device=0)["axpb"]
    tensors = FakeTensor(0x1000), FakeTensor(0x2000), FakeTensor(0x3000)
    return fake, f, tensors


def test_a_launch_shape_is_configured_once(monkeypatch):
    """The CUlaunchConfig is built once per (grid, block, shared_mem, stream, cluster) and
    reused; dimensions given as lists are configured each time (they cannot be kept)."""
    fake, f, tensors = _axpb(monkeypatch)
    for n in (1, 2):
        f(*tensors, 1.0, n, grid=(4, 1, 1), block=(128, 1, 1), stream=0x55)
    f(*tensors, 1.0, 3, grid=(4, 1, 1), block=(128, 1, 1), stream=0x66)
    f(*tensors, 1.0, 4, grid=[4], block=[128], stream=0x55)
    first, again, other_stream, listed = fake.launches
    assert again.config is first.config and again.params[4] == struct.pack("<i", 2)
    assert other_stream.config is not first.config and other_stream.stream == 0x66
    assert listed.config is not first.config and (listed.grid, listed.stream) == ((4, 1, 1), 0x55)
    assert len(f._configs) == 2


def test_the_default_stream_is_torchs_current_one(monkeypatch):
    torch = pytest.importorskip("torch")
    fake, f, tensors = _axpb(monkeypatch)
    current = types.SimpleNamespace(cuda_stream=0x77)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: current)
    f(*tensors, 1.0, 1, grid=1, block=32)
    current.cuda_stream = 0x78      # e.g. inside ``with torch.cuda.stream(s)``
    f(*tensors, 1.0, 1, grid=1, block=32)
    f(*tensors, 1.0, 1, grid=1, block=32, stream=0x99)
    assert [launch.stream for launch in fake.launches] == [0x77, 0x78, 0x99]


def test_a_cluster_launch_sets_the_cluster_dimension_attribute(monkeypatch):
    fake, f, tensors = _axpb(monkeypatch)
    f(*tensors, 1.0, 1, grid=(4, 3), block=128, cluster=(2, 3))
    f(*tensors, 1.0, 1, grid=(4, 3), block=128, cluster=(1, 1, 1))
    assert [launch.cluster for launch in fake.launches] == [(2, 3, 1), None]
    assert fake.launches[0].grid == (4, 3, 1)   # the grid still counts CTAs, not clusters


def test_a_device_that_does_not_answer_the_cluster_query_has_none_compiled_in(monkeypatch):
    fake, f, tensors = _axpb(monkeypatch, required_cluster=None)
    assert f.compiled_cluster is None
    f(*tensors, 1.0, 1, grid=2, block=128, cluster=2)
    assert fake.launches[0].cluster == (2, 1, 1)


def test_cluster_launch_errors_name_the_argument(monkeypatch):
    fake, f, tensors = _axpb(monkeypatch)
    with pytest.raises(LaunchError, match=r"grid \(4, 3, 1\) is not a multiple of the cluster "
                                          r"\(1, 2, 1\): 3 CTAs in y do not split"):
        f(*tensors, 1.0, 1, grid=(4, 3), block=128, cluster=(1, 2))
    with pytest.raises(LaunchError, match=r"cluster=\(4, 8, 1\) has 32 CTAs, above the "
                                          r"maximum of 16 \(portable: 8; up to 16 with the "
                                          r"non-portable opt-in\)"):
        f(*tensors, 1.0, 1, grid=(4, 8), block=128, cluster=(4, 8))
    with pytest.raises(LaunchError, match="cluster must be 1 to 3 positive ints"):
        f(*tensors, 1.0, 1, grid=4, block=128, cluster=(0, 1))
    assert fake.launches == [] and f._configs == {}   # nothing launched, nothing kept


def test_a_cluster_above_8_ctas_opts_in_to_non_portable_sizes_once(monkeypatch):
    opt_in = ("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
    fake, f, tensors = _axpb(monkeypatch)
    f(*tensors, 1.0, 1, grid=(4, 2), block=128, cluster=(4, 2))   # 8: portable
    assert opt_in not in fake.set_attrs
    f(*tensors, 1.0, 1, grid=(4, 4), block=128, cluster=(4, 4))   # 16
    f(*tensors, 1.0, 1, grid=(16, 2), block=128, cluster=(16, 1))
    assert fake.set_attrs.count(opt_in) == 1
    assert [launch.cluster for launch in fake.launches] == [(4, 2, 1), (4, 4, 1), (16, 1, 1)]


def test_a_compiled_in_cluster_is_used_and_never_contradicted(monkeypatch):
    """With ``__cluster_dims__`` the kernel launches in its clusters without the attribute
    (CUDA lets no launch change them); asking for another shape is a LaunchError."""
    fake, f, tensors = _axpb(monkeypatch, required_cluster=(2, 1, 1))
    assert f.compiled_cluster == (2, 1, 1)
    f(*tensors, 1.0, 1, grid=4, block=128)
    f(*tensors, 1.0, 1, grid=4, block=128, cluster=(2, 1, 1))
    assert [launch.cluster for launch in fake.launches] == [None, None]
    with pytest.raises(LaunchError, match=r"grid \(3, 1, 1\) is not a multiple of the cluster "
                                          r"\(2, 1, 1\)"):
        f(*tensors, 1.0, 1, grid=3, block=128)
    with pytest.raises(LaunchError, match=r"axpb is compiled for clusters of \(2, 1, 1\) CTAs "
                                          r"\(__cluster_dims__\): cluster=\(4, 1, 1\) "
                                          "contradicts it"):
        f(*tensors, 1.0, 1, grid=4, block=128, cluster=4)
    required = [a for a in fake.got_attrs if "REQUIRED_CLUSTER" in a]
    assert len(required) == 3   # asked once per function


# --- on a GPU -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def module():
    prog = compile_cuda(AXPB, drv.device_arch(), name="launch_test.cu")
    return prog, drv.load_module(prog)


@gpu
@needs_gpu
@needs_nvrtc
def test_axpb_matches_torch(module):
    import torch
    _, mod = module
    n = 1_000_003  # not a multiple of the block
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(a)
    mod["axpb"](out, a, b, 1.75, n, grid=(n + 255) // 256, block=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a * 1.75 + b)


@gpu
@needs_gpu
@needs_nvrtc
def test_launch_on_a_side_stream_and_int64_param(module):
    import torch
    _, mod = module
    n = 4097
    out = torch.zeros(n, dtype=torch.int64, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # default stream = torch's current one
        mod["fill64"](out, 1 << 40, n, grid=(n + 127) // 128, block=128)
    s.synchronize()
    assert torch.equal(out, (1 << 40) + torch.arange(n, device="cuda"))


@gpu
@needs_gpu
@needs_nvrtc
def test_dynamic_shared_memory_above_48k(module):
    import torch
    _, mod = module
    m, blocks = 40_000, 3  # 160 000 bytes per block
    x = torch.randn(blocks * m, device="cuda")
    out = torch.empty_like(x)
    mod["reverse_smem"](out, x, m, grid=blocks, block=512, shared_mem=4 * m)
    torch.cuda.synchronize()
    assert torch.equal(out.view(blocks, m), x.view(blocks, m).flip(1))


@gpu
@needs_gpu
@needs_nvrtc
def test_function_attributes_match_cubin(module):
    prog, mod = module
    res = prog.resources()["axpb"]
    f = mod["axpb"]
    assert f.attribute("NUM_REGS") == res.registers
    assert f.attribute("SHARED_SIZE_BYTES") == res.shared_bytes == 0
    assert f.param_sizes == (8, 8, 8, 4, 4)
    with pytest.raises(LaunchError, match="takes 5 arguments, got 1"):
        f(1, grid=1, block=1)


@gpu
@needs_gpu
@needs_nvrtc
def test_missing_function_names_the_cuda_error(module):
    _, mod = module
    with pytest.raises(LaunchError, match="CUDA_ERROR_NOT_FOUND"):
        mod.get_function("no_such_kernel")


@gpu
@needs_gpu
@needs_nvrtc
def test_ptx_is_jit_compiled_by_the_driver():
    import torch
    if nvrtc_version() > drv.driver_version():
        pytest.skip(f"NVRTC {nvrtc_version()} emits PTX newer than driver {drv.driver_version()} reads")
    prog = compile_cuda(AXPB, drv.device_arch().replace("sm_", "compute_"))
    f = drv.load_module(prog.ptx)["axpb"]  # param sizes then come from cuFuncGetParamInfo
    n = 1000
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(a)
    f(out, a, b, -2.0, n, grid=4, block=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a * -2.0 + b)
