"""Print tilejit's per-thread IR as CUDA C++ (docs/cuda.md).

A per-thread kernel (``distribution = "per_thread"``, after ``lower-addresses``) is ordinary
SIMT code: scalar ops, structured control flow, flat accesses ``load_at(%buf, %offset)`` on
root buffers, barriers and shuffles. The printer is a table from op to text: every SSA
value becomes a ``const`` local (constants are inlined), ``for``/``if``/``while`` become C
statements whose carried values are mutable locals, and each op's semantics are the CPU
target's (``tilejit/targets/cpu/emit_native.py``), through the helpers of
``emit_prelude``. Types, literals and scalar ops live in ``emit_scalar``; synchronization,
atomics, printing and intrinsics in ``emit_sync``.

Unsupported IR is a :class:`CompilationError` at the op's source location.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tilejit.errors import CompilationError, ScopeError
from tilejit.ir.core import Block, KernelIR, Operation, Value
from tilejit.ir.scope import ActiveSet
from tilejit.ir.storage import held_per_thread, reaches_threads, storage_elements
from tilejit.ir.types import BufferType, MemScope, RegionType, ScalarType, i1, i64

from . import emit_scalar
from .driver import MAX_NON_PORTABLE_CLUSTER, MAX_PORTABLE_CLUSTER
from .emit_prelude import PRELUDE, type_preludes
from .emit_scalar import C_TYPES, PARAM_FORMATS, literal, storage_type, value_type
from .tensor_map import MAP_BYTES
from .tensor_map import STRUCT as TENSOR_MAP_STRUCT

__all__ = ["CudaPrinter", "HANDLERS", "element", "print_cuda"]

CLUSTER_MIN_SM = 90   # thread-block clusters arrived with Hopper

# ------------------------------------------------------------------------------ liveness
# Ops without side effects: printed only when a printed op uses their results.
PURE = frozenset({"const", "binary", "cmp", "unary", "select", "cast", "thread_index",
                  "buffer_dim", "buffer_stride", "view", "region", "alloc", "load_at", "load",
                  "load_vec_at", "alloc_barrier", "warp_shuffle", "elect_sync",
                  "packed_binary", "packed_unary", "packed_cast", "cluster_map"})


def live_ops(kernel: KernelIR, checks: bool = False) -> set[int]:
    """ids of the ops to print: those with effects, and what they use, transitively
    (``bounds_check`` only with ``checks``)."""
    ops = list(kernel.walk())
    pure = PURE if checks else PURE | {"bounds_check"}
    live: set[int] = set()
    work = [op for op in ops if op.name not in pure]
    while work:
        op = work.pop()
        if id(op) in live:
            continue
        live.add(id(op))
        for value in op.operands:
            if isinstance(value.owner, Operation):
                work.append(value.owner)
    return live


_C_KEYWORDS = frozenset("""auto bool break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed sizeof static
struct switch typedef union unsigned void volatile while class namespace new delete this
template typename true false operator private public protected virtual friend using asm
threadIdx blockIdx blockDim gridDim warpSize main printf memcpy min max abs exp log sqrt fabs
fabsf expf exp2 exp2f logf log2 log2f sqrtf sin sinf cos cosf floor floorf ceil ceilf tanh erf
pow powf fmax fmin fmod copysign signbit half float2 float4 int2 int4 dim3""".split())


def element_types(kernel: KernelIR) -> set[ScalarType]:
    """The scalar types of every value the kernel holds (of a buffer's or region's elements
    for those): the prelude includes a type's header only for a kernel that uses it."""
    types: set[ScalarType] = set()

    def add(values) -> None:
        for value in values:
            t = value.type
            t = t.buffer if isinstance(t, RegionType) else t
            t = t.dtype if isinstance(t, BufferType) else t
            if isinstance(t, ScalarType):
                types.add(t)

    add(kernel.params)
    for op in kernel.walk():
        add(op.results)
        for region in op.regions:
            add(region.args)
    return types


@dataclass
class Frame:
    """What the printer knows at a point: the active threads (None: unknown here)."""

    active: ActiveSet | None


@dataclass
class CudaPrinter:
    kernel: KernelIR
    arch: str
    debug: bool = False   # print bounds checks (a failed one prints the access and traps)
    lines: list[str] = field(default_factory=list)
    names: dict[Value, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    suffixes: dict[str, int] = field(default_factory=dict)   # base -> last suffix taken
    depth: int = 1
    counter: int = 0
    line_no: int | None = None
    uses_shared: bool = False
    frames: list[Frame] = field(default_factory=list)
    entry: str = ""
    # ((tensor parameter, box, swizzle, dtype name), C name) per TMA tensor map (emit_tma)
    tensor_maps: list = field(default_factory=list)
    # the struct format of each parameter as declared, for the launcher (None: one has none)
    param_formats: list | None = field(default_factory=list)
    # 16- or 8-bit values unpacked from a 32-bit register (ldmatrix's): (register, which
    # part, lowest bits first), so that an mma takes the register as it came
    register_parts: dict[Value, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self):
        self.sm = int(re.match(r"\D*(\d+)", self.arch).group(1))
        self.live = live_ops(self.kernel, self.debug)
        self.num_warps = self.kernel.attrs["num_warps"]
        self.frames.append(Frame(ActiveSet.entry(self.num_warps)))
        self.taken |= _C_KEYWORDS

    # ---------------------------------------------------------------- names and text
    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint or "")
        if not base or base[0].isdigit() or base.startswith(("tj_", "__")) or base == "_":
            self.counter += 1
            base = f"v{self.counter}" if not base or base.isdigit() else f"v{base}"
        # names are never freed: the suffixes a base has tried stay taken, and the search
        # resumes after them (a kernel's thousands of ``acc`` locals cost no quadratic scan)
        n = self.suffixes.get(base, 0)
        name = f"{base}_{n}" if n else base
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.suffixes[base] = n
        self.taken.add(name)
        return name

    def __getitem__(self, value: Value) -> str:
        """The C expression of an IR value."""
        try:
            return self.names[value]
        except KeyError:
            raise CompilationError(f"internal: the cuda printer has no value for {value!r}") \
                from None

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def define(self, value: Value, expr: str, hint_from: Value | None = None) -> str:
        name = self.fresh((hint_from or value).name_hint)
        self.emit(f"const {value_type(value.type)} {name} = {expr};")
        self.names[value] = name
        return name

    def declare(self, value: Value, init: str | None = None, hint: str = "") -> str:
        """A mutable local for a carried value (loop iter args, if/while results)."""
        name = self.fresh(hint or value.name_hint)
        self.emit(f"{value_type(value.type)} {name}" + (f" = {init};" if init else ";"))
        self.names[value] = name
        return name

    def assign(self, targets: list[str], exprs: list[str]) -> None:
        """``targets = exprs`` as one parallel assignment (a loop may swap its carries)."""
        pairs = [(t, e) for t, e in zip(targets, exprs) if t != e]
        clash = any(e in targets for _, e in pairs)
        if clash:
            temps = []
            for t, e in pairs:
                temp = self.fresh(f"{t}_next")
                self.emit(f"const auto {temp} = {e};")
                temps.append((t, temp))
            pairs = temps
        for t, e in pairs:
            self.emit(f"{t} = {e};")

    @property
    def active(self) -> ActiveSet | None:
        return self.frames[-1].active

    def lane_mask(self) -> str:
        """The lanes of this warp that execute here, for *_sync intrinsics."""
        active = self.active
        if active is None or active.elected:
            return "__activemask()"
        lo, hi = active.lanes
        return f"{((1 << hi) - 1) & ~((1 << lo) - 1):#010x}u"

    # ---------------------------------------------------------------- walking
    def block(self, block: Block) -> list[str]:
        """Print ``block``'s ops; the C expressions its terminator passes on."""
        for op in block.ops:
            if op.opdef.terminator:
                return [self[v] for v in op.operands[op.opdef.yields_from:]] \
                    if op.name != "condition" else [self[v] for v in op.operands]
            if id(op) in self.live:
                self.op(op)
        return []

    def op(self, op: Operation) -> None:
        handler = HANDLERS.get(op.name)
        if handler is None:
            raise CompilationError(f"the cuda target cannot print '{op.name}' ops yet", op.loc)
        if op.loc.line and op.loc.line != self.line_no and op.loc.file == self.kernel.loc.file:
            self.line_no = op.loc.line
            self.emit(f"// line {op.loc.line}")
        try:
            handler(self, op)
        except CompilationError as err:
            raise err.with_location(op.loc) from None

    # ---------------------------------------------------------------- the kernel
    def add_formats(self, *formats: str | None) -> None:
        """Note the next parameters' struct formats; one without makes the kernel's None."""
        if None in formats:
            self.param_formats = None
        elif self.param_formats is not None:
            self.param_formats.extend(formats)

    def parameters(self) -> list[str]:
        params = []
        for value, pname in zip(self.kernel.params, self.kernel.param_names):
            t = value.type
            name = self.fresh(pname)
            self.names[value] = name
            if isinstance(t, BufferType):
                params.append(f"{storage_type(t.dtype)}* __restrict__ {name}")
                self.add_formats("Q")
                for kind in ("shape", "stride"):
                    for d in range(t.rank):
                        self.taken.add(f"{name}_{kind}{d}")
                        params.append(f"long long {name}_{kind}{d}")
                        self.add_formats("q")
            elif isinstance(t, ScalarType):
                params.append(f"{C_TYPES[t]} {name}")
                self.add_formats(PARAM_FORMATS.get(t))
            else:
                raise CompilationError(f"the cuda target cannot take a parameter of type {t}",
                                       self.kernel.loc)
        return params

    def cluster_dims(self) -> str:
        """`` __cluster_dims__(x, y, z)`` for a kernel launched in clusters, else nothing: the
        shape compiled in (PTX ``.reqnctapercluster``) is the one every launch uses."""
        cluster = tuple(self.kernel.attrs["cluster"])
        if cluster == (1, 1, 1):
            return ""
        if self.sm < CLUSTER_MIN_SM:
            raise CompilationError(f"cluster={cluster}: thread-block clusters need "
                                   f"sm_{CLUSTER_MIN_SM} or later; compiling for {self.arch}",
                                   self.kernel.loc)
        if math.prod(cluster) > MAX_NON_PORTABLE_CLUSTER:
            raise CompilationError(f"cluster={cluster} has {math.prod(cluster)} CTAs, above "
                                   f"the {MAX_NON_PORTABLE_CLUSTER} that sm_90 runs with the "
                                   "non-portable opt-in (the loader sets it above the portable "
                                   f"{MAX_PORTABLE_CLUSTER})", self.kernel.loc)
        return f" __cluster_dims__({', '.join(map(str, cluster))})"

    def print(self) -> str:
        k = self.kernel
        threads = 32 * self.num_warps
        name = self.entry = self.fresh(k.name)
        params = self.parameters()
        self.block(k.body)
        body = self.lines
        if self.uses_shared:
            body = ["  extern __shared__ __align__(1024) unsigned char tj_smem[];", *body]
        params += [f"const __grid_constant__ tj_tensor_map {name}" for _, name in self.tensor_maps]
        self.add_formats(*[f"{MAP_BYTES}s"] * len(self.tensor_maps))
        head = (f'extern "C" __global__ void __launch_bounds__({threads}){self.cluster_dims()} '
                f'{name}(\n    ' + ",\n    ".join(params) + ") {")
        prelude = PRELUDE + type_preludes(element_types(k)) \
            + (TENSOR_MAP_STRUCT + "\n" if self.tensor_maps else "")
        source = f"// {k.name}: printed by tilejit for {self.arch} from {k.loc}"
        return "\n".join([source, prelude, head, *body, "}", ""])


def print_cuda(kernel: KernelIR, arch: str = "sm_90a", debug: bool = False) -> tuple[str, str]:
    """(CUDA C++ source, entry name) of a per-thread kernel; ``debug`` prints its
    ``bounds_check`` ops."""
    printer = CudaPrinter(kernel, arch, debug)
    text = printer.print()
    return text, printer.entry


# ------------------------------------------------------------------------------ memory
def print_alloc(p: CudaPrinter, op: Operation) -> None:
    scope, dtype, shape = op.attrs["scope"], op.attrs["dtype"], op.attrs["shape"]
    layout, buf = op.attrs["layout"], op.result
    if scope is MemScope.SHARED:
        if op.attrs["offset"] is None:
            raise CompilationError("a shared buffer without a planned offset reached the cuda "
                                   "printer (the plan-shared-memory pass places them)")
        p.uses_shared = True
        name = p.fresh(buf.name_hint or "smem")
        ctype = storage_type(dtype)
        p.emit(f"{ctype}* const {name} = reinterpret_cast<{ctype}*>(tj_smem + "
               f"{op.attrs['offset']});")
        p.names[buf] = name
    elif scope is MemScope.LOCAL:   # a thread's own part of a layout over threads too
        name = p.fresh(buf.name_hint or "local")
        size = storage_elements(shape, layout, held_per_thread(scope, layout))
        p.emit(f"{storage_type(dtype)} {name}[{size}];")
        p.names[buf] = name
    else:
        raise CompilationError(f"a {scope} buffer laid out by {layout} cannot be printed by "
                               "the cuda target (it prints shared buffers and per-thread "
                               "private ones, which place-fragments makes of fragments)")


def element(p: CudaPrinter, op: Operation) -> str:
    """``buf[offset]`` of a flat access (operand 0 the buffer, the last the offset)."""
    return f"{p[op.operands[0]]}[{p[op.operands[-1]]}]"


def print_load_at(p: CudaPrinter, op: Operation) -> None:
    ref = element(p, op)
    p.define(op.result, f"tj_bool({ref})" if op.result.type == i1 else ref)


def print_store_at(p: CudaPrinter, op: Operation) -> None:
    value = op.operands[1]
    text = f"(unsigned char){p[value]}" if value.type == i1 else p[value]
    p.emit(f"{element(p, op)} = {text};")


def _vec(p: CudaPrinter, op: Operation) -> tuple[str, str]:
    """(the prelude's ``tj_vec`` type of a vector access's run, the run's first element)."""
    return (f"tj_vec<{storage_type(op.operands[0].type.dtype)}, {op.attrs['count']}>",
            f"&{p[op.operands[0]]}[{p[op.operands[1]]}]")


def print_load_vec_at(p: CudaPrinter, op: Operation) -> None:
    vec, first = _vec(p, op)
    name = p.fresh(op.results[0].name_hint or "run")
    p.emit(f"const {vec} {name} = *reinterpret_cast<const {vec}*>({first});")
    for k, result in enumerate(op.results):
        p.names[result] = f"{name}.v[{k}]"


def print_store_vec_at(p: CudaPrinter, op: Operation) -> None:
    vec, first = _vec(p, op)
    values = ", ".join(p[v] for v in op.operands[2:])
    p.emit(f"*reinterpret_cast<{vec}*>({first}) = {vec}{{{{{values}}}}};")


def print_bounds_check(p: CudaPrinter, op: Operation) -> None:
    """In debug builds: a failed check prints the access, indices and extents, and traps
    (the CPU compares unsigned too: a negative index fails)."""
    rank = len(op.operands) // 2
    indices, extents = op.operands[:rank], op.operands[rank:]
    ok = " && ".join(f"(unsigned long long){p[i]} < (unsigned long long){p[e]}"
                     for i, e in zip(indices, extents)) or "true"
    where = f"{op.loc.file}:{op.loc.line}".replace("%", "%%")
    dims = ", ".join(["%lld"] * rank)
    values = ", ".join(f"(long long){p[v]}" for v in (*indices, *extents))
    message = (f"{where}: {op.attrs['access']} of {op.attrs['scope']} buffer "
               f"{op.attrs['buffer']} out of bounds: index [{dims}], shape [{dims}]\n")
    p.emit(f"if (!({ok})) {{")
    p.emit(f"  printf({_c_string(message)}, {values});")
    p.emit("  __trap();")
    p.emit("}")


def print_unflattened(p: CudaPrinter, op: Operation) -> None:
    root, through = op.operands[0], set()
    while isinstance(root.owner, Operation) and root.owner.name in ("view", "region"):
        through.add(root.owner.name)
        root = root.owner.operands[0]
    owner = root.owner
    if isinstance(owner, Operation) and owner.name == "alloc" \
            and reaches_threads(owner.attrs["layout"]):
        raise CompilationError(f"{owner.attrs['scope']} buffers laid out over threads are not "
                               f"supported by the cuda target yet (the buffer allocated at "
                               f"line {owner.loc.line}, layout {owner.attrs['layout']})", op.loc)
    if not isinstance(owner, Operation) and "view" in through:
        raise CompilationError(f"'{op.name}' through a view of a tensor is not supported by "
                               "the cuda target yet (lower-addresses leaves them)", op.loc)
    raise CompilationError(f"'{op.name}' with indices reached the cuda printer: accesses of "
                           f"buffers, regions and views must be flat (load_at/store_at, made "
                           f"by the lower-addresses pass)", op.loc)


def print_view_or_region(p: CudaPrinter, op: Operation) -> None:
    if op.name == "view" and op.result.type.scope is not MemScope.GLOBAL:
        # Only handed on (a team's or a loop's yield): lower-addresses made every access
        # through it flat on its root, and its facts are static, so it names the storage.
        p.names[op.result] = p[op.operands[0]]
        return
    raise CompilationError(f"a '{op.name}' is still used when the cuda printer runs: the "
                           "lower-addresses pass turns its accesses into flat ones", op.loc)


def print_buffer_fact(p: CudaPrinter, op: Operation) -> None:
    buf, dim = op.operands[0], op.attrs["dim"]
    t = buf.type
    if isinstance(t, RegionType) or not isinstance(t, BufferType):
        raise CompilationError(f"{op.name} of a {type(t).__name__} is not supported by the "
                               "cuda target")
    kind = "shape" if op.name == "buffer_dim" else "stride"
    static = t.shape[dim] if kind == "shape" else (t.strides[dim] if t.strides else None)
    if static is None and t.scope is not MemScope.GLOBAL:
        if kind == "stride" and t.layout is None:
            static = math.prod(t.shape[dim + 1:])
        else:
            raise CompilationError(f"{op.name} of an on-chip buffer laid out by {t.layout} "
                                   "is not supported by the cuda target")
    if static is not None:
        p.names[op.result] = literal(static, i64)
    else:
        p.names[op.result] = f"{p[buf]}_{kind}{dim}"


# ------------------------------------------------------------------------------ control
def print_for(p: CudaPrinter, op: Operation) -> None:
    lb, ub, step, *inits = op.operands
    body = op.regions[0]
    iv, *iters = body.args
    carried = [p.declare(arg, p[init], hint=res.name_hint or arg.name_hint)
               for arg, init, res in zip(iters, inits, op.results)]
    t = lb.type
    iv_name = p.fresh(iv.name_hint or "i")
    p.names[iv] = iv_name
    step_value = step.owner.attrs["value"] if isinstance(step.owner, Operation) \
        and step.owner.name == "const" else None
    if step_value is not None or t.kind != "int":
        cond = f"{iv_name} {'>' if step_value is not None and step_value < 0 else '<'} {p[ub]}"
    else:   # Python's range: downward for a negative step
        cond = f"({p[step]} > 0 ? {iv_name} < {p[ub]} : {iv_name} > {p[ub]})"
    if op.attrs["unroll"] is not None:
        p.emit(f"#pragma unroll {op.attrs['unroll']}")
    p.emit(f"for ({C_TYPES[t]} {iv_name} = {p[lb]}; {cond}; {iv_name} += {p[step]}) {{")
    p.depth += 1
    yielded = p.block(body)
    p.assign(carried, yielded)
    p.depth -= 1
    p.emit("}")
    for result, name in zip(op.results, carried):
        p.names[result] = name


def _branch_frames(p: CudaPrinter, op: Operation) -> tuple[Frame, Frame]:
    spec, active = op.attrs["filter"], p.active
    if spec is None or active is None:
        return Frame(active), Frame(active)

    def narrowed(how) -> Frame:
        try:
            return Frame(how(spec.axis, spec.lo, spec.hi))
        except ScopeError:
            return Frame(None)
    return narrowed(active.narrow), narrowed(active.complement)


def print_if(p: CudaPrinter, op: Operation) -> None:
    results = [p.declare(r, hint=r.name_hint) for r in op.results]
    then_frame, else_frame = _branch_frames(p, op)
    p.emit(f"if ({p[op.operands[0]]}) {{")
    for index, (region, frame) in enumerate(zip(op.regions, (then_frame, else_frame))):
        if index == 1:
            if not results and all(o.opdef.terminator or id(o) not in p.live for o in region.ops):
                break
            p.emit("} else {")
        p.depth += 1
        p.frames.append(frame)
        p.assign(results, p.block(region))
        p.frames.pop()
        p.depth -= 1
    p.emit("}")


def print_while(p: CudaPrinter, op: Operation) -> None:
    before, after = op.regions
    args = [p.declare(a, p[init]) for a, init in zip(before.args, op.operands)]
    results = [p.declare(r, hint=r.name_hint) for r in op.results]
    p.emit("while (true) {")
    p.depth += 1
    cond, *values = p.block(before)
    p.assign(results, values)
    p.emit(f"if (!({cond})) break;")
    for arg, name in zip(after.args, results):
        p.names[arg] = name
    p.assign(args, p.block(after))
    p.depth -= 1
    p.emit("}")


def print_team(p: CudaPrinter, op: Operation) -> None:
    # A scope region: its body runs in place; its results are what it yields.
    for result, expr in zip(op.results, p.block(op.regions[0])):
        p.names[result] = expr


HANDLERS: dict[str, Callable[[CudaPrinter, Operation], None]] = {
    **emit_scalar.HANDLERS,
    "alloc": print_alloc, "load_at": print_load_at, "store_at": print_store_at,
    "load_vec_at": print_load_vec_at, "store_vec_at": print_store_vec_at,
    "load": print_unflattened, "store": print_unflattened, "atomic": print_unflattened,
    "atomic_cas": print_unflattened, "view": print_view_or_region,
    "region": print_view_or_region, "buffer_dim": print_buffer_fact,
    "bounds_check": print_bounds_check,
    "buffer_stride": print_buffer_fact, "for": print_for, "if": print_if,
    "while": print_while, "team": print_team,
}

from . import emit_sync  # noqa: E402  (registers its handlers into HANDLERS)
from .emit_sync import c_string as _c_string  # noqa: E402

HANDLERS.update(emit_sync.HANDLERS)

from . import emit_mma  # noqa: E402  (mma_sync)

HANDLERS.update(emit_mma.HANDLERS)

from . import emit_packed  # noqa: E402  (f16x2 / bf16x2 pairs)

HANDLERS.update(emit_packed.HANDLERS)

from . import emit_async  # noqa: E402  (cp.async, mbarrier transaction bytes)

HANDLERS.update(emit_async.HANDLERS)

from . import emit_tma  # noqa: E402  (cp.async.bulk.tensor, bulk groups, proxy fence)

HANDLERS.update(emit_tma.HANDLERS)

from . import emit_wgmma  # noqa: E402  (Hopper wgmma)

HANDLERS.update(emit_wgmma.HANDLERS)

from . import emit_cluster  # noqa: E402  (cluster barrier, distributed shared memory)

HANDLERS.update(emit_cluster.HANDLERS)
from . import emit_tcgen05  # noqa: E402  (Blackwell tcgen05, tensor memory)

HANDLERS.update(emit_tcgen05.HANDLERS)
