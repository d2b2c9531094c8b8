"""An AST lint: does an emitted NKI module stay in the Python subset the NKI compiler takes
and in the nl/nisa subset of the reference's contract (nki_reference.py)?

NKI 0.6 specializes a kernel with its own lowering of the Python AST (the nki.* namespace's
compiler; full Python during specialization only arrives with NKI 0.7), so a kernel keeps
to plain statements: assignments, ``for`` over ``range`` / ``nl.affine_range`` /
``nl.sequential_range`` / ``nl.static_range``, ``if`` on compile-time values, calls to
``nl.*`` / ``nisa.*`` / a few builtins / module-level helpers, ``assert``, ``return``.
Tensors are indexed with static slices, and no Python control flow reads a tensor's data
(only its ``.shape`` / ``.dtype``). What the compiler rejects at runtime (``while`` on
registers, classes, closures, exceptions, generators, context managers) is refused here.
Against the contract: ``nl.*`` / ``nisa.*`` names outside the reference's subset, ``nisa``
calls with positional arguments, unknown keywords or a required one missing.

``lint(source) -> list[Problem]``: each problem has the line, the column and a message.
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

import nki_ref_isa as isa
import nki_ref_memory as mem

ALLOWED_IMPORTS = {"nki": None, "nki.language": "nl", "nki.isa": "nisa", "math": None}
NL_NAMES = (set(mem.DTYPES) | set(mem.BUFFERS) | set(isa.OPS)
            | {"ndarray", "affine_range", "sequential_range", "static_range", "ds",
               "tile_size", "program_id", "num_programs"})
# Each instruction's parameters, from the reference itself (so lint and reference agree).
INSTRUCTIONS = {name: inspect.signature(fn)
                for name, fn in vars(isa.isa_module(None)).items() if inspect.isfunction(fn)}
NISA_NAMES = set(INSTRUCTIONS) | {"reduce_cmd", "engine"}
BUILTINS = {"range", "min", "max", "len", "int", "float", "abs", "print", "tuple"}
LOOP_ITERATORS = {"range", "nl.affine_range", "nl.sequential_range", "nl.static_range"}
STATIC_ATTRIBUTES = {"shape", "dtype", "buffer", "ndim"}
STATIC_CALLS = {"nl.ds", "nl.program_id", "nl.num_programs"}   # nl calls giving ints

# Statements and expressions outside the subset, with the reason given.
REFUSED = {
    ast.ClassDef: "class definitions", ast.Lambda: "lambdas (closures)",
    ast.Try: "try/except", ast.With: "with blocks", ast.While: "while loops",
    ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Delete: "del",
    ast.Yield: "generators", ast.YieldFrom: "generators", ast.Await: "async",
    ast.AsyncFunctionDef: "async", ast.AsyncFor: "async", ast.AsyncWith: "async",
    ast.GeneratorExp: "generator expressions", ast.DictComp: "comprehensions",
    ast.SetComp: "comprehensions", ast.ListComp: "comprehensions",
    ast.Dict: "dict objects", ast.Set: "set objects", ast.Raise: "raise",
    ast.NamedExpr: "assignment expressions", ast.Starred: "star-unpacking",
}
if hasattr(ast, "TryStar"):
    REFUSED[ast.TryStar] = "try/except"
if hasattr(ast, "Match"):
    REFUSED[ast.Match] = "match"


@dataclass(frozen=True, order=True)
class Problem:
    line: int
    col: int
    message: str

    def __str__(self):
        return f"line {self.line}:{self.col}: {self.message}"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Linter:
    def __init__(self):
        self.problems: list[Problem] = []
        self.helpers: set[str] = set()

    def flag(self, node: ast.AST, message: str) -> None:
        self.problems.append(Problem(getattr(node, "lineno", 0),
                                     getattr(node, "col_offset", 0), message))

    # -- module level

    def module(self, tree: ast.Module) -> None:
        self.helpers = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        kernels = 0
        for i, node in enumerate(tree.body):
            if isinstance(node, ast.Import):
                self.imports(node)
            elif isinstance(node, ast.ImportFrom):
                self.flag(node, "'from ... import' is outside the contract: import nki, "
                                "nki.language as nl, nki.isa as nisa")
            elif isinstance(node, ast.FunctionDef):
                kernels += self.is_kernel(node)
                self.function(node)
            elif isinstance(node, ast.Expr) and i == 0 and isinstance(node.value, ast.Constant):
                pass                                # the module docstring
            elif isinstance(node, ast.Assign) and self.constant(node.value):
                pass                                # a module-level constant
            else:
                self.flag(node, f"module-level {type(node).__name__} outside the subset "
                                "(imports, constants and functions only)")
        if kernels == 0:
            self.flag(tree.body[0] if tree.body else tree, "no @nki.jit kernel in the module")

    def imports(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                self.flag(node, f"import of {alias.name!r}: only nki, nki.language, nki.isa "
                                "and math")
            elif (alias.asname or None) != ALLOWED_IMPORTS[alias.name] and alias.name != "math":
                want = ALLOWED_IMPORTS[alias.name]
                self.flag(node, f"import {alias.name} as {alias.asname}: the contract spells "
                                f"it {'as ' + want if want else 'without an alias'}")

    def constant(self, node: ast.AST) -> bool:
        return all(isinstance(n, (ast.Constant, ast.Tuple, ast.UnaryOp, ast.BinOp,
                                  ast.operator, ast.unaryop, ast.Load))
                   for n in ast.walk(node))

    def is_kernel(self, fn: ast.FunctionDef) -> bool:
        names = [_dotted(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list]
        for d, name in zip(fn.decorator_list, names):
            if name != "nki.jit":
                self.flag(d, f"decorator {name or ast.unparse(d)!r}: only @nki.jit")
        return "nki.jit" in names

    # -- inside functions

    def function(self, fn: ast.FunctionDef) -> None:
        args = fn.args
        if args.vararg or args.kwarg:
            self.flag(fn, "*args/**kwargs parameters are outside the subset")
        tensors = {a.arg for a in args.args + args.kwonlyargs}
        for node in fn.body:
            for sub in ast.walk(node):
                self.node(sub, tensors)

    def node(self, node: ast.AST, tensors: set[str]) -> None:
        refused = REFUSED.get(type(node))
        if refused:
            self.flag(node, f"{refused} are not in the NKI subset")
        elif isinstance(node, ast.FunctionDef):
            self.flag(node, "nested functions (closures) are not in the NKI subset")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.flag(node, "imports belong at module level")
        elif isinstance(node, ast.Assign):
            self.track(node, tensors)
        elif isinstance(node, ast.For):
            self.loop(node, tensors)
        elif isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            self.static(node.test, tensors, "a condition")
        elif isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.Attribute):
            self.attribute(node)
        elif isinstance(node, ast.Subscript):
            self.subscript(node, tensors)

    def track(self, node: ast.Assign, tensors: set[str]) -> None:
        # A name bound to an allocation or a view of a tensor is a tensor from here on.
        value = node.value
        base = value
        while isinstance(base, ast.Subscript):
            base = base.value
        is_tensor = ((isinstance(value, ast.Call) and _dotted(value.func) == "nl.ndarray")
                     or (value is not base and isinstance(base, ast.Name)
                         and base.id in tensors))
        for target in node.targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and is_tensor:
                    tensors.add(name.id)

    def loop(self, node: ast.For, tensors: set[str]) -> None:
        it = node.iter
        name = _dotted(it.func) if isinstance(it, ast.Call) else None
        if name not in LOOP_ITERATORS:
            self.flag(node, "for loops iterate range / nl.affine_range / nl.sequential_range "
                            "/ nl.static_range only")
        elif isinstance(it, ast.Call):
            for arg in it.args:
                self.static(arg, tensors, "a loop bound")
        if not isinstance(node.target, ast.Name):
            self.flag(node, "a loop variable is one name")
        if node.orelse:
            self.flag(node, "for/else is not in the NKI subset")

    def call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        if name is None:
            self.flag(node, f"call of {ast.unparse(node.func)!r}: only named functions")
            return
        head = name.split(".")[0]
        if any(k.arg is None for k in node.keywords):
            self.flag(node, f"{name}(**...) is outside the subset")
        if head == "nisa" and node.args:
            self.flag(node, f"{name}: pass every argument by keyword (dst=, ...), as the "
                            "contract spells it")
        signature = INSTRUCTIONS.get(name[len("nisa."):]) if head == "nisa" else None
        if signature is not None:
            given = {k.arg for k in node.keywords}
            for key in sorted(given - set(signature.parameters) - {None}):
                self.flag(node, f"{name} has no argument {key!r}")
            missing = [p for p, v in signature.parameters.items()
                       if v.default is inspect.Parameter.empty and p not in given]
            if missing and not node.args:
                self.flag(node, f"{name} needs {', '.join(m + '=' for m in missing)}")
        if head in ("nl", "nisa", "math", "nki") or name in BUILTINS or name in self.helpers:
            return
        self.flag(node, f"call of {name!r}: only nl.*, nisa.*, math.*, module helpers and "
                        f"{', '.join(sorted(BUILTINS))}")

    def attribute(self, node: ast.Attribute) -> None:
        name = _dotted(node)
        if name is None or name.count(".") < 1:
            return
        module, attr = name.split(".")[:2]
        known = {"nl": NL_NAMES, "nisa": NISA_NAMES, "nki": {"jit", "language", "isa"}}
        if module in known and attr not in known[module]:
            self.flag(node, f"{module}.{attr} is not in the reference's subset")

    def subscript(self, node: ast.Subscript, tensors: set[str]) -> None:
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Slice):
                if part.step is not None:
                    self.flag(part, "stepped slices are outside the contract")
                for bound in (part.lower, part.upper):
                    if bound is not None:
                        self.static(bound, tensors, "an index")
            elif isinstance(part, ast.Constant) and part.value is Ellipsis:
                self.flag(part, "'...' indexing is outside the contract")
            else:
                self.static(part, tensors, "an index")

    def static(self, expr: ast.AST, tensors: set[str], what: str) -> None:
        """``expr`` must be known when the kernel is specialized: a tensor may appear only
        through .shape/.dtype; nl/nisa calls yield tiles, not Python values."""
        static_uses = {id(n.value) for n in ast.walk(expr)
                       if isinstance(n, ast.Attribute) and n.attr in STATIC_ATTRIBUTES}
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id in tensors and id(n) not in static_uses:
                self.flag(n, f"{what} reads tensor {n.id!r}: Python control flow and indices "
                             "must not depend on tensor data")
            elif (isinstance(n, ast.Call) and _dotted(n.func) not in STATIC_CALLS
                  and (_dotted(n.func) or "").startswith(("nl.", "nisa."))):
                self.flag(n, f"{what} calls {_dotted(n.func)}: a tile is not a Python value")


def lint(source: str) -> list[Problem]:
    """The problems of an emitted NKI module, sorted by line; [] when it is in the subset."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Problem(e.lineno or 0, e.offset or 0, f"syntax error: {e.msg}")]
    linter = _Linter()
    linter.module(tree)
    return sorted(set(linter.problems))
