"""The target registry: one :class:`Backend` object per target package.

A target package ``tilejit/targets/<t>/`` holds one ``backend.py`` that defines its
:class:`Backend` and registers it (``register_backend``) when imported. The runtime finds
a target only through :func:`get_backend` and :func:`backends`: the target choice, the
device check, the cache key's arch, the text stages, the pass pipeline's additions and the
dispatch context all come from the backend object, and no other table names targets.

The packages that ship with tilejit are imported by name, on first use: a process that
launches CPU kernels from the disk cache imports neither the CUDA nor the NKI package.
docs/targets.md describes the contract.
"""
from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompilationError, LaunchError
from ..ir.core import KernelIR
from ..passes.dispatch import PER_THREAD, TEAM_ONCE, DispatchContext, register_target
from ..passes.shared_plan import register_capacity

__all__ = ["DEFAULT_TARGET", "SHIPPED_TARGETS", "Backend", "Capabilities", "Placeholder",
           "backends", "cluster_grid_error", "get_backend", "register_backend",
           "target_for_devices", "unregister_backend"]

SHIPPED_TARGETS = ("cpu", "cuda", "nki")   # packages under tilejit/targets, in this order
DEFAULT_TARGET = "cpu"   # the embedded default: every kernel runs here (SPEC §1)

Pass = Callable[[KernelIR], KernelIR]


@dataclass(frozen=True)
class Capabilities:
    """What a target's hardware offers, in the terms passes and dispatch rules ask about.

    Rules read them through the :class:`DispatchContext` made from them
    (:meth:`Backend.dispatch_context`), never by testing the target's name.
    """

    distribution: str            # TEAM_ONCE or PER_THREAD: how a team runs a tile primitive
    vector_bytes: int            # widest load, store or arithmetic one thread issues (0: none)
    registers_per_thread: int    # registers a thread may keep live (a CPU: its vector registers)
    shared_memory_per_cta: int   # bytes of on-chip memory one CTA may allocate
    max_threads_per_cta: int | None   # None: no limit (the CPU simulates its threads)
    element_loops: bool          # per-element loads and stores (the generic rules) expressible
    # team_once stores tensor memory as plain CTA memory, which element loops reach (the
    # CPU's own lowering; per thread, tensor memory is the tcgen05 ops')
    tmem_elements: bool = False
    # instruction family -> the (m, n, k) shapes of its matrix instructions
    tensor_core_shapes: Mapping[str, tuple[tuple[int, int, int], ...]] = \
        field(default_factory=dict, hash=False)
    partitions: int = 1          # on-chip memory partitions (Trainium: 128)
    accumulator_memory: int = 0  # bytes of a separate accumulator memory (Trainium's PSUM)
    static_shapes: bool = False  # its code is compiled per tensor shape (NKI): the runtime
    #                              specializes every tensor argument's sizes

    def __post_init__(self):
        if self.distribution not in (TEAM_ONCE, PER_THREAD):
            raise ValueError(f"distribution must be {TEAM_ONCE} or {PER_THREAD}, "
                             f"got {self.distribution!r}")


class Backend(abc.ABC):
    """How the runtime drives one target: compile lowered IR, load what compile made, launch.

    ``arch_id(arch)`` names what the binary is specific to (part of the cache key).
    ``launchers(module, arguments)`` returns ``launch(grid, records)`` (the default stream:
    on CUDA, torch's current one) and ``launch_on_stream(grid, records, stream)``, taking one
    launch record per runtime argument as ``arguments.facts`` makes them (``(address,
    *shape, *strides)`` for a tensor, the value for a scalar) and trusting them; a launch
    calls them directly, so they should be the module's own methods where the target allows.
    ``arguments`` (name -> value, or None) are those of a launch whose signature the
    launchers serve: a target binds what the signature fixes about them (the CUDA device of
    the tensors); without them it decides at each launch (the current device).
    """

    name: str                          # the ``target=`` name
    device: str | None = None          # torch device type of its tensors (None: launches none)
    text_stages: tuple[str, ...] = ()  # stages ``compile`` stores as text, in the order made
    # stages made from the loaded module only when asked for (``CompiledKernel.asm[stage]``)
    derived_stages: Mapping[str, Callable[[Any], str]] = {}
    passes: tuple[tuple, ...] = ()   # (name, pass) after the generic pipeline, in order, or
    # (name, pass, before): just before the generic pass named ``before``

    def __init__(self):
        self._context: DispatchContext | None = None

    def __repr__(self) -> str:
        return f"<tilejit backend {self.name!r}>"

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        ...

    def dispatch_context(self) -> DispatchContext:
        """What dispatch may ask of this target, read off its capabilities."""
        c = self.capabilities
        return DispatchContext(self.name, distribution=c.distribution,
                               vector_bytes=c.vector_bytes, registers=c.registers_per_thread,
                               element_loops=c.element_loops, tmem_elements=c.tmem_elements,
                               tensor_core_shapes=dict(c.tensor_core_shapes))

    def register(self) -> DispatchContext:
        """Register the dispatch context and the target's own rule families, once; returns
        the context. Only compiling needs them: loading a cached binary skips this."""
        if self._context is None:
            context = register_target(self.dispatch_context())
            register_capacity(self.name, self.capabilities.shared_memory_per_cta)
            self.import_rules()
            self._context = context
        return self._context

    def import_rules(self) -> None:
        """Import the target's instruction-family modules (they register themselves)."""

    def machine_id(self) -> str | None:
        """This machine's hardware of this target, for autotuning records (None: none)."""
        return None

    @abc.abstractmethod
    def arch_id(self, arch: str | None) -> str:
        ...

    @abc.abstractmethod
    def compile(self, lowered: KernelIR, debug: bool) -> tuple[dict[str, bytes], dict]:
        """(files, metadata) from native IR: what the disk cache stores."""

    @abc.abstractmethod
    def load(self, files: dict[str, bytes], meta: dict) -> Any:
        """The launchable module, from what ``compile`` returned (read back from disk)."""

    @abc.abstractmethod
    def launchers(self, module: Any,
                  arguments: Mapping[str, Any] | None = None) -> tuple[Callable, Callable]:
        ...


class Placeholder(Backend):
    """A target whose hardware is described but whose code generation does not exist yet:
    every step that would need it raises a CompilationError saying so."""

    def _not_implemented(self) -> CompilationError:
        return CompilationError(
            f"code generation for target {self.name!r} is not implemented yet; the "
            f"{DEFAULT_TARGET!r} target runs every kernel (pass target={DEFAULT_TARGET!r} "
            "or use CPU tensors)")

    def register(self) -> DispatchContext:
        raise self._not_implemented()

    def arch_id(self, arch: str | None) -> str:
        raise self._not_implemented()

    def compile(self, lowered: KernelIR, debug: bool) -> tuple[dict[str, bytes], dict]:
        raise self._not_implemented()

    def load(self, files: dict[str, bytes], meta: dict) -> Any:
        raise self._not_implemented()

    def launchers(self, module: Any,
                  arguments: Mapping[str, Any] | None = None) -> tuple[Callable, Callable]:
        raise self._not_implemented()


# --------------------------------------------------------------------------- registry
_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Make ``backend`` the one of its target (a package's backend.py does this on import)."""
    _BACKENDS[backend.name] = backend
    return backend


def unregister_backend(backend: Backend) -> None:
    """Forget ``backend`` (a test's own target, once the test is done)."""
    if _BACKENDS.get(backend.name) is not backend:
        raise ValueError(f"{backend!r} is not the registered backend of {backend.name!r}")
    del _BACKENDS[backend.name]


def get_backend(name: str) -> Backend:
    """The backend of target ``name``; a LaunchError listing the registered ones if none."""
    backend = _BACKENDS.get(name)
    if backend is None and name in SHIPPED_TARGETS:
        importlib.import_module(f"{__package__}.{name}.backend")
        backend = _BACKENDS[name]
    if backend is None:
        known = ", ".join(b.name for b in backends())
        raise LaunchError(f"unknown target {name!r}; the registered targets are {known}")
    return backend


def backends() -> tuple[Backend, ...]:
    """Every registered backend: the shipped ones in ``SHIPPED_TARGETS`` order, then others
    in the order they registered (imports every shipped target package)."""
    shipped = tuple(get_backend(name) for name in SHIPPED_TARGETS)
    return shipped + tuple(b for b in _BACKENDS.values() if b.name not in SHIPPED_TARGETS)


def target_for_devices(devices: set[str]) -> str:
    """The target of tensors on ``devices`` (torch device types): an accelerator's when
    one holds them, else the default target (the other targets are imported only then)."""
    accelerators = devices - {get_backend(DEFAULT_TARGET).device}
    if accelerators:
        for backend in backends():
            if backend.device in accelerators:
                return backend.name
    return DEFAULT_TARGET


def cluster_grid_error(grid: tuple[int, int, int], cluster: tuple[int, int, int]) -> str | None:
    """Why a launch of ``grid`` CTAs cannot run in clusters of ``cluster`` (a dimension it
    does not split into whole clusters), or None: every target refuses such a launch, as
    CUDA does, so ``cta_id_in_cluster`` means the same everywhere."""
    for axis, (extent, size) in enumerate(zip(grid, cluster)):
        if extent % size:
            return (f"grid {tuple(grid)} is not a multiple of the cluster {tuple(cluster)}: "
                    f"{extent} CTAs in {'xyz'[axis]} do not split into clusters of {size}")
    return None
