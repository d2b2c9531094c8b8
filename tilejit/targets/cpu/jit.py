"""Optimize, compile to object code, and load.

``compile(kernel)`` emits the module, runs LLVM's new-pass-manager pipeline (O3 by
default; CoroSplit in it lowers the unit coroutines) for the host CPU and its features,
and emits an object file. ``load(artifact)`` links that object file into an MCJIT engine:
the object code alone is enough, so a cache can store ``CpuArtifact.obj`` + ``meta`` and
skip compilation.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from tilejit.errors import CompilationError
from tilejit.ir.core import KernelIR
from tilejit.ir.types import TeamKind
from tilejit.knobs import knobs


_LOCK = threading.Lock()  # LLVM contexts and engines are not safe to build concurrently


def _new_lock_in_child() -> None:
    """A forked child has only the forking thread: the lock it inherited, held by that
    thread during the fork, is replaced by a free one."""
    global _LOCK
    _LOCK = threading.Lock()


# Taking the lock around fork() waits for a compile in another thread to finish, so the
# child inherits no LLVM state (nor LLVM's own mutexes) half way through an operation.
os.register_at_fork(before=lambda: _LOCK.acquire(), after_in_parent=lambda: _LOCK.release(),
                    after_in_child=_new_lock_in_child)


@dataclass(frozen=True)
class CpuArtifact:
    """Everything needed to run a compiled kernel; ``obj`` and ``meta`` suffice to load it."""

    llir: str                 # optimized LLVM IR (for dumps and inspection)
    obj: bytes = field(repr=False)  # object code for the host CPU
    entry: str = "run_ctas"   # symbol of run_ctas
    meta: dict = field(default_factory=dict)  # launcher metadata (JSON-able)

    @functools.cached_property
    def asm(self) -> str:
        """Host assembly of ``llir`` (made on first use: most launches never need it)."""
        with _LOCK:
            return target_machine(self.meta.get("opt_level", 3)).emit_assembly(
                llvm.parse_assembly(self.llir))


def new_target_machine(opt_level: int = 3) -> llvm.TargetMachine:
    """A target machine for this CPU and its features (an engine takes ownership of one,
    so each engine gets its own)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt_level)


target_machine = functools.cache(new_target_machine)  # for compiling only


@functools.cache
def host_cpu_id() -> str:
    """Names the instruction set object code is compiled for: the host CPU and a digest of
    its features. Object code only runs where this matches (a disk cache keys on it)."""
    features = llvm.get_host_cpu_features().flatten()
    return f"{llvm.get_host_cpu_name()}-{hashlib.sha256(features.encode()).hexdigest()[:16]}"


def compile(kernel: KernelIR, *, debug: bool | None = None, bounds_check: bool | None = None,
            noalias: bool = False, opt_level: int = 3,
            granularity: TeamKind | str | None = None, fp_contract: bool = True) -> CpuArtifact:
    """Compile native IR (no ``tile.*`` ops left) for this CPU.

    ``debug`` (default: ``knobs.debug``) adds bounds checks and NaN-fills fresh memory;
    ``bounds_check`` (default: ``knobs.bounds_check``) checks native element accesses;
    ``noalias`` promises that global buffers never overlap (the caller's promise: the
    runtime does not make it, as checking costs more than a launch);
    ``granularity`` forces finer simulated units than the kernel needs.
    """
    from .codegen import build_module   # the emitters: imported by compiling processes only
    from .emitter import CompileOptions
    if isinstance(granularity, str):
        granularity = TeamKind.parse(granularity)
    options = CompileOptions(debug=knobs.debug if debug is None else bool(debug),
                             bounds_check=knobs.bounds_check if bounds_check is None
                             else bool(bounds_check), noalias=noalias, opt_level=opt_level, fp_contract=fp_contract,
                             granularity=granularity)
    module, meta = build_module(kernel, options)
    with _LOCK:
        tm = target_machine(opt_level)
        try:
            parsed = llvm.parse_assembly(str(module))
            parsed.verify()
        except RuntimeError as err:
            raise CompilationError(f"the CPU backend produced invalid LLVM IR for kernel "
                                   f"{kernel.name!r}: {err}", kernel.loc) from None
        parsed.triple, parsed.data_layout = tm.triple, str(tm.target_data)
        tuning = llvm.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
        tuning.loop_vectorization = tuning.slp_vectorization = opt_level >= 2
        builder = llvm.create_pass_builder(tm, tuning)
        builder.getModulePassManager().run(parsed, builder)
        obj = tm.emit_object(parsed)
    meta["opt_level"], meta["host_cpu"] = opt_level, host_cpu_id()
    return CpuArtifact(str(parsed), obj, meta["entry"], meta)


def load_object(obj: bytes, entry: str) -> tuple[llvm.ExecutionEngine, int]:
    """Link ``obj`` into a fresh engine; return it (keep it alive) and ``entry``'s address."""
    with _LOCK:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(entry)
    if not address:
        raise CompilationError(f"object code has no symbol {entry!r}")
    return engine, address


def load(artifact: CpuArtifact):
    """A :class:`~tilejit.targets.cpu.launch.CpuModule` ready to launch."""
    if artifact.meta.get("host_cpu") != host_cpu_id():
        raise CompilationError(f"kernel {artifact.meta.get('name')!r} was compiled for CPU "
                               f"{artifact.meta.get('host_cpu')}, this one is {host_cpu_id()}: "
                               "its object code may not run here; recompile it (the kernel "
                               "cache rebuilds such an entry by itself)")
    from .launch import CpuModule
    return CpuModule(artifact)
