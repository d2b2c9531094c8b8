"""A compiled CUDA kernel's launches (tilejit/targets/cuda/module.py): the records
flattened into parameters, CUDA's grid limits, and the device a launch runs on -- the one
its tensors sit on, not torch's current one. Without a GPU, against stand-ins for the
driver's loaded function and for tensors (objects with ``device`` and ``is_cuda``); on a
GPU (``-m gpu``, run by scripts/gpu_check.sh) with torch tensors."""
from types import SimpleNamespace

import pytest
import torch

import tilejit as tj
from support.gpu import needs_gpu, needs_nvrtc, needs_two_gpus
from tilejit.errors import LaunchError
from tilejit.targets.backend import get_backend
from tilejit.targets.cuda import driver
from tilejit.targets.cuda.module import launch_device


def fake_tensor(device: str, address: int = 4096, size: int = 10):
    """What a launch reads of a torch tensor: its device, data pointer, shape and strides."""
    return SimpleNamespace(device=torch.device(device), is_cuda=device.startswith("cuda"),
                           data_ptr=lambda: address, shape=(size,), stride=lambda: (1,))


class FakeFunction:
    """The driver's loaded kernel: records its launches and the dynamic shared opt-in."""

    param_sizes = None   # not read from a CUBIN

    def __init__(self, calls: list):
        self.calls, self.max_shared = calls, None

    def set_max_dynamic_shared(self, nbytes):
        self.max_shared = nbytes

    def allow_cluster(self, cluster):
        self.cluster = cluster

    def __call__(self, *args, grid, block, shared_mem, stream, cluster):
        self.calls.append((args, grid, block, shared_mem, stream, cluster))

    def launch_struct(self, params, values, **launch):
        params.pack(values)   # the values fit the kernel's parameters
        self(*values, **launch)


@pytest.fixture
def fake_driver(monkeypatch):
    """``driver.load_module`` replaced: the devices modules were loaded on, the launches."""
    loaded, calls = [], []

    def load_module(image, device):
        loaded.append(device)
        return SimpleNamespace(get_function=lambda name: FakeFunction(calls))

    monkeypatch.setattr(driver, "load_module", load_module)
    return SimpleNamespace(loaded=loaded, calls=calls)


def load(shared_bytes=0, params=("x", "n"), **meta):
    return get_backend("cuda").load({"cubin": b"\x7fELF"}, {
        "entry": "k", "threads": 256, "shared_bytes": shared_bytes, "cuda_arch": "sm_90a",
        "runtime_params": list(params), **meta})


# --------------------------------------------------------------------------- records, grid
def test_launch_flattens_records_without_a_gpu(fake_driver):
    m = load(shared_bytes=64 * 1024, params=("x", "n", "alpha"))
    launch, launch_on_stream = get_backend("cuda").launchers(m)
    launch((3, 1, 1), [(4096, 10, 20, 20, 1), 7, 2.5])
    launch_on_stream((1, 1, 1), [(8192, 5, 1)], "stream")
    assert fake_driver.calls == [
        ((4096, 10, 20, 20, 1, 7, 2.5), (3, 1, 1), (256, 1, 1), 65536, None, (1, 1, 1)),
        ((8192, 5, 1), (1, 1, 1), (256, 1, 1), 65536, "stream", (1, 1, 1))]
    (fn,) = m._functions.values()
    assert fn.max_shared == 65536    # above 48 KiB: the opt-in attribute, once
    assert fake_driver.loaded == [0]   # no tensor told the device: the current one


def test_loading_the_cubin_allows_the_kernels_cluster(fake_driver):
    m = load(cluster=[4, 4, 1])   # 16 CTAs: the function's non-portable opt-in (driver.py)
    launch, _ = get_backend("cuda").launchers(m)
    launch((4, 4, 1), [(4096, 10, 1), 3])
    (fn,) = m._functions.values()
    assert fn.cluster == (4, 4, 1) and fake_driver.calls[0][-1] == (4, 4, 1)


def test_a_launch_packs_its_values_by_the_kernels_parameter_formats(fake_driver, monkeypatch):
    """With the printer's formats one struct packs every launch; a value that does not fit
    is a LaunchError, and a CUBIN whose parameters differ from them an internal one."""
    m = load(params=("x", "alpha"), param_formats=["Q", "q", "q", "f"])
    launch, _ = get_backend("cuda").launchers(m)
    launch((2, 1, 1), [(4096, 10, 1), 2.5])
    assert fake_driver.calls == [((4096, 10, 1, 2.5), (2, 1, 1), (256, 1, 1), 0, None,
                                  (1, 1, 1))]
    assert m._param_struct.sizes == (8, 8, 8, 4)
    with pytest.raises(LaunchError, match=r"kernel 'k': cannot pass the launch's values "
                                          r"\[4096, 10, 1, 1e\+39\]: float too large"):
        launch((2, 1, 1), [(4096, 10, 1), 1e39])
    monkeypatch.setattr(FakeFunction, "param_sizes", (8, 8, 8, 8))
    other = load(params=("x", "alpha"), param_formats=["Q", "q", "q", "f"])
    with pytest.raises(LaunchError, match=r"internal: k's CUBIN takes parameters of "
                                          r"\(8, 8, 8, 8\) bytes, the launch packs \(8, 8, 8, 4\)"):
        get_backend("cuda").launchers(other)[0]((2, 1, 1), [(4096, 10, 1), 2.5])


@needs_nvrtc
def test_the_packed_parameters_are_the_ones_the_cubin_takes(fresh_cache):
    """The printer's struct formats give the sizes the CUBIN's .nv.info lists: tensors
    (address, shape, strides) and scalars of several types."""
    from tilejit.examples.kernels import vector_add
    from tilejit.targets.cuda.nvrtc import resource_usage

    @tj.kernel
    def scalars(out, a, b, c):
        with tj.thread():
            if tj.thread_id() == 0:
                out[0] = a + b + c

    v = tj.TensorSpec((1000,), tj.float32, device="cuda")
    out = tj.TensorSpec((1,), tj.float64, device="cuda")
    for compiled, formats in [
            (vector_add.compile(v, v, v, BLOCK=256, target="cuda", arch="sm_90a"),
             ["Q", "q", "q"] * 3),
            (scalars.compile(out, 1.5, 7, 2 ** 40, target="cuda", arch="sm_90a"),
             ["Q", "q", "q", "f", "i", "q"])]:
        module = compiled.module
        assert module.param_formats == formats
        assert module._param_struct.sizes == \
            resource_usage(module.cubin)[module.entry].param_sizes


def test_a_grid_past_cudas_limits_is_a_launch_error_and_an_empty_one_launches_nothing(
        fake_driver):
    launch, _ = get_backend("cuda").launchers(load())
    launch((0, 1, 1), [7])
    launch((5, 0, 1), [7])
    with pytest.raises(LaunchError, match="grid y extent 65536 is above CUDA's limit of 65535"):
        launch((1, 65536, 1), [7])
    with pytest.raises(LaunchError, match="grid x extent 2147483648"):
        launch((2 ** 31, 1, 1), [7])
    assert fake_driver.loaded == []   # nothing launched, nothing loaded


# --------------------------------------------------------------------------- the device
def test_the_launch_device_is_the_one_the_tensors_sit_on():
    assert launch_device({"x": fake_tensor("cuda:1"), "y": fake_tensor("cuda:1"), "n": 5}) == 1
    assert launch_device({"x": fake_tensor("cuda:0"), "n": 5}) == 0
    assert launch_device({"n": 5, "alpha": 2.5}) is None    # the current device


def test_tensors_on_two_devices_or_off_cuda_are_a_launch_error_naming_them():
    with pytest.raises(LaunchError, match="the tensors of one launch must sit on one device: "
                                          "'x' on cuda:0, 'out' on cuda:1"):
        launch_device({"x": fake_tensor("cuda:0"), "n": 5, "out": fake_tensor("cuda:1")})
    with pytest.raises(LaunchError, match="argument 'y' is a tensor on cpu; the cuda target "
                                          "launches on CUDA tensors"):
        launch_device({"x": fake_tensor("cuda:0"), "y": fake_tensor("cpu")})


def test_launchers_run_on_the_device_of_the_arguments_they_serve(fake_driver):
    m = load()
    launch, launch_on_stream = get_backend("cuda").launchers(
        m, {"x": fake_tensor("cuda:1"), "n": 10})
    launch((1, 1, 1), [(4096, 10, 1), 10])
    launch_on_stream((1, 1, 1), [(4096, 10, 1), 10], "stream")
    assert fake_driver.loaded == [1] and list(m._functions) == [1]   # loaded once, there
    on_zero, _ = get_backend("cuda").launchers(m, {"x": fake_tensor("cuda:0"), "n": 10})
    on_zero((1, 1, 1), [(4096, 10, 1), 10])
    assert fake_driver.loaded == [1, 0] and len(fake_driver.calls) == 3


def test_a_compiled_kernel_called_directly_launches_on_its_tensors_device(fake_driver):
    """``compiled[grid](*args)``: the module makes the records and finds the device."""
    m = load()
    m.launch((2, 1, 1), [fake_tensor("cuda:1", address=8192), 10])
    assert fake_driver.loaded == [1]
    assert fake_driver.calls == [((8192, 10, 1, 10), (2, 1, 1), (256, 1, 1), 0, None,
                                  (1, 1, 1))]
    with pytest.raises(LaunchError, match="'x' is a tensor on cpu"):
        m.launch((2, 1, 1), [fake_tensor("cpu"), 10])


@needs_nvrtc
def test_the_runtime_binds_its_launches_to_the_tensors_device(fake_driver, fresh_cache):
    """What a launch's signature lookup finds (``FastEntry``) is bound to the device of the
    arguments that compiled it: the signature holds each tensor's device index."""
    from tilejit.examples.kernels import vector_add
    from tilejit.runtime.launcher import FastEntry
    x = tj.TensorSpec((1000,), tj.float32, device="cuda")
    compiled = vector_add.compile(x, x, x, BLOCK=256, target="cuda", arch="sm_90a")
    on_one = {name: fake_tensor("cuda:1") for name in ("x", "y", "out")}
    entry = FastEntry(compiled, (), compiled.runtime_params, {**on_one, "BLOCK": 256})
    entry.launch((4, 1, 1), [(4096, 1000, 1)] * 3)
    assert fake_driver.loaded == [1]


def test_a_stream_of_another_device_is_a_launch_error():
    stream = SimpleNamespace(device=torch.device("cuda:1"), cuda_stream=1234)
    assert driver._stream_handle(stream, 1) == 1234
    with pytest.raises(LaunchError, match="the stream is on cuda:1, the launch on cuda:0"):
        driver._stream_handle(stream, 0)


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@needs_gpu
def test_direct_and_stream_launches_run_on_the_tensors_device():
    from tilejit.examples.kernels import vector_add
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.Stream(device=x.device)
    vector_add[(4,)](x, y, out, BLOCK=256, stream=stream)
    stream.synchronize()
    torch.testing.assert_close(out, x + y)
    compiled = vector_add.compile(x, y, out, BLOCK=256, target="cuda")
    out.zero_()
    compiled[(4, 1, 1)](x, y, out)
    torch.testing.assert_close(out, x + y)


@pytest.mark.gpu
@needs_two_gpus
def test_tensors_on_another_device_than_the_current_one():
    from tilejit.examples.kernels import vector_add
    torch.cuda.set_device(0)
    x, y = torch.randn(1000, device="cuda:1"), torch.randn(1000, device="cuda:1")
    out = torch.empty_like(x)
    vector_add[(4,)](x, y, out, BLOCK=256)
    torch.cuda.synchronize(1)
    torch.testing.assert_close(out, x + y)
    assert torch.cuda.current_device() == 0
    with pytest.raises(LaunchError, match="different devices"):
        vector_add[(4,)](x, y, torch.empty(1000, device="cuda:0"), BLOCK=256)
