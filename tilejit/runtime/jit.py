"""``@tj.kernel``: the object users decorate, compile and launch.

``kernel[grid](*args, **meta)`` calls a launcher generated once per kernel, whose Python
signature is the kernel's own (plus keyword-only launch options), so Python itself binds the
arguments. The launcher builds a tuple of cheap per-argument signatures (see
``arguments.facts_of``), looks it up in one dict, and hands the arguments' launch records
(made with the signatures) to the backend. Only when that lookup misses does the slow path run: the ``LaunchError`` checks,
the full cache key (``cache_key.make_key``), the memory and disk caches, and the compiler.
"""
from __future__ import annotations

import functools
import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from ..errors import LaunchError, SourceLocation, TilejitError
from ..frontend.dependencies import (find_dependencies, is_cache_constant,
                                    is_constexpr_annotation, is_tilejit_module)
from ..frontend.language import DeviceFunction, constexpr
from ..frontend.signature import ArgSpec, LaunchOptions
from ..frontend.source import function_source
from ..ir.types import ScalarType
from ..knobs import knobs
from . import arguments
from .arguments import TensorSpec
from .cache import CacheInfo, KernelCache, register_kernel
from .cache_key import (CacheKeyParts, canonical_json, compiler_fingerprint, make_key,
                        source_hash)
from .compiler import CompiledKernel, compile_kernel, machine_identity, target_arch

__all__ = ["Kernel", "kernel", "TensorSpec", "CompiledKernel"]

LAUNCH_OPTIONS = ("num_warps", "cluster", "stream", "target", "arch")
DEFAULT_NUM_WARPS = 4
DEFAULT_CLUSTER = (1, 1, 1)
_PREFIX = "_tj_"   # names of the generated launcher's own locals and globals
# Constexpr values whose (type, value) pair is already an exact dict key.
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None), ScalarType})
_MISSING = object()


class Kernel:
    """A ``@tj.kernel`` function. ``kernel[grid](*args, **meta)`` launches it."""

    def __init__(self, fn: Callable, *, debug: bool | None = None,
                 do_not_specialize: tuple[str, ...] = ()):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.debug = debug
        parameters = inspect.signature(fn).parameters
        _check_parameters(fn, parameters, do_not_specialize)
        self.arg_names = list(parameters)
        self.defaults = {n: p.default for n, p in parameters.items()
                         if p.default is not inspect.Parameter.empty}
        self.constexprs = frozenset(n for n, p in parameters.items()
                                    if is_constexpr_annotation(p.annotation, fn.__globals__))
        self.runtime_candidates = tuple(n for n in self.arg_names if n not in self.constexprs)
        self.do_not_specialize = frozenset(do_not_specialize)
        self._cache: KernelCache[CompiledKernel] = KernelCache()
        self._fast: dict[tuple, _FastEntry] = {}
        self._fast_hits = [0]
        self._launcher: Callable | None = None
        self._launch = self._write_launcher_and_launch
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
            self._launcher = self._launch = _generate_launcher(self)
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
    def _miss(self, key: tuple, values: tuple, num_warps, cluster, target, arch) -> _FastEntry:
        """Called by the launcher when its signature lookup misses (or found stale code)."""
        bound = dict(zip(self.arg_names, values))
        options = {"num_warps": num_warps, "cluster": cluster, "target": target, "arch": arch}
        try:
            compiled, watch = self._compiled_for(bound, options)
        except TilejitError as err:   # shown at the kernel's definition, from the user's frame
            raise err.with_location(self._location()).with_traceback(None) from None
        entry = _FastEntry(compiled, watch, self.runtime_candidates)
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
                        value, param, name, specialize=param not in self.do_not_specialize)
                except LaunchError as err:
                    raise err.with_location(self._location(param)) from None
        arguments.check_devices(bound, target, name)
        launch_options = _launch_options(options, target, name)
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
                     ("cluster", list(launch_options.cluster))),
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
        missing = next(name for name, value in bound.items() if value is _MISSING)
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

    def _location(self, param: str | None = None) -> SourceLocation | None:
        """Where the kernel (or one of its parameters) is defined, for error excerpts."""
        try:
            source = function_source(self.fn)
        except TilejitError:   # no source file (defined in a REPL)
            return None
        for arg in source.node.args.args + source.node.args.kwonlyargs:
            if arg.arg == param:
                return source.loc(arg)
        return source.loc(source.node)


class _FastEntry:
    """What a launch needs once its signature is found: the two backend calls, and the
    module-level values the code was compiled with (``watch``) to notice a changed one."""

    __slots__ = ("compiled", "watch", "launch", "launch_on_stream")

    def __init__(self, compiled: CompiledKernel, watch: tuple, candidates: tuple[str, ...]):
        self.compiled, self.watch = compiled, watch
        launch, launch_on_stream = compiled.launch, compiled.launch_on_stream
        if compiled.runtime_params != candidates:
            # A tj.constexpr value passed for an ordinary parameter was compiled in: drop it.
            keep = [i for i, n in enumerate(candidates) if n in compiled.runtime_params]
            launch = functools.partial(_select_args, compiled.launch, keep)
            launch_on_stream = functools.partial(_select_args, compiled.launch_on_stream, keep)
        self.launch, self.launch_on_stream = launch, launch_on_stream

    def is_stale(self) -> bool:
        for read, compiled_with in self.watch:
            now = read()
            if now is not compiled_with and arguments.exact(now) != arguments.exact(compiled_with):
                return True
        return False


def _select_args(launch: Callable, keep: list[int], grid, records: tuple, *stream) -> None:
    launch(grid, tuple(records[i] for i in keep), *stream)


def kernel(fn: Callable | None = None, *, debug: bool | None = None,
           do_not_specialize: tuple[str, ...] = ()):
    """Decorator: ``@tj.kernel`` or ``@tj.kernel(debug=True, do_not_specialize=("n",))``."""
    if fn is None:
        return lambda f: Kernel(f, debug=debug, do_not_specialize=do_not_specialize)
    return Kernel(fn, debug=debug, do_not_specialize=do_not_specialize)


def _check_parameters(fn: Callable, parameters, do_not_specialize) -> None:
    unknown = set(do_not_specialize) - set(parameters)
    if unknown:
        raise TilejitError(f"do_not_specialize names unknown parameters {sorted(unknown)} "
                           f"of kernel {fn.__name__}")
    for name, p in parameters.items():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TilejitError(f"kernel {fn.__name__}: parameter {name!r} must be an ordinary "
                               "parameter (no *args, **kwargs or positional-only markers)")
        if name in LAUNCH_OPTIONS or name.startswith(_PREFIX):
            raise TilejitError(f"kernel {fn.__name__}: parameter name {name!r} is reserved "
                               f"(launch options: {', '.join(LAUNCH_OPTIONS)})")


def _launch_options(options: dict, target: str, kernel: str) -> LaunchOptions:
    num_warps = options.get("num_warps")
    cluster = options.get("cluster")
    if not isinstance(cluster, (tuple, list, type(None))):
        cluster = (cluster,)
    if isinstance(num_warps, bool):
        raise LaunchError(f"{kernel}: num_warps must be a positive int, got {num_warps!r}")
    try:
        return LaunchOptions(num_warps=DEFAULT_NUM_WARPS if num_warps is None else num_warps,
                             cluster=DEFAULT_CLUSTER if cluster is None else tuple(cluster),
                             target=target, arch=options.get("arch"))
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
                read = functools.partial(f.__globals__.get, name, _MISSING)
            else:
                continue
            value = read()
            if inspect.ismodule(value) and not is_tilejit_module(value):
                for attr in names:
                    member = getattr(value, attr, _MISSING)
                    if _depends_on(f"{value.__name__}.{attr}", member, deps):
                        watch.append((functools.partial(value.__dict__.get, attr, _MISSING),
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
        return _MISSING


@functools.cache
def _source_hash(fn: Callable) -> str:
    """``cache_key.source_hash`` once per function object (its code cannot change)."""
    return source_hash(fn)


# -- the generated launcher ----------------------------------------------------------------
def _generate_launcher(kernel: Kernel) -> Callable:
    """``launch(grid, <the kernel's parameters>, *, <launch options>)`` for this kernel.

    Required parameters default to a marker and surplus arguments are collected, so that a
    call that does not bind reaches ``Kernel._bad_call`` (a LaunchError) instead of raising
    Python's TypeError. (Passing one argument both by position and by keyword is still
    Python's TypeError, naming the kernel and the argument.)
    """
    names = kernel.arg_names
    namespace: dict[str, Any] = {
        "_tj_MISSING": _MISSING, "_tj_bad_call": kernel._bad_call,
        "_tj_bad_argument": kernel._bad_argument,
        "_tj_facts": arguments.facts, "_tj_learn": arguments.facts_of,
        "_tj_exact": arguments.exact, "_tj_plain": _PLAIN_TYPES,
        "_tj_grids": arguments.grids, "_tj_resolve_grid": arguments.resolve_grid,
        "_tj_fast": kernel._fast.get, "_tj_miss": kernel._miss, "_tj_hits": kernel._fast_hits,
        "_tj_overrides": knobs.overrides,
        "_tj_cluster": DEFAULT_CLUSTER, "_tj_name": kernel.__name__,
    }
    # The knobs a binary depends on: their raw environment text and any Python override are
    # part of the lookup, so changing one makes the next launch take the slow path.
    knob_reads = []
    for i, knob in enumerate(("target", "debug", "always_compile")):
        namespace[f"_tj_env{i}"], namespace[f"_tj_envkey{i}"] = knobs.raw_lookup(knob)
        knob_reads.append(f"_tj_env{i}(_tj_envkey{i})")
    # Plain torch tensors get their facts inline; other arguments through arguments.facts.
    torch = sys.modules.get("torch")
    namespace["_tj_Tensor"] = torch.Tensor if torch is not None else _MISSING
    params, signature_parts, fact_lines, records = [], [], [], []
    for i, name in enumerate(names):
        namespace[f"_tj_default{i}"] = kernel.defaults.get(name, _MISSING)
        params.append(f"{name}=_tj_default{i}")
        if name in kernel.constexprs:
            signature_parts.append(f"{name}.__class__, {name} if {name}.__class__ in _tj_plain "
                                   f"else _tj_exact({name})")
        else:
            fact_lines += [
                f"if {name}.__class__ is _tj_Tensor:",
                arguments.torch_facts_code(name, f"_tj_s{i}", f"_tj_r{i}", "    "),
                "else:",
                f"    _tj_s{i}, _tj_r{i} = _tj_facts({name}.__class__, _tj_learn)({name})"]
            signature_parts.append(f"_tj_s{i}")
            records.append(f"_tj_r{i}")
    required = [n for n in names if n not in kernel.defaults]
    unbound = " or ".join(["_tj_extra", "_tj_unknown", *(f"{n} is _tj_MISSING" for n in required)])
    bound = ", ".join(f"{n!r}: {n}" for n in names)
    meta = ", ".join(f"{n!r}: {n}" for n in (*names, *LAUNCH_OPTIONS))
    values = "".join(f"{n}, " for n in names)
    facts = textwrap.indent("\n".join(fact_lines or ["pass"]), " " * 8).lstrip()
    records = "".join(f"{r}, " for r in records)
    function = kernel.__name__ if kernel.__name__.isidentifier() else "_tj_kernel"
    source = f"""
def {function}({', '.join(['_tj_grid', *params])}, *_tj_extra,
        num_warps={DEFAULT_NUM_WARPS}, cluster=_tj_cluster, stream=None, target=None, arch=None,
        **_tj_unknown):
    if {unbound}:
        _tj_bad_call(_tj_extra, _tj_unknown, {{{bound}}})
    try:
        _tj_grid3 = _tj_grids(_tj_grid)
    except TypeError:   # a list
        _tj_grid3 = None
    if _tj_grid3 is None:
        _tj_grid3 = _tj_resolve_grid(_tj_grid, {{{meta}}}, _tj_name)
    try:
        {facts}
    except Exception as _tj_error:   # e.g. a sparse tensor: no strides, no data pointer
        _tj_bad_argument(_tj_error, {{{bound}}})
    _tj_key = ({', '.join(knob_reads)}, len(_tj_overrides) and tuple(_tj_overrides.items()),
               target, arch, num_warps, cluster, {', '.join(signature_parts)})
    try:
        _tj_entry = _tj_fast(_tj_key)
    except TypeError:   # an unhashable constexpr or option: looked up the slow way
        _tj_entry = None
    if _tj_entry is None or _tj_entry.watch and _tj_entry.is_stale():
        _tj_entry = _tj_miss(_tj_key, ({values}), num_warps, cluster, target, arch)
    else:
        _tj_hits[0] += 1
    if stream is None:
        return _tj_entry.launch(_tj_grid3, ({records}))
    return _tj_entry.launch_on_stream(_tj_grid3, ({records}), stream)
"""
    namespace["__name__"] = kernel.fn.__module__
    exec(compile(source, f"<tilejit launcher of {kernel.__qualname__}>", "exec"), namespace)
    return namespace[function]
