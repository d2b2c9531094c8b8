"""The atomic ops of the catalogue: ``atomic`` and ``atomic_cas`` with their typed memory
order and sync scope, and ``tile.atomic``; printed, parsed back and verified."""
import pytest

from tilejit.errors import CompilationError, SourceLocation
from tilejit.ir import Builder, KernelIR, parse_kernel, verify
from tilejit.ir.types import BufferType, MemScope, f32, i1, i32

from .samples import FILE

LOC = SourceLocation(FILE, 12, 8)
VECTOR = BufferType(f32, (None,), MemScope.GLOBAL, strides=(1,))


def _kernel(build, param=VECTOR):
    k = KernelIR.new("k", ["x"], [param], {}, SourceLocation(FILE, 10, 0))
    b = Builder(LOC)
    with b.insert_into(k.body):
        build(b, k.param("x"))
    return k


def test_orders_and_scopes_print_parse_and_verify():
    def build(b, x):
        zero = b.const(0, i32)
        b.atomic("add", x, b.const(1.0, f32), [zero])   # the defaults do not print
        b.atomic("max", x, b.const(2.0, f32), [zero], order="relaxed", sync_scope="sys")
        b.atomic_cas(x, b.const(0.0, f32), b.const(3.0, f32), [zero], order="acquire")
        tile = b.alloc(MemScope.FRAGMENT, f32, (4,))
        b.tile("atomic", b.region(x, [zero], [4]), tile, op="add", order="release",
               sync_scope="cta")
    k = verify(_kernel(build))
    text = str(k)
    assert "= atomic(%x, %1, %0) {op = add} : f32" in text
    assert "{op = max, order = relaxed, sync_scope = sys}" in text
    assert "= atomic_cas(%x, %5, %6, %0) {order = acquire} : f32" in text
    assert "tile.atomic(" in text and "{op = add, order = release, sync_scope = cta}" in text
    assert str(parse_kernel(text)) == text


@pytest.mark.parametrize("attrs,message", [({"order": "seq_cst"}, "order"),
                                           ({"sync_scope": "block"}, "sync_scope")])
def test_unknown_orders_and_scopes_are_refused(attrs, message):
    def build(b, x):
        b.atomic("add", x, b.const(1.0, f32), [b.const(0, i32)], **attrs)
    with pytest.raises(CompilationError, match=message):
        _kernel(build)


def test_cas_operands_have_the_element_type():
    def build(b, x):
        b.atomic_cas(x, b.const(0, i32), b.const(1.0, f32), [b.const(0, i32)])
    with pytest.raises(CompilationError, match="atomic_cas operand is i32, buffer holds f32"):
        verify(_kernel(build))


def test_no_atomics_on_bool_or_fragments():
    flags = BufferType(i1, (None,), MemScope.GLOBAL, strides=(1,))

    def on_bool(b, x):
        b.atomic("xchg", x, b.const(True, i1), [b.const(0, i32)])
    with pytest.raises(CompilationError, match="atomic on bool elements"):
        verify(_kernel(on_bool, flags))

    def on_fragment(b, x):
        tile = b.alloc(MemScope.FRAGMENT, f32, (4,))
        b.tile("atomic", tile, b.const(1.0, f32), op="add")
    with pytest.raises(CompilationError, match="updates global or shared memory, not fragment"):
        verify(_kernel(on_fragment))
