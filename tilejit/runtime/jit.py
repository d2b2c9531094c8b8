"""``@tj.kernel``: the object users decorate, compile and launch.

``kernel[grid](*args, **meta)`` calls a launcher generated once per kernel, whose Python
signature is the kernel's own (plus keyword-only launch options), so Python itself binds the
arguments. The launcher builds a tuple of cheap per-argument signatures (see
``arguments.facts_of``), looks it up in one dict, and hands the arguments' launch records
(made with the signatures) to the backend. Only when that lookup misses does the slow path
run: the ``LaunchError`` checks, the full cache key (``cache_key.make_key``), the memory and
disk caches, and the compiler.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import LaunchError, SourceLocation, TilejitError
from ..frontend.dependencies import (find_dependencies, is_cache_constant,
                                    is_constexpr_annotation, namespace_name)
from ..frontend.language import DeviceFunction, constexpr
from ..frontend.signature import ArgSpec, LaunchOptions
from ..frontend.source import function_source
from ..knobs import knobs
from ..targets.backend import get_backend
from . import arguments
from .arguments import TensorSpec
from .cache import CacheInfo, KernelCache, register_kernel
from .cache_key import (CacheKeyParts, canonical_json, compiler_fingerprint, make_key,
                        source_hash)
from .compiler import CompiledKernel, compile_kernel, machine_identity, target_arch
from .launcher import (DEFAULT_CLUSTER, DEFAULT_NUM_WARPS, LAUNCH_OPTIONS, MISSING, PREFIX,
                       FastEntry, generate_launcher, reserved_names)

__all__ = ["Kernel", "kernel", "TensorSpec", "CompiledKernel"]



class Kernel:
    """A ``@tj.kernel`` function. ``kernel[grid](*args, **meta)`` launches it."""

    def __init__(self, fn: Callable, *, debug: bool | None = None,
                 do_not_specialize: tuple[str, ...] = (), simt: bool | None = None,
                 auto_sync: bool = True):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.debug = debug
        if not isinstance(auto_sync, bool):
            raise TilejitError(f"auto_sync must be True or False, got {auto_sync!r}")
        self.auto_sync = auto_sync   # insert the barriers sync-hazards finds missing
        self.simt = simt   # None: the launch option, else knobs.simt
        parameters = inspect.signature(fn).parameters
        self.arg_names = list(parameters)
        self.defaults = {n: p.default for n, p in parameters.items()
                         if p.default is not inspect.Parameter.empty}
        self.constexprs = frozenset(n for n, p in parameters.items()
                                    if is_constexpr_annotation(p.annotation, fn.__globals__))
        self.runtime_candidates = tuple(n for n in self.arg_names if n not in self.constexprs)
        self.do_not_specialize = frozenset(do_not_specialize)
        self._cache: KernelCache[CompiledKernel] = KernelCache()
        self._fast: dict[tuple, FastEntry] = {}
        self._fast_hits = [0]
        self._launcher: Callable | None = None
        self._launch = self._write_launcher_and_launch
        self._check_parameters(parameters)
        register_kernel(self)

    def __repr__(self) -> str:
        return f"<tj.kernel {self.__qualname__}>"

    def __call__(self, *args, **kwargs):
        raise LaunchError(f"{self.__name__} is a kernel: launch it with "
                          f"{self.__name__}[grid](...)", self._location())

    # -- launching ------------------------------------------------------------------------
    def __getitem__(self, grid) -> Callable[..., None]:
        return functools.partial(self._launch, grid)

    def _write_launcher_and_launch(self, grid, *args, **kwargs):
        """The first launch generates the launcher: by then torch is imported if tensors are
        passed, and the launcher inlines their facts. (A ``kernel[grid]`` taken before
        that keeps calling here, one call more than the launcher itself.)"""
        if self._launcher is None:
            self._launcher = self._launch = generate_launcher(self)
        return self._launcher(grid, *args, **kwargs)

    def run(self, grid, args: tuple, kwargs: dict) -> None:
        """The kernel protocol's launch (``@tj.autotune`` and ``@tj.heuristics`` call it)."""
        return self._launch(grid, *args, **kwargs)

    def compile(self, *args, target: str | None = None, arch: str | None = None,
                **meta) -> CompiledKernel:
        """Compile for these arguments (tensors, ``TensorSpec``s, scalars) without launching."""
        bound, options = self._bind(args, {**meta, "target": target, "arch": arch})
        try:
            return self._compiled_for(bound, options)[0]
        except TilejitError as err:
            raise err.with_location(self._location()).with_traceback(None) from None

    warmup = compile

    def cache_info(self) -> CacheInfo:
        """Launches served from memory, binaries loaded from disk, compiles, binaries held."""
        info = self._cache.info()
        return CacheInfo(info.memory_hits + self._fast_hits[0], info.disk_hits, info.compiles,
                         info.size)

    def compiled_kernels(self) -> list[CompiledKernel]:
        """The binaries this kernel holds in memory, oldest first."""
        return list({id(e.compiled): e.compiled for e in self._fast.values()}.values())

    def clear_memory_cache(self) -> None:
        self._fast.clear()
        self._cache.clear_memory_cache()

    def cache_identity(self) -> str:
        """This kernel's code (source, called functions, constants read), the compiler that
        builds it and the machine it runs on: autotuning results are stored under it."""
        deps = find_dependencies(self.fn)
        return canonical_json({
            "kernel": self.fn.__qualname__, "compiler": compiler_fingerprint(),
            "source": _source_hash(self.fn),
            "functions": [[f.fn.__qualname__, _source_hash(f.fn)] for f in deps.functions],
            "globals": sorted([k, arguments.json_safe(v)] for k, v in deps.globals.items()),
            "target": knobs.target, "machine": machine_identity()}, "cache identity")

    # -- the slow path ----------------------------------------------------------------------
    def _miss(self, key: tuple, values: tuple, num_warps, cluster, target, arch,
              simt=None) -> FastEntry:
        """Called by the launcher when its signature lookup misses (or found stale code)."""
        bound = dict(zip(self.arg_names, values))
        options = {"num_warps": num_warps, "cluster": cluster, "target": target, "arch": arch,
                   "simt": simt}
        try:
            compiled, watch = self._compiled_for(bound, options)
            compiled.check_writable(bound)
        except TilejitError as err:   # shown at the kernel's definition, from the user's frame
            raise err.with_location(self._location()).with_traceback(None) from None
        entry = FastEntry(compiled, watch, self.runtime_candidates, bound)
        if not knobs.always_compile and _hashable(key):
            self._fast[key] = entry
        return entry

    def _compiled_for(self, bound: dict, options: dict) -> tuple[CompiledKernel, tuple]:
        name = self.__name__
        target = arguments.choose_target(bound, options.get("target"), knobs.target, name)
        specs: dict[str, ArgSpec] = {}
        constexprs: dict[str, Any] = {}
        for param, value in bound.items():
            if param in self.constexprs or isinstance(value, constexpr):
                constexprs[param] = value.value if isinstance(value, constexpr) else value
            else:
                try:
                    specs[param] = arguments.arg_spec_of(
                        value, param, name, specialize=param not in self.do_not_specialize,
                        static_shape=get_backend(target).capabilities.static_shapes)
                except LaunchError as err:
                    raise err.with_location(self._location(param)) from None
        arguments.check_devices(bound, target, name)
        launch_options = _launch_options(options, target, name, self.simt, self.auto_sync)
        debug = knobs.debug if self.debug is None else self.debug
        deps = find_dependencies(self.fn)
        watch = _dependency_watch(self.fn, deps)
        key = make_key(CacheKeyParts(
            kernel_source_hash=_source_hash(self.fn),
            called_function_hashes=tuple((f.fn.__qualname__, _source_hash(f.fn))
                                         for f in deps.functions),
            constexprs=tuple((k, arguments.json_safe(v)) for k, v in constexprs.items()),
            globals_read=tuple((k, arguments.json_safe(v)) for k, v in deps.globals.items()),
            arg_specs=tuple((n, arguments.spec_key(s)) for n, s in specs.items()),
            options=(("num_warps", launch_options.num_warps),
                     ("cluster", list(launch_options.cluster)),
                     ("bounds_check", knobs.bounds_check),   # read by the CPU target
                     ("simt", launch_options.simt),
                     ("auto_sync", launch_options.auto_sync)),
            target=target, arch=target_arch(target, launch_options.arch), debug=bool(debug)))
        compiled_now = []

        def compile() -> tuple[dict[str, bytes], dict]:
            compiled_now.append(True)
            return compile_kernel(self.fn, specs, constexprs, launch_options, debug)

        def load(entry) -> CompiledKernel:
            compiled = CompiledKernel.from_cache_entry(entry)
            if not compiled_now:   # compiling printed its stages as it went
                compiled.dump(knobs.dump)
            return compiled

        return self._cache.get_or_compile(key, compile, load), watch

    def _bind(self, args: tuple, kwargs: dict) -> tuple[dict, dict]:
        """Python's binding rules, as LaunchErrors naming the argument (no inspect.bind)."""
        names = self.arg_names
        if len(args) > len(names):
            raise LaunchError(f"{self.__name__}() takes {len(names)} arguments "
                              f"({', '.join(names)}) but {len(args)} were given",
                              self._location())
        kwargs = dict(kwargs)
        options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        bound = dict(zip(names, args))
        for name in names[len(args):]:
            if name in kwargs:
                bound[name] = kwargs.pop(name)
            elif name in self.defaults:
                bound[name] = self.defaults[name]
            else:
                raise LaunchError(f"{self.__name__}() is missing argument {name!r}",
                                  self._location(name))
        twice = sorted(set(kwargs) & set(names))
        if twice:
            raise LaunchError(f"{self.__name__}() got multiple values for argument "
                              f"{twice[0]!r}", self._location(twice[0]))
        if kwargs:
            raise LaunchError(f"{self.__name__}() got unexpected keyword arguments "
                              f"{sorted(kwargs)}; it takes {', '.join(names)} and the launch "
                              f"options {', '.join(LAUNCH_OPTIONS)}", self._location())
        return bound, options

    def _bad_call(self, extra: tuple, unknown: dict, bound: dict) -> None:
        """The launcher found arguments that do not bind: say which."""
        if extra:
            raise LaunchError(f"{self.__name__}() takes {len(self.arg_names)} arguments "
                              f"({', '.join(self.arg_names)}) but "
                              f"{len(self.arg_names) + len(extra)} were given", self._location())
        if unknown:
            raise LaunchError(f"{self.__name__}() got unexpected keyword arguments "
                              f"{sorted(unknown)}; it takes {', '.join(self.arg_names)} and the "
                              f"launch options {', '.join(LAUNCH_OPTIONS)}", self._location())
        missing = next(name for name, value in bound.items() if value is MISSING)
        raise LaunchError(f"{self.__name__}() is missing argument {missing!r}",
                          self._location(missing))

    def _bad_argument(self, error: Exception, bound: dict) -> None:
        """An argument's facts could not be read (the launcher caught ``error``): say which
        argument, as a LaunchError."""
        for name in self.runtime_candidates:
            value = bound[name]
            try:
                arguments.facts(type(value), arguments.facts_of)(value)
            except Exception as err:   # noqa: BLE001  (whatever the argument's type raised)
                raise LaunchError(f"{self.__name__}: argument {name!r} cannot be passed to a "
                                  f"kernel: {type(err).__name__}: {err}",
                                  self._location(name)) from None
        raise error

    def _resolve_grid(self, grid, meta: dict) -> tuple[int, int, int]:
        """``arguments.resolve_grid``, its errors shown at the kernel's definition (the
        launcher calls it for a grid it has not seen checked)."""
        try:
            return arguments.resolve_grid(grid, meta, self.__name__)
        except LaunchError as err:
            raise err.with_location(self._location()).with_traceback(None) from None

    def _check_parameters(self, parameters) -> None:
        """Refuse, at the parameter, what the launcher could not bind: ``*args`` and the like,
        and names the launcher uses itself (its launch options, locals and globals)."""
        unknown = self.do_not_specialize - set(parameters)
        if unknown:
            raise TilejitError(f"do_not_specialize names unknown parameters {sorted(unknown)} "
                               f"of kernel {self.__name__}", self._location())
        reserved = reserved_names(self)
        for name, p in parameters.items():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise TilejitError(f"kernel {self.__name__}: parameter {name!r} must be an "
                                   "ordinary parameter (no *args, **kwargs or positional-only "
                                   "markers)", self._location(name))
            if name in reserved or name.startswith(PREFIX):
                role = "a launch option" if name in LAUNCH_OPTIONS else "used by the launcher"
                raise TilejitError(f"kernel {self.__name__}: parameter name {name!r} is "
                                   f"reserved ({role}); rename the parameter",
                                   self._location(name))

    def _location(self, param: str | None = None) -> SourceLocation | None:
        """Where the kernel (or one of its parameters) is defined, for error excerpts."""
        return definition_location(self.fn, param)


def kernel(fn: Callable | None = None, *, debug: bool | None = None,
           do_not_specialize: tuple[str, ...] = (), simt: bool | None = None,
           auto_sync: bool = True):
    """Decorator: ``@tj.kernel`` or ``@tj.kernel(debug=True, do_not_specialize=("n",))``;
    ``simt=True`` runs the per-thread lowering (a launch's ``simt=`` beats it, and it beats
    ``TILEJIT_SIMT``); ``auto_sync=False`` makes a missing barrier a compile error instead of
    inserting it (docs/lowering.md "Synchronization hazards")."""
    options = dict(debug=debug, do_not_specialize=do_not_specialize, simt=simt,
                   auto_sync=auto_sync)
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)


def definition_location(fn: Callable, param: str | None = None) -> SourceLocation | None:
    """Where ``fn`` (or its parameter ``param``) is defined, for error excerpts; None when
    it has no source file (defined in a REPL)."""
    try:
        source = function_source(fn)
    except TilejitError:
        return None
    args = source.node.args
    for arg in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg):
        if arg is not None and arg.arg == param:
            return source.loc(arg)
    return source.loc(source.node)


def _launch_options(options: dict, target: str, kernel: str, kernel_simt: bool | None = None,
                    auto_sync: bool = True) -> LaunchOptions:
    num_warps = options.get("num_warps")
    simt = options.get("simt")
    simt = (knobs.simt if kernel_simt is None else kernel_simt) if simt is None else simt
    if not isinstance(simt, bool):
        raise LaunchError(f"{kernel}: simt must be True or False, got {simt!r}")
    cluster = options.get("cluster")
    if not isinstance(cluster, (tuple, list, type(None))):
        cluster = (cluster,)
    if isinstance(num_warps, bool):
        raise LaunchError(f"{kernel}: num_warps must be a positive int, got {num_warps!r}")
    try:
        return LaunchOptions(num_warps=DEFAULT_NUM_WARPS if num_warps is None else num_warps,
                             cluster=DEFAULT_CLUSTER if cluster is None else tuple(cluster),
                             target=target, arch=options.get("arch"), simt=simt,
                             auto_sync=auto_sync)
    except (TypeError, ValueError) as err:
        raise LaunchError(f"{kernel}: {err}") from None


def _hashable(key: tuple) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


# -- module-level values the compiled code depends on --------------------------------------
def _dependency_watch(fn: Callable, deps) -> tuple[tuple[Callable[[], Any], Any], ...]:
    """(read, value now) for every module-level or closure name the cache key took a value
    from (constants) or that names a ``@tj.func`` it inlined, in ``fn`` and those functions.

    A launch re-reads them (most kernels have none), so that rebinding a constant or a
    function recompiles instead of reusing code built with the old value.
    """
    watch = []
    for f in (fn, *(d.fn for d in deps.functions)):
        cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
        names = _code_names(f.__code__)
        for name in names:
            if name in cells:
                read = functools.partial(_cell_value, cells[name])
            elif name in f.__globals__:
                read = functools.partial(f.__globals__.get, name, MISSING)
            else:
                continue
            value = read()
            namespace = namespace_name(value)
            if namespace is not None:   # a user module or class: its attributes read
                for attr in names:
                    member = getattr(value, attr, MISSING)
                    if _depends_on(f"{namespace}.{attr}", member, deps):
                        watch.append((functools.partial(getattr, value, attr, MISSING),
                                      member))
            elif _depends_on(name, value, deps):
                watch.append((read, value))
    return tuple(watch)


def _depends_on(qualified: str, value: Any, deps) -> bool:
    if isinstance(value, DeviceFunction):
        return value in deps.functions
    return qualified in deps.globals and is_cache_constant(value)


def _code_names(code) -> set[str]:
    """Global, attribute and free-variable names of a code object and the ones nested in it."""
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def _cell_value(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:   # the enclosing function has not assigned it (or deleted it)
        return MISSING


@functools.cache
def _source_hash(fn: Callable) -> str:
    """``cache_key.source_hash`` once per function object (its code cannot change)."""
    return source_hash(fn)
