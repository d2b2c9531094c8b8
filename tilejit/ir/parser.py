"""Reads the textual IR (see ``printer.py``) back: a tokenizer and a recursive-descent parser.

``parse_kernel(text)`` returns a ``KernelIR``; ``print_kernel(parse_kernel(t)) == t`` for
printed kernels. Syntax errors point at the IR text; errors in an op (unknown op, bad
attribute, wrong types) point at the op's ``loc(...)`` like builder errors do.
"""
from __future__ import annotations

import json
import re

from tilejit.errors import CompilationError, SourceLocation

from .attrs import KERNEL_ATTRS, AttrError, Ident, decode_layout
from .core import Block, KernelIR, Operation, Value
from .ops import get_opdef
from .types import SCALAR_TYPES, BarrierType, BufferType, MemScope, RegionType

__all__ = ["parse_kernel", "parse_type"]

_TOKEN_RE = re.compile(r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<value>%[A-Za-z0-9_]+)
  | (?P<symbol>@[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+|inf\b|nan\b))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[(){}\[\]<>,:=^?])
""", re.VERBOSE)


class _Token:
    __slots__ = ("kind", "text", "line", "col")

    def __init__(self, kind, text, line, col):
        self.kind, self.text, self.line, self.col = kind, text, line, col


def _tokenize(text: str, source: str) -> list[_Token]:
    tokens, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            where = SourceLocation(source, line, pos - line_start)
            raise CompilationError(f"IR syntax: unexpected character {text[pos]!r}", where)
        if match.lastgroup != "space":
            tokens.append(_Token(match.lastgroup, match.group(), line, pos - line_start))
        newlines = match.group().count("\n")
        if newlines:
            line += newlines
            line_start = match.start() + match.group().rindex("\n") + 1
        pos = match.end()
    tokens.append(_Token("eof", "", line, pos - line_start))
    return tokens


class _Parser:
    def __init__(self, text: str, source: str):
        self.lines = text.splitlines()
        self.source = source
        self.tokens = _tokenize(text, source)
        self.pos = 0
        self.values: dict[str, Value] = {}
        self.kernel_file = None

    # -- token helpers ----------------------------------------------------------------
    @property
    def tok(self) -> _Token:
        return self.tokens[self.pos]

    def error(self, message: str, token: _Token | None = None) -> CompilationError:
        token = token or self.tok
        line = self.lines[token.line - 1] if 0 < token.line <= len(self.lines) else ""
        return CompilationError(f"IR syntax: {message}\n    {line}\n    {' ' * token.col}^",
                                SourceLocation(self.source, token.line, token.col))

    def peek(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("punct", "ident")

    def accept(self, text: str) -> bool:
        if self.peek(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> _Token:
        if not self.peek(text):
            raise self.error(f"expected {text!r}, got {self.tok.text or 'end of text'!r}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def take(self, kind: str) -> _Token:
        if self.tok.kind != kind:
            raise self.error(f"expected a {kind}, got {self.tok.text or 'end of text'!r}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def comma_list(self, close: str, item) -> list:
        items = []
        if not self.accept(close):
            items.append(item())
            while self.accept(","):
                items.append(item())
            self.expect(close)
        return items

    # -- values -----------------------------------------------------------------------
    def define(self, token: _Token, value: Value) -> Value:
        name = token.text[1:]
        if name in self.values:
            raise self.error(f"%{name} is defined twice", token)
        value.name_hint = "" if name.isdigit() else name
        self.values[name] = value
        return value

    def use(self) -> Value:
        token = self.take("value")
        if token.text[1:] not in self.values:
            raise self.error(f"use of undefined value {token.text}", token)
        return self.values[token.text[1:]]

    def typed_arg(self) -> tuple[_Token, object]:
        token = self.take("value")
        self.expect(":")
        return token, self.type()

    # -- literals, types, locations ---------------------------------------------------
    def literal(self):
        token = self.tok
        if token.kind == "number":
            self.pos += 1
            is_float = any(c in token.text for c in ".eEin")
            return float(token.text) if is_float else int(token.text)
        if token.kind == "string":
            self.pos += 1
            return json.loads(token.text)
        if token.kind == "ident":
            self.pos += 1
            return {"true": True, "false": False, "none": None}.get(token.text, Ident(token.text))
        if self.accept("["):
            return self.comma_list("]", self.literal)
        if self.accept("{"):
            return dict(self.comma_list("}", self.dict_item))
        raise self.error(f"expected a value, got {token.text or 'end of text'!r}")

    def dict_item(self):
        key = self.tok
        if key.kind not in ("ident", "string"):
            raise self.error(f"expected a key, got {key.text!r}")
        self.pos += 1
        self.expect("=")
        return (json.loads(key.text) if key.kind == "string" else key.text), self.literal()

    def dims(self) -> tuple:
        self.expect("[")
        return tuple(self.comma_list("]", lambda: None if self.accept("?")
                                     else int(self.take("number").text)))

    def type(self):
        token = self.take("ident")
        if token.text in SCALAR_TYPES:
            return SCALAR_TYPES[token.text]
        self.expect("<")
        try:
            if token.text == "barrier":
                result = BarrierType(int(self.take("number").text))
            elif token.text == "buffer":
                result = self.buffer_type_body()
            elif token.text == "region":
                result = self.region_type_body()
            else:
                raise self.error(f"unknown type {token.text!r}", token)
        except (ValueError, TypeError, AttrError) as err:
            raise self.error(f"bad {token.text} type: {err}", token) from None
        self.expect(">")
        return result

    def buffer_type_body(self) -> BufferType:
        scope = MemScope.parse(self.take("ident").text)
        self.expect(",")
        dtype = self.type()
        self.expect(",")
        shape, strides, layout = self.dims(), None, None
        if self.accept(",") and self.accept("strides"):
            self.expect("=")
            strides = self.dims()
            self.accept(",")
        if self.accept("layout"):
            self.expect("=")
            layout = decode_layout(json.loads(self.take("string").text))
        return BufferType(dtype, shape, scope, layout, strides)

    def region_type_body(self) -> RegionType:
        buffer = self.type()
        self.expect(",")
        sizes = self.dims()
        keep = (True,) * len(sizes)
        if self.accept(","):
            self.expect("keep")
            self.expect("=")
            self.expect("[")
            keep = tuple(self.comma_list("]", lambda: self.literal() is True))
        return RegionType(buffer, sizes, keep)

    def loc(self) -> SourceLocation:
        self.expect("loc")
        self.expect("(")
        file = self.kernel_file
        if self.tok.kind == "string":
            file = json.loads(self.take("string").text)
            self.expect(":")
        line = int(self.take("number").text)
        self.expect(":")
        col = int(self.take("number").text)
        self.expect(")")
        return SourceLocation(file, line, col)

    def decode_attrs(self, decls: dict, literals: dict, what: str, loc) -> dict:
        attrs = {}
        for name, literal in literals.items():
            if name not in decls:
                raise CompilationError(f"{what} has no attribute {name!r}", loc)
            try:
                attrs[name] = decls[name].kind.decode(literal)
            except AttrError as err:
                raise CompilationError(f"attribute {name!r} of {what}: {err}", loc) from None
        return attrs

    # -- ops, blocks, kernels ---------------------------------------------------------
    def op(self) -> Operation:
        result_tokens = []
        if self.tok.kind == "value":
            result_tokens = [self.take("value")]
            while self.accept(","):
                result_tokens.append(self.take("value"))
            self.expect("=")
        name_token = self.take("ident")
        operands = self.comma_list(")", self.use) if self.accept("(") else []
        literals = self.literal() if self.peek("{") else {}
        result_types = self.sequence(self.type) if self.accept(":") else []
        loc = self.loc()
        opdef = get_opdef(name_token.text)
        if opdef is None:
            raise CompilationError(f"unknown op {name_token.text!r}", loc)
        if len(result_tokens) != len(result_types):
            raise self.error(f"{len(result_tokens)} result name(s) but "
                             f"{len(result_types)} result type(s)", name_token)
        attrs = self.decode_attrs(opdef.attrs, literals, name_token.text, loc)
        regions = [self.region() for _ in opdef.regions]
        op = Operation(name_token.text, operands, attrs, result_types, regions, loc)
        for token, value in zip(result_tokens, op.results):
            self.define(token, value)
        return op

    def sequence(self, item) -> list:
        """One or more comma-separated items with no brackets around them."""
        items = [item()]
        while self.accept(","):
            items.append(item())
        return items

    def region(self) -> Block:
        self.expect("{")
        self.expect("^")
        self.expect("(")
        args = self.comma_list(")", self.typed_arg)
        self.expect(":")
        block = Block.with_arg_types([t for _, t in args])
        for (token, _), value in zip(args, block.args):
            self.define(token, value)
        while not self.peek("}"):
            block.ops.append(self.op())
        self.expect("}")
        return block

    def kernel(self) -> KernelIR:
        self.expect("kernel")
        name = self.take("symbol").text[1:]
        self.expect("(")
        params = self.comma_list(")", self.typed_arg)
        literals = self.literal() if self.peek("{") else {}
        loc = self.loc()
        self.kernel_file = loc.file
        body = Block.with_arg_types([t for _, t in params])
        for (token, _), value in zip(params, body.args):
            self.define(token, value)
        self.expect("{")
        while not self.peek("}"):
            body.ops.append(self.op())
        self.expect("}")
        if self.tok.kind != "eof":
            raise self.error(f"unexpected {self.tok.text!r} after the kernel")
        attrs = self.decode_attrs(KERNEL_ATTRS, literals, f"kernel {name}", loc)
        return KernelIR(name, body, [t.text[1:] for t, _ in params], attrs, loc)


def parse_kernel(text: str, source: str = "<ir>") -> KernelIR:
    """Parse one printed kernel; ``source`` names the text in syntax errors."""
    return _Parser(text, source).kernel()


def parse_type(text: str):
    """Parse a type's text form (``f32``, ``buffer<...>``, ``region<...>``, ``barrier<n>``)."""
    parser = _Parser(text, "<type>")
    result = parser.type()
    if parser.tok.kind != "eof":
        raise parser.error(f"unexpected {parser.tok.text!r} after the type")
    return result
