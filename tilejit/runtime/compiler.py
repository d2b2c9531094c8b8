"""From a kernel's Python function to a loaded binary, and back from the disk cache.

``compile_kernel`` runs frontend → pass pipeline → target backend and returns what the disk
cache stores: raw artifacts (IR texts, LLVM IR, object code, ...) and JSON metadata.
``CompiledKernel.from_cache_entry`` rebuilds the launchable kernel from those alone, so a
process that finds a kernel on disk compiles nothing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import CompilationError
from ..frontend import compile_to_ir
from ..frontend.signature import ArgSpec, LaunchOptions
from ..knobs import knobs
from ..passes.dispatch import DispatchRecord, dispatch_log, format_log
from ..passes.pipeline import run_pipeline
from .disk_cache import CacheEntry

__all__ = ["CompiledKernel", "compile_kernel"]

TEXT_STAGES = ("ir", "lowered", "llir", "asm", "cuda", "ptx", "nki")


@dataclass(frozen=True)
class _Backend:
    """How the runtime drives one target: compile lowered IR, load what compile made."""

    register: Callable[[], None]   # imports the target package: its dispatch rules register
    compile: Callable[[Any, bool], tuple[dict[str, bytes], dict]]
    load: Callable[[dict[str, bytes], dict], Any]


def _cpu_compile(lowered, debug: bool) -> tuple[dict[str, bytes], dict]:
    from ..targets import cpu
    artifact = cpu.compile(lowered, debug=debug)
    files = {"llir": artifact.llir.encode(), "asm": artifact.asm.encode(), "obj": artifact.obj}
    return files, {"entry": artifact.entry, "backend": artifact.meta}


def _cpu_load(files: dict[str, bytes], meta: dict):
    from ..targets import cpu
    return cpu.load(cpu.CpuArtifact(llir=files["llir"].decode(), obj=files["obj"],
                                    entry=meta["entry"], meta=meta["backend"]))


def _cpu_register() -> None:
    from ..targets import cpu  # noqa: F401  (registers the CPU dispatch context and rules)


_BACKENDS = {"cpu": _Backend(_cpu_register, _cpu_compile, _cpu_load)}


def _backend(target: str) -> _Backend:
    backend = _BACKENDS.get(target)
    if backend is None:
        raise CompilationError(
            f"code generation for target {target!r} is not implemented yet; the 'cpu' target "
            "runs every kernel (pass target='cpu' or use CPU tensors)")
    return backend


def compile_kernel(fn, specs: dict[str, ArgSpec], constexprs: dict, options: LaunchOptions,
                   debug: bool) -> tuple[dict[str, bytes], dict]:
    """Compile ``fn`` for one specialization; returns (artifacts, metadata) for the cache."""
    backend = _backend(options.target)
    backend.register()
    kernel_ir = compile_to_ir(fn, specs, constexprs, options)
    dump = knobs.dump
    if "ir" in dump:
        print(f"// ----- IR of {kernel_ir.name} ----- //\n{kernel_ir}", file=sys.stderr)
    lowered, stages = run_pipeline(kernel_ir)
    records = dispatch_log(stages.kernels["dispatch"])
    if "dispatch" in dump:
        print(f"// ----- dispatch of {kernel_ir.name} ----- //\n{format_log(records)}",
              file=sys.stderr)
    if "lowered" in dump:
        print(f"// ----- lowered IR of {kernel_ir.name} ----- //\n{lowered}", file=sys.stderr)
    files, backend_meta = backend.compile(lowered, debug)
    for stage in ("llir", "asm"):
        if stage in dump and stage in files:
            print(f"// ----- {stage} of {kernel_ir.name} ----- //\n{files[stage].decode()}",
                  file=sys.stderr)
    files = {"ir": str(kernel_ir).encode(), "lowered": str(lowered).encode(), **files}
    metadata = {
        "name": kernel_ir.name,
        "target": options.target,
        "arch": options.arch,
        "runtime_params": [name for name in specs],
        "dispatch_log": [_record_json(r) for r in records],
        **backend_meta,
    }
    return files, metadata


def _record_json(record: DispatchRecord) -> dict:
    return {"primitive": record.primitive, "rule": record.rule, "shape": list(record.shape),
            "scope": record.scope, "fallback": record.fallback,
            "rejected": [list(pair) for pair in record.rejected], "line": record.line}


def _record_from_json(data: dict) -> DispatchRecord:
    return DispatchRecord(data["primitive"], data["rule"], tuple(data["shape"]), data["scope"],
                          data["fallback"], tuple(tuple(p) for p in data["rejected"]),
                          data["line"])


@dataclass
class CompiledKernel:
    """One compiled specialization: ``.asm`` (stage → text or bytes), ``.dispatch_log``."""

    name: str
    target: str
    arch: str | None
    asm: dict[str, Any]
    dispatch_log: list[DispatchRecord]
    runtime_params: tuple[str, ...]
    metadata: dict = field(repr=False)
    module: Any = field(repr=False, default=None)

    @classmethod
    def from_cache_entry(cls, entry: CacheEntry) -> "CompiledKernel":
        meta = entry.metadata
        asm = {name: data.decode() if name in TEXT_STAGES else data
               for name, data in entry.artifacts.items()}
        module = _backend(meta["target"]).load(entry.artifacts, meta)
        return cls(meta["name"], meta["target"], meta["arch"], asm,
                   [_record_from_json(r) for r in meta["dispatch_log"]],
                   tuple(meta["runtime_params"]), meta, module)

    def launch(self, grid: tuple[int, int, int], args: list, stream=None) -> None:
        self.module.launch(grid, args)

    def __getitem__(self, grid):
        """``compiled[grid](*runtime_args)``: launch this specialization directly."""
        return lambda *args: self.module.launch(grid, list(args))
