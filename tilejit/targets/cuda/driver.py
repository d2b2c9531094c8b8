"""Load CUBIN/PTX with the CUDA driver API (cuda-python) and launch kernels on torch tensors.

We use the device's *primary* context, the one PyTorch's runtime uses too, so tensors that
torch allocated are valid in our kernels and our launches order with torch's on a stream.
cuda-python is imported inside functions: importing this module needs neither it nor torch.
"""
from __future__ import annotations

import ctypes
import functools
import math
import struct
import sys
import threading

from ...errors import LaunchError
from ..backend import cluster_grid_error

__all__ = [
    "CudaModule", "CudaFunction", "PackedArgs", "ParamStruct", "pack_args", "load_module",
    "launch", "driver_unavailable_reason", "driver_version", "device_capability",
    "device_arch", "MAX_PORTABLE_CLUSTER", "MAX_NON_PORTABLE_CLUSTER",
]

_MAX_STATIC_SHARED = 48 * 1024  # above this a block needs an opt-in (cuFuncSetAttribute)
# CTAs per cluster every sm_90 device runs. Up to MAX_NON_PORTABLE_CLUSTER need the
# function's opt-in (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 1, CUDA
# programming guide, "Thread Block Clusters"): H100/H200 run 16; set by
# CudaFunction.allow_cluster, at load for a compiled-in cluster, else at the launch.
MAX_PORTABLE_CLUSTER = 8
MAX_NON_PORTABLE_CLUSTER = 16
MAX_LAUNCH_CONFIGS = 1024   # launch shapes a function keeps configured (then it starts over)
NO_CLUSTER = (1, 1, 1)


def _import_driver():
    # cuda-python >= 12.6 has cuda.bindings.driver; older releases had cuda.cuda.
    try:
        from cuda.bindings import driver
        return driver
    except ImportError:
        pass
    try:
        from cuda import cuda as driver  # type: ignore[attr-defined]
        return driver
    except ImportError as e:
        raise LaunchError("cuda-python is not installed (pip install 'tilejit[cuda]')") from e


def _code(err) -> int:
    try:
        return int(err)
    except TypeError:
        return int(err.value)


def _check(result, what: str):
    """Unpack a cuda-python ``(CUresult, *values)`` tuple; raise LaunchError naming the CUresult."""
    err, *rest = result
    if _code(err) != 0:
        name = getattr(err, "name", None) or f"CUresult {_code(err)}"
        desc = ""
        try:
            e2, s = _import_driver().cuGetErrorString(err)
            if _code(e2) == 0 and s:
                desc = ": " + s.decode()
        except Exception:
            pass
        raise LaunchError(f"{what} failed: {name}{desc}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


_initialized: list = []  # the driver module, once cuInit succeeded


def _driver():
    """The driver bindings, cuInit'ed (once: launches call this each time)."""
    if _initialized:
        return _initialized[0]
    drv = _import_driver()
    try:
        _check(drv.cuInit(0), "cuInit")
    except LaunchError:
        raise
    except Exception as e:  # no libcuda: cuda-pathfinder raises DynamicLibNotFoundError
        raise LaunchError(f"CUDA driver unavailable: {type(e).__name__}: {e}") from None
    _initialized.append(drv)
    return drv


def driver_unavailable_reason() -> str | None:
    """None when the driver initialises here, else why not."""
    try:
        _driver()
    except LaunchError as e:
        return str(e)
    return None


def driver_version() -> tuple[int, int]:
    """The driver's CUDA version, e.g. (13, 0) for driver 580."""
    v = _check(_driver().cuDriverGetVersion(), "cuDriverGetVersion")
    return v // 1000, (v % 1000) // 10


def _default_device() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


_lock = threading.Lock()
_contexts: dict[int, object] = {}


def _ensure_context(device: int):
    """Make ``device``'s primary context current on this thread (torch uses the same one)."""
    drv = _driver()
    ctx = _contexts.get(device)   # retained once: launches need no lock
    if ctx is None:
        with _lock:
            ctx = _contexts.get(device)
            if ctx is None:
                dev = _check(drv.cuDeviceGet(device), "cuDeviceGet")
                ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _contexts[device] = ctx
    cur = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if cur is None or int(cur) != int(ctx):
        _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def device_capability(device: int | None = None) -> tuple[int, int]:
    device = _default_device() if device is None else device
    drv = _driver()
    dev = _check(drv.cuDeviceGet(device), "cuDeviceGet")
    a = drv.CUdevice_attribute
    major = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                   "cuDeviceGetAttribute")
    minor = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                   "cuDeviceGetAttribute")
    return major, minor


def device_arch(device: int | None = None, arch_specific: bool = True) -> str:
    """The NVRTC arch of ``device``: 'sm_90a' on an H100/H200, 'sm_80' on an A100."""
    from .nvrtc import arch_for_capability
    return arch_for_capability(*device_capability(device), arch_specific=arch_specific)


# ---------------------------------------------------------------------------------------------
# Argument packing. cuLaunchKernelEx takes an array of pointers, one per parameter, each to the
# parameter's bytes; the driver copies as many bytes as the kernel's parameter has. So a
# Python int or float must be packed at the parameter's real size: we take the sizes from
# the CUBIN when known (ResourceUsage.param_sizes) and else assume int32 / float32.

_INT_FMT = {1: "b", 2: "h", 4: "i", 8: "q"}
_UINT_FMT = {1: "B", 2: "H", 4: "I", 8: "Q"}
_FLOAT_FMT = {2: "e", 4: "f", 8: "d"}


class PackedArgs:
    """Kernel arguments as cuLaunchKernelEx wants them; keep alive until the launch returns."""

    def __init__(self, raw: list[bytes]):
        self.raw = raw
        self._bufs = [ctypes.create_string_buffer(r, max(len(r), 1)) for r in raw]
        self._ptrs = (ctypes.c_void_p * max(len(raw), 1))(*[ctypes.addressof(b) for b in self._bufs])

    @property
    def address(self) -> int:
        """The void** to pass as kernelParams (0 for a kernel without parameters)."""
        return ctypes.addressof(self._ptrs) if self.raw else 0


class ParamStruct:
    """A kernel's parameters packed by one ``struct.pack_into`` per launch: ``formats`` is
    each parameter's struct format ('Q', 'i', 'f', '128s'), in order. The pointer array
    cuLaunchKernelEx reads points into one buffer at fixed offsets, so a launch allocates
    nothing. Each thread fills a buffer of its own; the driver copies the parameters
    before cuLaunchKernelEx returns, so the next launch may refill it."""

    def __init__(self, formats):
        self.sizes = tuple(struct.calcsize("<" + f) for f in formats)
        self.struct = struct.Struct("<" + "".join(formats))
        self._offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self._local = threading.local()

    def pack(self, values) -> int:
        """The void** to pass as kernelParams, to this thread's buffer filled with
        ``values`` (struct.error or OverflowError when one does not fit its format)."""
        try:
            buffer, _, address = self._local.slots
        except AttributeError:
            buffer = ctypes.create_string_buffer(max(self.struct.size, 1))
            base = ctypes.addressof(buffer)
            pointers = (ctypes.c_void_p * max(len(self.sizes), 1))(
                *[base + offset for offset in self._offsets])
            address = ctypes.addressof(pointers) if self.sizes else 0
            self._local.slots = buffer, pointers, address
        self.struct.pack_into(buffer, 0, *values)
        return address


def _device_pointer(i: int, arg, device: int | None) -> int | None:
    if hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda"):  # torch.Tensor, duck-typed
        if not arg.is_cuda:
            raise LaunchError(f"argument {i} is a tensor on {arg.device}; kernels need CUDA tensors")
        if device is not None and arg.device.index is not None and arg.device.index != device:
            raise LaunchError(f"argument {i} is on cuda:{arg.device.index}, the kernel on cuda:{device}")
        return int(arg.data_ptr())
    cai = getattr(arg, "__cuda_array_interface__", None)  # CuPy, Numba
    if cai is not None:
        return int(cai["data"][0])
    return None


def pack_args(args, param_sizes: tuple[int, ...] | None = None,
              device: int | None = None) -> PackedArgs:
    """Pack tensors (as their data pointers), Python/NumPy scalars, ctypes values and raw
    bytes (structs passed by value, e.g. a TMA descriptor) for cuLaunchKernelEx."""
    args = list(args)
    if param_sizes is not None and len(args) != len(param_sizes):
        raise LaunchError(f"kernel takes {len(param_sizes)} arguments, got {len(args)}")
    raw: list[bytes] = []
    for i, arg in enumerate(args):
        want = param_sizes[i] if param_sizes is not None else None
        ptr = _device_pointer(i, arg, device)
        if ptr is not None:
            b = struct.pack("<Q", ptr)
        elif isinstance(arg, (bytes, bytearray, memoryview)):
            b = bytes(arg)
        elif isinstance(arg, (ctypes._SimpleCData, ctypes.Structure, ctypes.Array)):
            b = bytes(arg)
        elif hasattr(arg, "dtype") and hasattr(arg, "tobytes") and getattr(arg, "ndim", 1) == 0:
            b = arg.tobytes()  # NumPy scalar: its own width, e.g. np.float64, np.int64
        elif isinstance(arg, int):  # bool too
            size = want or 4
            if size not in _INT_FMT:
                raise LaunchError(f"argument {i}: an int can't fill a {size}-byte parameter")
            fmt = _INT_FMT[size] if arg < 0 else _UINT_FMT[size]
            if not -(1 << (8 * size - 1)) <= arg < (1 << (8 * size)):
                raise LaunchError(f"argument {i}: {arg} does not fit a {size}-byte parameter"
                                  + ("" if want else "; pass numpy.int64 for a 64-bit one"))
            b = struct.pack("<" + fmt, int(arg))
        elif isinstance(arg, float):
            size = want or 4
            if size not in _FLOAT_FMT:
                raise LaunchError(f"argument {i}: a float can't fill a {size}-byte parameter")
            b = struct.pack("<" + _FLOAT_FMT[size], arg)
        else:
            raise LaunchError(f"argument {i}: can't pass a {type(arg).__name__} to a kernel")
        if want is not None and len(b) != want:
            raise LaunchError(f"argument {i} is {len(b)} bytes; the kernel's parameter is {want}")
        raw.append(b)
    return PackedArgs(raw)


def _dim3(v, what: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or any(not isinstance(x, int) or x < 1 for x in t):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {v!r}")
    return (*t, *([1] * (3 - len(t))))  # type: ignore[return-value]


def _stream_handle(stream, device: int) -> int:
    if stream is None:  # torch's current stream, so we order with torch's own work
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.current_stream(device).cuda_stream)
        return 0
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        if stream.device.index != device:   # another context's stream: the launch fails
            raise LaunchError(f"the stream is on {stream.device}, the launch on cuda:{device}")
        return int(stream.cuda_stream)
    try:
        return int(stream)  # a raw handle, or a cuda-python CUstream
    except (TypeError, ValueError):
        raise LaunchError(f"can't use a {type(stream).__name__} as a CUDA stream") from None


# ---------------------------------------------------------------------------------------------

class CudaModule:
    """A CUBIN (bytes), PTX (str; the driver JIT-compiles it) or CudaProgram, loaded."""

    def __init__(self, image, device: int | None = None):
        from .nvrtc import resource_usage
        self.device = _default_device() if device is None else device
        cubin = getattr(image, "cubin", None)
        if cubin is None and hasattr(image, "ptx"):
            image = image.ptx
        elif cubin is not None:
            image = cubin
        self._resources = {}
        if isinstance(image, str):
            data = image.encode() + b"\0"  # the driver wants NUL-terminated PTX
        else:
            data = bytes(image)
            if data[:4] == b"\x7fELF":
                try:
                    self._resources = resource_usage(data)
                except Exception:  # reading resources is a convenience, never a blocker
                    pass
        drv = _driver()
        _ensure_context(self.device)
        buf = ctypes.create_string_buffer(data, len(data))
        self.handle = _check(drv.cuModuleLoadData(ctypes.addressof(buf)), "cuModuleLoadData")
        self._functions: dict[str, CudaFunction] = {}

    def get_function(self, name: str) -> "CudaFunction":
        f = self._functions.get(name)
        if f is None:
            drv = _driver()
            _ensure_context(self.device)
            h = _check(drv.cuModuleGetFunction(self.handle, name.encode()),
                       f"cuModuleGetFunction({name!r})")
            r = self._resources.get(name)
            f = self._functions[name] = CudaFunction(self, name, h, r.param_sizes if r else None)
        return f

    __getitem__ = get_function

    def unload(self) -> None:
        if self.handle is not None:
            _ensure_context(self.device)
            _check(_import_driver().cuModuleUnload(self.handle), "cuModuleUnload")
            self.handle = None
            self._functions.clear()


class CudaFunction:
    """One kernel of a loaded module."""

    def __init__(self, module: CudaModule, name: str, handle, param_sizes):
        self.module, self.name, self.handle = module, name, handle
        self.param_sizes: tuple[int, ...] | None = param_sizes or None
        if self.param_sizes is None:
            self.param_sizes = self._driver_param_sizes()
        self._max_dynamic_shared = _MAX_STATIC_SHARED
        self._non_portable_clusters = False   # the opt-in set (allow_cluster)
        self._configs: dict[tuple, tuple] = {}   # launch shape -> (CUlaunchConfig, what)

    def _driver_param_sizes(self) -> tuple[int, ...] | None:
        # For PTX-loaded kernels; cuFuncGetParamInfo exists from CUDA 12.4 on.
        drv = _import_driver()
        if not hasattr(drv, "cuFuncGetParamInfo"):
            return None
        sizes = []
        try:
            for i in range(4096):
                err, _, size = drv.cuFuncGetParamInfo(self.handle, i)
                if _code(err) != 0:
                    break
                sizes.append(int(size))
        except Exception:
            return None
        return tuple(sizes)

    def attribute(self, name: str) -> int:
        """A CU_FUNC_ATTRIBUTE_*, e.g. 'NUM_REGS', 'SHARED_SIZE_BYTES', 'LOCAL_SIZE_BYTES'."""
        drv = _import_driver()
        attr = getattr(drv.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + name)
        return _check(drv.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({name})")

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        drv = _import_driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(drv.cuFuncSetAttribute(self.handle, attr, int(nbytes)),
               f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) for {self.name}")
        self._max_dynamic_shared = int(nbytes)

    def allow_cluster(self, cluster: tuple[int, int, int]) -> None:
        """Make launches in clusters of ``cluster`` CTAs possible: above
        MAX_PORTABLE_CLUSTER the function opts in to non-portable sizes (once); above
        MAX_NON_PORTABLE_CLUSTER no device runs them, a LaunchError."""
        ctas = math.prod(cluster)
        if ctas > MAX_NON_PORTABLE_CLUSTER:
            raise LaunchError(f"cluster={cluster} has {ctas} CTAs, above the maximum of "
                              f"{MAX_NON_PORTABLE_CLUSTER} (portable: {MAX_PORTABLE_CLUSTER}; "
                              "up to 16 with the non-portable opt-in)")
        if ctas > MAX_PORTABLE_CLUSTER and not self._non_portable_clusters:
            drv = _import_driver()
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            _check(drv.cuFuncSetAttribute(self.handle, attr, 1),
                   f"cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED=1) for {self.name}")
            self._non_portable_clusters = True

    @functools.cached_property
    def compiled_cluster(self) -> tuple[int, int, int] | None:
        """The cluster shape compiled into the kernel (``__cluster_dims__``); None without."""
        try:
            dims = tuple(self.attribute(f"REQUIRED_CLUSTER_{axis}")
                         for axis in ("WIDTH", "HEIGHT", "DEPTH"))
        except LaunchError:   # a device without clusters need not answer: none compiled in
            return None
        return dims if all(dims) else None  # type: ignore[return-value]

    def __call__(self, *args, grid, block, shared_mem: int = 0, stream=None,
                 cluster=None) -> None:
        """Launch asynchronously on ``stream`` (default: torch's current stream) in clusters
        of ``cluster`` CTAs (default: the kernel's ``__cluster_dims__``, else none).

        The launch configuration is built once per (grid, block, shared_mem, stream,
        cluster) and kept: a repeated launch packs its arguments and looks the shape up."""
        packed = pack_args(args, self.param_sizes, self.module.device)
        self._launch(packed.address, grid, block, shared_mem, stream, cluster)

    def launch_struct(self, params: ParamStruct, values, *, grid, block, shared_mem: int = 0,
                      stream=None, cluster=None) -> None:
        """Launch as ``__call__`` does with ``values`` (plain ints, floats and bytes, one per
        parameter) packed by ``params``: the runtime's path, one pack_into per launch."""
        self._launch(params.pack(values), grid, block, shared_mem, stream, cluster)

    def _launch(self, params: int, grid, block, shared_mem, stream, cluster) -> None:
        """cuLaunchKernelEx with the packed ``params`` (a void**) and the shape's config."""
        device = self.module.device
        drv = _driver()
        _ensure_context(device)
        shape = (grid, block, shared_mem, _stream_handle(stream, device), cluster)
        try:
            config, what = self._configs[shape]
        except KeyError:
            if len(self._configs) >= MAX_LAUNCH_CONFIGS:
                self._configs.clear()
            config, what = self._configs[shape] = self._configure(drv, *shape)
        except TypeError:  # dimensions given as lists: configured each time
            config, what = self._configure(drv, *shape)
        _check(drv.cuLaunchKernelEx(config, self.handle, params, 0), what)

    def _configure(self, drv, grid, block, shared_mem: int, stream: int, cluster):
        """(CUlaunchConfig, its description for errors) of a launch shape, checked."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if math.prod(block) > 1024:
            raise LaunchError(f"block {block[0]}x{block[1]}x{block[2]} has more than 1024 "
                              "threads")
        cluster = self._cluster(cluster)
        split = cluster_grid_error(grid, cluster)
        if split:
            raise LaunchError(split)
        if shared_mem > self._max_dynamic_shared:
            self.set_max_dynamic_shared(shared_mem)
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = int(shared_mem)
        config.hStream = drv.CUstream(stream)
        # A compiled-in __cluster_dims__ already makes the launch a cluster launch, and CUDA
        # lets no launch change it: the attribute is for kernels compiled without one.
        if cluster != NO_CLUSTER and cluster != self.compiled_cluster:
            attribute = drv.CUlaunchAttribute()
            attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dims = attribute.value.clusterDim
            dims.x, dims.y, dims.z = cluster
            config.attrs, config.numAttrs = [attribute], 1
        return config, (f"cuLaunchKernelEx({self.name}, grid={grid}, block={block}, "
                        f"shared_mem={shared_mem}, cluster={cluster})")

    def _cluster(self, requested) -> tuple[int, int, int]:
        """The cluster shape of a launch that asked for ``requested`` (None: the kernel's)."""
        compiled = self.compiled_cluster
        if requested is None:
            return compiled or NO_CLUSTER
        cluster = _dim3(requested, "cluster")
        if compiled is not None and cluster != compiled:
            raise LaunchError(f"{self.name} is compiled for clusters of {compiled} CTAs "
                              f"(__cluster_dims__): cluster={cluster} contradicts it")
        self.allow_cluster(cluster)
        return cluster

    launch = __call__


def load_module(image, device: int | None = None) -> CudaModule:
    return CudaModule(image, device)


def launch(function: CudaFunction, grid, block, args=(), shared_mem: int = 0, stream=None,
           cluster=None):
    function(*args, grid=grid, block=block, shared_mem=shared_mem, stream=stream,
             cluster=cluster)
