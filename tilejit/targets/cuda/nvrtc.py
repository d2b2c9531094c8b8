"""CUDA C++ -> PTX and CUBIN with NVRTC (through cuda-python), and resource readout.

Everything that touches cuda-python imports it inside a function, so that ``import tilejit``
works on machines without it; :func:`nvrtc_unavailable_reason` says why NVRTC can't be used.
No GPU is needed here: NVRTC is a library, and a CUBIN is an ELF file we can read ourselves.
"""
from __future__ import annotations

import functools
import glob
import os
import re
import struct
import sys
from dataclasses import dataclass, field

from ...errors import CompilationError
from ...knobs import knobs

__all__ = [
    "CudaProgram", "ResourceUsage", "compile_cuda", "nvrtc_unavailable_reason", "nvrtc_version",
    "supported_archs", "parse_arch", "arch_for_capability", "cuda_include_dirs",
    "resource_usage",
]

_ARCH_RE = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")


def _import_nvrtc():
    # cuda-python >= 12.6 moved the bindings to cuda.bindings; older ones had cuda.nvrtc.
    try:
        from cuda.bindings import nvrtc
        return nvrtc
    except ImportError:
        pass
    try:
        from cuda import nvrtc  # type: ignore[attr-defined]
        return nvrtc
    except ImportError as e:
        raise ImportError("cuda-python is not installed (pip install 'tilejit[cuda]')") from e


def _preload_wheel_nvrtc() -> None:
    # Bindings older than cuda-pathfinder (cuda-python < 12.9) dlopen libnvrtc by soname
    # only, which misses the pip wheel's copy. Loading that copy first (RTLD_GLOBAL) makes
    # the later lookup by soname find it.
    try:
        import cuda.pathfinder  # noqa: F401  (newer bindings find the wheel themselves)
        return
    except ImportError:
        pass
    import ctypes
    for p in sys.path:
        pats = (os.path.join(p, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.*"),
                os.path.join(p, "nvidia", "cu[0-9]*", "lib", "libnvrtc.so.*"))
        for lib in sorted(f for pat in pats for f in glob.glob(pat)):
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


@functools.lru_cache(maxsize=None)
def nvrtc_unavailable_reason() -> str | None:
    """None when NVRTC can compile here, else a one-line reason (used by tests to skip)."""
    try:
        nvrtc = _import_nvrtc()
        _preload_wheel_nvrtc()
        # The bindings open libnvrtc lazily: call into it to find out whether it loads.
        err, _, _ = nvrtc.nvrtcVersion()
        if _code(err) != 0:
            return f"nvrtcVersion failed: {err!r}"
    except Exception as e:  # ImportError, or cuda-pathfinder's DynamicLibNotFoundError
        return f"NVRTC unavailable: {type(e).__name__}: {e}"
    return None


def _nvrtc():
    reason = nvrtc_unavailable_reason()
    if reason is not None:
        raise CompilationError(reason)
    return _import_nvrtc()


def _code(err) -> int:
    # IntEnum in recent bindings; a plain Enum in some old ones.
    try:
        return int(err)
    except TypeError:
        return int(err.value)


def _check(result, what: str):
    """Unpack a cuda-python ``(nvrtcResult, *values)`` tuple, raising on failure."""
    err, *rest = result
    if _code(err) != 0:
        nvrtc = _import_nvrtc()
        try:
            msg = nvrtc.nvrtcGetErrorString(err)[1].decode()
        except Exception:
            msg = repr(err)
        raise CompilationError(f"{what} failed: {msg}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    return tuple(_check(_nvrtc().nvrtcVersion(), "nvrtcVersion"))  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    """The SM numbers this NVRTC can target, e.g. (75, 80, ..., 90, 100, 120)."""
    return tuple(_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def parse_arch(arch: str) -> tuple[str, int, str]:
    """'sm_90a' -> ('sm', 90, 'a'). 'compute_XX' asks for PTX only; 'sm_XX' for PTX and CUBIN."""
    m = _ARCH_RE.match(arch)
    if not m:
        raise CompilationError(f"bad CUDA arch {arch!r}: expected e.g. 'sm_90a', 'sm_80', 'compute_90'")
    return m.group(1), int(m.group(2)), m.group(3)


def arch_for_capability(major: int, minor: int, arch_specific: bool = True) -> str:
    """The arch to compile for a device of compute capability major.minor.

    From Hopper on, the 'a' targets unlock the chip's own instructions (wgmma, setmaxnreg,
    tcgen05); such code runs only on that exact chip, which is what we want for a JIT.
    """
    return f"sm_{major}{minor}" + ("a" if arch_specific and major >= 9 else "")


# ---------------------------------------------------------------------------------------------
# Headers: NVRTC ships no CUDA headers, so cuda_fp16.h & co. come from the runtime wheel
# (nvidia-cuda-runtime-cu12 -> nvidia/cuda_runtime/include; CUDA 13 wheels -> nvidia/cu13/include)
# or a toolkit (CUDA_HOME). Mixing headers of another major version than NVRTC's breaks, so a
# directory whose version matches NVRTC is preferred, and only one is used.

def _header_version(d: str) -> int | None:
    try:
        with open(os.path.join(d, "cuda_runtime_api.h"), errors="replace") as f:
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
        return int(m.group(1)) if m else None
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    """Directories to pass NVRTC with -I so that CUDA's own headers resolve ('' if none)."""
    cands: list[str] = list(knobs.cuda_include)
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudart")
        if found:
            cands.append(str(found))
    except Exception:  # old cuda-pathfinder without it, or none at all
        pass
    for p in sys.path:
        if p and os.path.isdir(os.path.join(p, "nvidia")):
            cands += sorted(glob.glob(os.path.join(p, "nvidia", "cuda_runtime", "include")))
            cands += sorted(glob.glob(os.path.join(p, "nvidia", "cu[0-9]*", "include")), reverse=True)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "include"))
    cands.append("/usr/local/cuda/include")

    seen, dirs = set(), []
    for d in cands:
        real = os.path.realpath(d)
        if real not in seen and os.path.isfile(os.path.join(real, "cuda_fp16.h")):
            seen.add(real)
            dirs.append(real)
    if not dirs:
        return ()
    try:
        major = nvrtc_version()[0]
        dirs.sort(key=lambda d: (_header_version(d) or 0) // 1000 != major)  # stable
    except CompilationError:
        pass
    best = dirs[0]
    # CUDA 13 toolkits keep CCCL (cuda/std/...) in include/cccl.
    extra = [os.path.join(best, "cccl")] if os.path.isdir(os.path.join(best, "cccl")) else []
    return (best, *extra)


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas allotted one kernel. None where the source (CUBIN or log) doesn't say."""

    registers: int | None = None
    shared_bytes: int | None = None        # static shared memory (dynamic comes at launch)
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None   # only in a ptxas log
    spill_load_bytes: int | None = None
    barriers: int | None = None
    param_sizes: tuple[int, ...] | None = None  # only in a CUBIN: byte size of each parameter


@dataclass(frozen=True)
class CudaProgram:
    """The result of one NVRTC compilation."""

    name: str
    arch: str
    ptx: str
    cubin: bytes | None          # None for a 'compute_XX' (PTX-only) target
    log: str
    options: tuple[str, ...]
    lowered_names: dict[str, str] = field(default_factory=dict)  # C++ name expr -> symbol

    @property
    def entries(self) -> list[str]:
        """Kernel (.entry) names, in PTX order."""
        return re.findall(r"\.entry\s+([\w$]+)\s*\(", self.ptx)

    def resources(self) -> dict[str, ResourceUsage]:
        """Per-kernel resources, from the CUBIN (with spills from the -v log when present)."""
        from_log = resource_usage(self.log) if "ptxas" in self.log else {}
        if self.cubin is None:
            return from_log
        out = resource_usage(self.cubin)
        for k, r in out.items():
            if k in from_log:
                lg = from_log[k]
                out[k] = ResourceUsage(r.registers, r.shared_bytes, r.stack_frame_bytes,
                                       lg.spill_store_bytes, lg.spill_load_bytes, r.barriers,
                                       r.param_sizes)
        return out


def compile_cuda(source: str, arch: str = "sm_90a", *, name: str = "tilejit_kernel.cu",
                 options: tuple[str, ...] | list[str] = (),
                 include_dirs: tuple[str, ...] | list[str] | None = None,
                 name_expressions: tuple[str, ...] | list[str] = (),
                 ptxas_verbose: bool = True, minimal: bool = False) -> CudaProgram:
    """Compile CUDA C++ ``source`` for ``arch`` ('sm_90a', 'sm_80', 'sm_100a', 'compute_90').

    include_dirs=None adds CUDA's own headers (:func:`cuda_include_dirs`). ``name_expressions``
    (e.g. 'my_kernel<float, 128>') get their mangled names in ``lowered_names``. With
    ``ptxas_verbose`` the log carries ptxas's register/shared/spill report. ``minimal``
    leaves out of NVRTC's built-in declarations what tilejit's printed kernels never use
    (texture and surface functions, the device runtime, CUDA's runtime API types:
    ``--minimal``, NVRTC 12.4+), about a quarter of NVRTC's fixed cost per program; older
    NVRTCs compile without it. Raises
    :class:`CompilationError` with NVRTC's log on failure.
    """
    kind, num, _ = parse_arch(arch)
    nvrtc = _nvrtc()
    if num not in supported_archs():
        v = nvrtc_version()
        raise CompilationError(f"NVRTC {v[0]}.{v[1]} cannot target {arch}; it supports "
                               + ", ".join(f"sm_{a}" for a in supported_archs()))
    opts = [f"--gpu-architecture={arch}"]
    for d in (cuda_include_dirs() if include_dirs is None else include_dirs):
        opts.append(f"--include-path={d}")
    if ptxas_verbose and kind == "sm":
        opts.append("--ptxas-options=-v")
    if minimal and nvrtc_version() >= (12, 4):
        opts.append("--minimal")
    opts += list(options)

    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        bopts = [o.encode() for o in opts]
        err, = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        log = _get(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, "log")
        log = log.rstrip(b"\x00").decode(errors="replace").strip()
        if _code(err) != 0:
            raise CompilationError(
                f"NVRTC failed to compile {name} for {arch}:\n{log or repr(err)}")
        ptx = _get(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "PTX")
        cubin = None
        if kind == "sm":
            cubin = _get(nvrtc, prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "CUBIN")
        lowered = {e: _check(nvrtc.nvrtcGetLoweredName(prog, e.encode()),
                             "nvrtcGetLoweredName").decode() for e in name_expressions}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CudaProgram(name, arch, ptx.rstrip(b"\x00").decode(), cubin, log, tuple(opts), lowered)


def _get(nvrtc, prog, size_fn, get_fn, what: str) -> bytes:
    # The bindings fill a caller-made buffer of the size NVRTC reports.
    size = _check(size_fn(prog), f"nvrtcGet{what}Size")
    buf = b" " * size
    if size:
        _check(get_fn(prog, buf), f"nvrtcGet{what}")
    return buf


# ---------------------------------------------------------------------------------------------
# Resource readout, without a GPU: from ptxas's -v log, or from the CUBIN's ELF sections.

_LOG_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_LOG_PROPS = re.compile(r"Function properties for (\S+)")
_LOG_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_LOG_USED = re.compile(r"Used (\d+) registers")


def resource_usage(cubin_or_log: bytes | str) -> dict[str, ResourceUsage]:
    """Per-kernel :class:`ResourceUsage` from a CUBIN (bytes) or a ptxas ``-v`` log (str)."""
    if isinstance(cubin_or_log, (bytes, bytearray, memoryview)):
        return _cubin_resources(bytes(cubin_or_log))
    return _log_resources(cubin_or_log)


def _log_resources(log: str) -> dict[str, ResourceUsage]:
    out: dict[str, dict] = {}
    entry = props_for = None
    for line in log.splitlines():
        if m := _LOG_ENTRY.search(line):
            entry = m.group(1)
            out.setdefault(entry, {})
        elif m := _LOG_PROPS.search(line):
            props_for = m.group(1)  # may be a non-inlined device function, not the entry
        elif (m := _LOG_FRAME.search(line)) and props_for is not None and props_for == entry:
            out[entry].update(stack_frame_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                              spill_load_bytes=int(m.group(3)))
        elif (m := _LOG_USED.search(line)) and entry is not None:
            smem = re.search(r"(\d+) bytes smem", line)
            bars = re.search(r"used (\d+) barriers", line)
            out[entry].update(registers=int(m.group(1)),
                              shared_bytes=int(smem.group(1)) if smem else 0,
                              barriers=int(bars.group(1)) if bars else None)
    return {k: ResourceUsage(**v) for k, v in out.items()}


# .nv.info attribute ids (EIATTR_*) that cuobjdump --dump-elf names.
_EIATTR_KPARAM_INFO, _EIATTR_FRAME_SIZE, _EIATTR_REGCOUNT = 0x17, 0x11, 0x2F
_EIATTR_NUM_BARRIERS = 0x4C
_EM_CUDA = 190
# From sm_90 on, each kernel's .nv.shared.<k> section also spans the 1 KiB that the
# hardware reserves per block (marked by a .nv.shared.reserved.* section); ptxas's
# "bytes smem" and the driver's SHARED_SIZE_BYTES leave it out, and so do we.
_RESERVED_SMEM = 1024


def _cubin_resources(d: bytes) -> dict[str, ResourceUsage]:
    if len(d) < 64 or d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
        raise CompilationError("not a 64-bit little-endian ELF CUBIN")
    if struct.unpack_from("<H", d, 18)[0] != _EM_CUDA:
        raise CompilationError("ELF file is not a CUDA CUBIN (e_machine != EM_CUDA)")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    # (name, type, flags, addr, offset, size, link, info, align, entsize)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]

    def cstr(off: int) -> str:
        return d[off:d.index(b"\0", off)].decode()

    names = [cstr(secs[shstrndx][4] + s[0]) for s in secs]
    syms: list[str] = []
    for s in secs:
        if s[1] == 2:  # SHT_SYMTAB: 24-byte Elf64_Sym entries, names in the linked strtab
            strtab = secs[s[6]][4]
            syms = [cstr(strtab + struct.unpack_from("<I", d, s[4] + 24 * j)[0])
                    for j in range(s[5] // 24)]

    def attrs(i: int):
        # Records: u8 format, u8 attribute, u16 value; format 4 (EIFMT_SVAL) takes the u16
        # as the size of a body that follows. Formats 1-3 are 4 bytes in all.
        p, end = secs[i][4], secs[i][4] + secs[i][5]
        while p + 4 <= end:
            fmt, attr, val = d[p], d[p + 1], struct.unpack_from("<H", d, p + 2)[0]
            if fmt == 4:
                yield attr, d[p + 4:p + 4 + val]
                p += 4 + val
            elif fmt in (1, 2, 3):
                yield attr, val
                p += 4
            else:
                break

    kernels = [n[len(".nv.info."):] for n in names if n.startswith(".nv.info.")]
    info: dict[str, dict] = {k: {} for k in kernels}
    reserved = any(n.startswith(".nv.shared.reserved.") for n in names)
    for i, n in enumerate(names):
        if n == ".nv.info":  # global attributes, keyed by the kernel's symbol index
            for attr, body in attrs(i):
                if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and isinstance(body, bytes) \
                        and len(body) == 8:
                    sym, val = struct.unpack("<II", body)
                    key = "registers" if attr == _EIATTR_REGCOUNT else "stack_frame_bytes"
                    if sym < len(syms) and syms[sym] in info:
                        info[syms[sym]][key] = val
        elif n.startswith(".nv.info."):
            k, sizes = n[len(".nv.info."):], {}
            for attr, body in attrs(i):
                if attr == _EIATTR_KPARAM_INFO and isinstance(body, bytes) and len(body) >= 12:
                    # u32 index, u16 ordinal, u16 offset, u32 flags: size in bits 18..31
                    _, ordinal, _, flags = struct.unpack_from("<IHHI", body)
                    sizes[ordinal] = (flags >> 18) & 0x3FFF
                elif attr == _EIATTR_NUM_BARRIERS and isinstance(body, int):
                    info[k]["barriers"] = body & 0xFF
            info[k]["param_sizes"] = tuple(sizes[o] for o in sorted(sizes))
        elif n.startswith(".text.") and n[6:] in info:
            # Up to sm_90 the barrier count sits in bits 20..26 of the code section's flags;
            # sm_100 cubins carry EIATTR_NUM_BARRIERS instead (which then wins).
            info[n[6:]].setdefault("barriers", (secs[i][2] >> 20) & 0x7F)
    for k in kernels:
        sec = f".nv.shared.{k}"
        size = secs[names.index(sec)][5] if sec in names else 0
        info[k]["shared_bytes"] = max(0, size - _RESERVED_SMEM) if reserved and size else size
    return {k: ResourceUsage(**v) for k, v in info.items()}
