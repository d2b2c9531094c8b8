"""A stand-in for ``cuda.bindings.driver`` that records the launches driver.py makes, so the
launch path is tested without a GPU. The launch configuration's structs (``CUlaunchConfig``,
``CUlaunchAttribute``, ``CUstream``) are cuda-python's own -- plain host memory, no driver
needed -- so what driver.py writes into them is checked as the real driver would read it;
the functions return ``(CUresult, *values)`` tuples as cuda-python's do."""
import ctypes
import enum
from dataclasses import dataclass

import pytest

from tilejit.targets.cuda import driver as drv

__all__ = ["FakeDriver", "FakeTensor", "Launch", "fake_driver"]


class _Handle:
    def __init__(self, v):
        self.v = int(v)

    def __int__(self):
        return self.v


@dataclass
class Launch:
    """One cuLaunchKernelEx call as the driver saw it."""
    grid: tuple
    block: tuple
    shared: int
    stream: int
    cluster: tuple | None       # the cluster-dimension attribute, None without one
    params: list                # each parameter's bytes
    config: object              # the CUlaunchConfig itself (to see it reused)


class FakeDriver:
    """The calls driver.py makes; ``required_cluster`` is what cuFuncGetAttribute reports
    as the kernel's compiled-in cluster (0s: none; None: the query fails, as it may on a
    device without clusters), ``functions`` the kernels a module has."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_NOT_FOUND = 500

    class CUfunction_attribute(enum.IntEnum):
        CU_FUNC_ATTRIBUTE_NUM_REGS = 4
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT = 12
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH = 13
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14

    OK = (CUresult.CUDA_SUCCESS,)

    def __init__(self, param_sizes, functions=(b"axpb",), required_cluster=(0, 0, 0)):
        real = pytest.importorskip("cuda.bindings.driver")
        self.CUlaunchConfig, self.CUlaunchAttribute = real.CUlaunchConfig, real.CUlaunchAttribute
        self.CUlaunchAttributeID, self.CUstream = real.CUlaunchAttributeID, real.CUstream
        self.param_sizes, self.functions = param_sizes, functions
        self.required_cluster = required_cluster
        self.current, self.launches, self.set_attrs, self.got_attrs = 0, [], [], []

    def cuInit(self, flags):
        return self.OK

    def cuDeviceGet(self, ordinal):
        return (*self.OK, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        return (*self.OK, _Handle(1000 + dev))

    def cuCtxGetCurrent(self):
        return (*self.OK, _Handle(self.current))

    def cuCtxSetCurrent(self, ctx):
        self.current = int(ctx)
        return self.OK

    def cuModuleLoadData(self, image):
        assert isinstance(image, int) and ctypes.string_at(image, 4) in (b"\x7fELF", b"fake")
        return (*self.OK, _Handle(7))

    def cuModuleGetFunction(self, hmod, name):
        assert isinstance(name, bytes)
        if name not in self.functions:
            return (self.CUresult.CUDA_ERROR_NOT_FOUND, None)
        return (*self.OK, _Handle(8))

    def cuGetErrorString(self, err):
        return (*self.OK, b"named symbol not found")

    def cuFuncGetAttribute(self, attrib, hfunc):
        self.got_attrs.append(attrib.name)
        name = attrib.name.removeprefix("CU_FUNC_ATTRIBUTE_")
        if name.startswith("REQUIRED_CLUSTER_") and self.required_cluster is None:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        if name.startswith("REQUIRED_CLUSTER_"):
            axis = ("WIDTH", "HEIGHT", "DEPTH").index(name.removeprefix("REQUIRED_CLUSTER_"))
            return (*self.OK, self.required_cluster[axis])
        return (*self.OK, 12)

    def cuFuncSetAttribute(self, hfunc, attrib, value):
        self.set_attrs.append((attrib.name, value))
        return self.OK

    def cuLaunchKernelEx(self, config, f, params, extra):
        assert self.current == 1000, "launch without the primary context current"
        assert extra == 0
        ptrs = (ctypes.c_void_p * len(self.param_sizes)).from_address(params) if params else []
        raw = [ctypes.string_at(p, n) for p, n in zip(ptrs, self.param_sizes)]
        cluster = None
        assert config.numAttrs == len(config.attrs) <= 1
        if config.numAttrs:
            (attribute,) = config.attrs
            assert attribute.id == self.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dims = attribute.value.clusterDim
            cluster = (dims.x, dims.y, dims.z)
        self.launches.append(Launch(
            (config.gridDimX, config.gridDimY, config.gridDimZ),
            (config.blockDimX, config.blockDimY, config.blockDimZ),
            config.sharedMemBytes, int(config.hStream), cluster, raw, config))
        return self.OK


class FakeTensor:
    """What driver.pack_args reads of a CUDA tensor on device 0."""
    is_cuda = True

    class device:
        index = 0

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def fake_driver(monkeypatch, param_sizes, **options) -> FakeDriver:
    """Install a FakeDriver as driver.py's bindings (and forget its contexts)."""
    fake = FakeDriver(param_sizes, **options)
    monkeypatch.setattr(drv, "_import_driver", lambda: fake)
    monkeypatch.setattr(drv, "_initialized", [])
    monkeypatch.setattr(drv, "_contexts", {})
    return fake
