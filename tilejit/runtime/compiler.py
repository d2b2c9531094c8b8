"""From a kernel's Python function to a loaded binary, and back from the disk cache.

``compile_kernel`` runs frontend → pass pipeline → target backend and returns what the disk
cache stores: raw artifacts (IR texts, LLVM IR, object code, ...) and JSON metadata.
``CompiledKernel.from_cache_entry`` rebuilds the launchable kernel from those alone, so a
process that finds a kernel on disk compiles nothing.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from typing import Any

from ..errors import SourceLocation
from ..frontend import compile_to_ir
from ..frontend.signature import ArgSpec, LaunchOptions
from ..knobs import knobs
from ..passes.dispatch import DispatchRecord, dispatch_log, format_log
from ..passes.effects import written_parameters
from ..passes.pipeline import run_pipeline
from ..targets.backend import backends, get_backend
from .arguments import check_written
from .disk_cache import CacheEntry

__all__ = ["CompiledKernel", "compile_kernel"]

IR_STAGES = ("ir", "lowered")   # every target stores these texts; its backend adds its own


def target_arch(target: str, arch: str | None) -> str:
    """What a binary for ``target`` is specific to, for the cache key."""
    return get_backend(target).arch_id(arch)


def machine_identity() -> str:
    """Each target's hardware on this machine (``cpu:<host>``, and the current GPU when
    torch has started CUDA), for autotuning records."""
    ids = ((backend.name, backend.machine_id()) for backend in backends())
    return ",".join(f"{name}:{machine}" for name, machine in ids if machine is not None)


_collector_lock = threading.Lock()
_collector_state = {"compiles": 0, "was_enabled": False}


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while compiles run, back as it was when the last
    one in flight ends. A compile builds and drops thousands of IR ops, each a cycle with
    its result values: the collector's passes over them were an eighth of the Python side of
    a cold CUDA compile (BENCHMARKS.md); what a compile dropped is collected afterwards."""
    with _collector_lock:
        if _collector_state["compiles"] == 0:
            _collector_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _collector_state["compiles"] += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_state["compiles"] -= 1
            if _collector_state["compiles"] == 0 and _collector_state["was_enabled"]:
                gc.enable()


def _forget_compiles_in_flight() -> None:
    # A child forked while another thread compiled runs none of its compiles: collect again.
    global _collector_lock
    _collector_lock = threading.Lock()
    if _collector_state["compiles"]:
        _collector_state["compiles"] = 0
        if _collector_state["was_enabled"]:
            gc.enable()


os.register_at_fork(after_in_child=_forget_compiles_in_flight)


def compile_kernel(fn, specs: dict[str, ArgSpec], constexprs: dict, options: LaunchOptions,
                   debug: bool) -> tuple[dict[str, bytes], dict]:
    """Compile ``fn`` for one specialization; returns (artifacts, metadata) for the cache.

    Stages named in ``TILEJIT_DUMP`` are printed as soon as they exist, so a failing stage
    still shows the ones before it.
    """
    with collector_paused():
        return _compile(fn, specs, constexprs, options, debug)


def _compile(fn, specs: dict[str, ArgSpec], constexprs: dict, options: LaunchOptions,
             debug: bool) -> tuple[dict[str, bytes], dict]:
    backend = get_backend(options.target)
    backend.register()
    dump = knobs.dump
    kernel_ir = compile_to_ir(fn, specs, constexprs, options)
    _print_stage(dump, "ir", kernel_ir.name, kernel_ir)
    lowered, stages = run_pipeline(kernel_ir, target_passes=backend.passes)
    records = dispatch_log(stages.kernels["dispatch"])
    if "dispatch" in dump:
        _print_stage(dump, "dispatch", kernel_ir.name, format_log(records))
    _print_stage(dump, "lowered", kernel_ir.name, lowered)
    files, backend_meta = backend.compile(lowered, debug)
    for stage in backend.text_stages:
        if stage in files:
            _print_stage(dump, stage, kernel_ir.name, files[stage].decode())
    files = {"ir": str(kernel_ir).encode(), "lowered": str(lowered).encode(), **files}
    metadata = {
        "name": kernel_ir.name,
        "target": options.target,
        "arch": options.arch,
        "runtime_params": list(specs),
        "written_params": written_parameters(lowered),
        "dispatch_log": [_record_json(r) for r in records],
        # bytes of shared memory per CTA, as planned (all static: shared shapes are)
        "shared_bytes": lowered.attrs["shared_bytes"] or 0,
        **backend_meta,
    }
    return files, metadata


def _print_stage(dump: frozenset[str], stage: str, kernel: str, text: Any) -> None:
    if stage in dump:
        print(f"// ----- {stage} of {kernel} ----- //\n{text}", file=sys.stderr)


def _record_json(record: DispatchRecord) -> dict:
    return asdict(record)   # tuples become lists


def _record_from_json(data: dict) -> DispatchRecord:
    return DispatchRecord(**{**data, "shape": tuple(data["shape"]),
                             "rejected": tuple(tuple(p) for p in data["rejected"])})


@dataclass
class CompiledKernel:
    """One compiled specialization: ``.asm`` (stage → text or bytes), ``.dispatch_log``.

    ``launch(grid, records)`` / ``launch_on_stream(grid, records, stream)`` run it with the
    launch records of the runtime arguments (``runtime_params``; see ``Backend``) and a
    checked 3-int grid, on the target's current device; ``launchers_for(bound)`` are the
    same bound to the device of the arguments ``bound``. ``compiled[grid](*runtime_args)``
    checks the arguments first.
    """

    name: str
    target: str
    arch: str | None
    asm: dict[str, Any]
    dispatch_log: list[DispatchRecord]
    runtime_params: tuple[str, ...]
    metadata: dict = field(repr=False)
    module: Any = field(repr=False, default=None)
    launch: Callable = field(repr=False, default=None)
    launch_on_stream: Callable = field(repr=False, default=None)

    @classmethod
    def from_cache_entry(cls, entry: CacheEntry) -> CompiledKernel:
        meta = entry.metadata
        backend = get_backend(meta["target"])
        module = backend.load(entry.artifacts, meta)
        text = (*IR_STAGES, *backend.text_stages)
        asm = _Stages({name: data.decode() if name in text else data
                       for name, data in entry.artifacts.items()}, backend.derived_stages,
                      module)
        return cls(meta["name"], meta["target"], meta["arch"], asm,
                   [_record_from_json(r) for r in meta["dispatch_log"]],
                   tuple(meta["runtime_params"]), meta, module, *backend.launchers(module))

    def launchers_for(self, bound: dict) -> tuple[Callable, Callable]:
        """``launch`` and ``launch_on_stream`` for arguments of the signature of ``bound``
        (name -> value): the backend binds what that signature fixes (a CUDA device)."""
        arguments = {name: bound[name] for name in self.runtime_params}
        return get_backend(self.target).launchers(self.module, arguments)

    def dump(self, stages: frozenset[str]) -> None:
        """Print the stages named (as ``TILEJIT_DUMP`` does when compiling)."""
        _print_stage(stages, "ir", self.name, self.asm["ir"])
        _print_stage(stages, "dispatch", self.name, format_log(self.dispatch_log))
        for stage in ("lowered", *get_backend(self.target).text_stages):
            if stage in stages and self.asm.has(stage):
                _print_stage(stages, stage, self.name, self.asm[stage])

    @property
    def written_params(self) -> tuple[str, ...]:
        """The runtime parameters the kernel writes (a read-only array cannot take them)."""
        return tuple(self.metadata["written_params"])

    def check_writable(self, bound: dict, loc: SourceLocation | None = None) -> None:
        """A LaunchError if an array bound to a parameter the kernel writes cannot take the
        writes: read-only, or with elements that may share an address (``check_written``)."""
        check_written(bound, self.written_params, self.name, loc)

    def __getitem__(self, grid):
        """``compiled[grid](*runtime_args)``: launch this specialization directly."""
        def launch(*args):
            self.check_writable(dict(zip(self.runtime_params, args)), self.module.location)
            self.module.launch(grid, list(args))
        return launch


class _Stages(dict):
    """Stage name -> text (or bytes, for binaries). Stages the backend derives on request
    (the CPU's host assembly) appear on first access: ``asm["asm"]``."""

    def __init__(self, stored: dict, derived: dict[str, Callable[[Any], str]], module: Any):
        super().__init__(stored)
        self._derived, self._module = derived, module

    def has(self, stage: str) -> bool:
        return stage in self or stage in self._derived

    def __missing__(self, stage: str) -> str:
        if stage not in self._derived:
            raise KeyError(stage)
        text = self[stage] = self._derived[stage](self._module)
        return text
