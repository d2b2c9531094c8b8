"""``@tj.kernel``: the object users decorate, compile and launch.

A launch binds the call's arguments (positional names and defaults are read once, at
decoration), checks them (``LaunchError`` before anything runs), finds the compiled binary
through a cheap per-kernel signature tuple (the full cache key is only computed on a miss),
and launches it. Compilation is frontend → pass pipeline → target backend; every stage's
text is kept in ``CompiledKernel.asm``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import LaunchError, TilejitError
from ..frontend.dependencies import find_dependencies, is_constexpr_annotation
from ..frontend.signature import ArgSpec, LaunchOptions
from ..knobs import knobs
from . import arguments
from .cache import KernelCache
from .cache_key import CacheKeyParts, make_key, source_hash
from .compiler import CompiledKernel, compile_kernel

__all__ = ["Kernel", "kernel", "TensorSpec", "CompiledKernel"]

LAUNCH_OPTIONS = ("num_warps", "cluster", "stream", "target", "arch")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument for ``kernel.compile`` without data: shape, dtype, strides."""

    shape: tuple
    dtype: Any
    strides: tuple | None = None
    device: str = "cpu"
    aligned16: bool = True

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.strides is None:
            strides, step = [], 1
            for dim in reversed(self.shape):
                strides.append(step)
                step *= dim
            object.__setattr__(self, "strides", tuple(reversed(strides)))
        object.__setattr__(self, "strides", tuple(self.strides))


@dataclass
class _Params:
    """The kernel's parameters as read once from its signature."""

    names: tuple[str, ...]
    defaults: dict[str, Any]
    constexprs: frozenset[str]
    do_not_specialize: frozenset[str] = field(default_factory=frozenset)


class Kernel:
    """A ``@tj.kernel`` function. ``kernel[grid](*args, **meta)`` launches it."""

    def __init__(self, fn: Callable, *, debug: bool | None = None,
                 do_not_specialize: tuple[str, ...] = ()):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.debug = debug
        signature = inspect.signature(fn)
        unknown = set(do_not_specialize) - set(signature.parameters)
        if unknown:
            raise TilejitError(f"do_not_specialize names unknown parameters {sorted(unknown)} "
                               f"of kernel {fn.__name__}")
        self.params = _Params(
            names=tuple(signature.parameters),
            defaults={n: p.default for n, p in signature.parameters.items()
                      if p.default is not inspect.Parameter.empty},
            constexprs=frozenset(n for n, p in signature.parameters.items()
                                 if is_constexpr_annotation(p.annotation, fn.__globals__)),
            do_not_specialize=frozenset(do_not_specialize))
        self.arg_names = list(self.params.names)
        self._cache: KernelCache[CompiledKernel] = KernelCache()
        self._fast: dict[tuple, CompiledKernel] = {}
        self._identity: str | None = None

    def __repr__(self) -> str:
        return f"<tj.kernel {self.__name__}>"

    # -- launching ------------------------------------------------------------------------
    def __getitem__(self, grid) -> Callable[..., None]:
        def launch(*args, **kwargs):
            return self.run(grid, args, kwargs)
        return launch

    def run(self, grid, args: tuple, kwargs: dict) -> None:
        bound, meta = self._bind(args, kwargs)
        compiled = self._compiled_for(bound, meta)
        grid = arguments.resolve_grid(grid, {**bound, **meta}, self.__name__)
        compiled.launch(grid, [bound[n] for n in compiled.runtime_params],
                        stream=meta.get("stream"))

    def compile(self, *args, target: str | None = None, arch: str | None = None,
                **meta) -> CompiledKernel:
        """Compile for these arguments (tensors, ``TensorSpec``s, scalars) without launching."""
        bound, meta = self._bind(args, {**meta, "target": target, "arch": arch})
        return self._compiled_for(bound, meta)

    warmup = compile

    def cache_info(self):
        return self._cache.info()

    def clear_memory_cache(self) -> None:
        self._fast.clear()
        self._cache.clear_memory_cache()

    def cache_identity(self) -> str:
        """Stable text naming this kernel's code (source + called functions)."""
        if self._identity is None:
            deps = find_dependencies(self.fn)
            parts = [self.fn.__qualname__, source_hash(self.fn)]
            parts += [source_hash(f.fn) for f in deps.functions]
            self._identity = ":".join(parts)
        return self._identity

    # -- binding and lookup -----------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> tuple[dict, dict]:
        names = self.params.names
        if len(args) > len(names):
            raise LaunchError(f"{self.__name__}() takes {len(names)} arguments but "
                              f"{len(args)} were given")
        meta = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        bound = dict(zip(names, args))
        for name in names[len(args):]:
            if name in kwargs:
                bound[name] = kwargs.pop(name)
            elif name in self.params.defaults:
                bound[name] = self.params.defaults[name]
            else:
                raise LaunchError(f"{self.__name__}() is missing argument {name!r}")
        if kwargs:
            raise LaunchError(f"{self.__name__}() got unexpected keyword arguments "
                              f"{sorted(kwargs)}")
        return bound, meta

    def _compiled_for(self, bound: dict, meta: dict) -> CompiledKernel:
        target = arguments.choose_target(bound, meta.get("target"), self.__name__)
        fast_key = (target, meta.get("arch"), meta.get("num_warps", 4),
                    tuple(meta.get("cluster", (1, 1, 1))), knobs.debug, knobs.always_compile,
                    *(arguments.fast_signature(bound[n], n in self.params.constexprs)
                      for n in self.params.names))
        compiled = self._fast.get(fast_key)
        if compiled is not None:
            return compiled
        compiled = self._compile_new(bound, meta, target)
        if not knobs.always_compile:
            self._fast[fast_key] = compiled
        return compiled

    def _compile_new(self, bound: dict, meta: dict, target: str) -> CompiledKernel:
        specs: dict[str, ArgSpec] = {}
        constexprs: dict[str, Any] = {}
        for name in self.params.names:
            value = bound[name]
            if name in self.params.constexprs:
                constexprs[name] = value
            else:
                specs[name] = arguments.arg_spec_of(
                    value, name, self.__name__,
                    specialize=name not in self.params.do_not_specialize)
        arguments.check_devices(bound, target, self.__name__)
        options = LaunchOptions(num_warps=meta.get("num_warps", 4),
                                cluster=meta.get("cluster", (1, 1, 1)), target=target,
                                arch=meta.get("arch"))
        debug = knobs.debug if self.debug is None else self.debug
        deps = find_dependencies(self.fn)
        key = make_key(CacheKeyParts(
            kernel_source_hash=source_hash(self.fn),
            called_function_hashes=tuple((f.fn.__qualname__, source_hash(f.fn))
                                         for f in deps.functions),
            constexprs=tuple(sorted((k, arguments.json_safe(v)) for k, v in constexprs.items())),
            globals_read=tuple(sorted((k, arguments.json_safe(v))
                                      for k, v in deps.globals.items())),
            arg_specs=tuple((n, arguments.spec_key(s)) for n, s in specs.items()),
            options=(("num_warps", options.num_warps), ("cluster", list(options.cluster))),
            target=target, arch=options.arch or "", debug=bool(debug)))
        return self._cache.get_or_compile(
            key,
            lambda: compile_kernel(self.fn, specs, constexprs, options, debug),
            CompiledKernel.from_cache_entry)


def kernel(fn: Callable | None = None, *, debug: bool | None = None,
           do_not_specialize: tuple[str, ...] = ()):
    """Decorator: ``@tj.kernel`` or ``@tj.kernel(debug=True, do_not_specialize=("n",))``."""
    if fn is None:
        return lambda f: Kernel(f, debug=debug, do_not_specialize=do_not_specialize)
    return Kernel(fn, debug=debug, do_not_specialize=do_not_specialize)
