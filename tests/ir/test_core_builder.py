import pytest

from tilejit.errors import CompilationError, SourceLocation
from tilejit.ir import Block, Builder, KernelIR, Operation, walk
from tilejit.ir.verifier import verify
from tilejit.ir.types import (
    BarrierType,
    BufferType,
    MemScope,
    RegionType,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)

from .samples import ALL, FILE, matrix, vector_1d

LOC = SourceLocation(FILE, 7, 4)


def kernel_and_builder(*param_types):
    k = KernelIR.new("k", [f"p{i}" for i in range(len(param_types))], param_types, {}, LOC)
    return k, Builder(LOC)


def test_kernel_new_makes_params_the_body_arguments():
    k = KernelIR.new("add", ["x", "n"], [vector_1d(), i32], {"num_warps": 8}, LOC)
    assert k.params == k.body.args and k.param("n").type is i32
    assert k.param("x").owner is k.body and k.param("n").index == 1
    assert k.attrs["num_warps"] == 8 and k.attrs["cluster"] == (1, 1, 1)  # defaults filled in
    with pytest.raises(CompilationError, match="num_warps"):
        KernelIR.new("add", [], [], {"num_warps": "four"}, LOC)


def test_builder_results_are_typed_and_located():
    k, b = kernel_and_builder(matrix(f16), i32)
    x, n = k.params
    with b.insert_into(k.body):
        d = b.buffer_dim(x, 0)
        s = b.cast(n, f32)
        with b.at(SourceLocation(FILE, 9, 2)):
            r = b.region(x, [n, n], (1, 32), (False, True))
        v = b.load(r, [n])
        c = b.cmp("lt", n, b.const(3, i32))
        sel = b.select(c, s, b.unary("exp", s))
    assert d.type is i64 and s.type is f32 and c.type is i1 and sel.type is f32
    assert isinstance(r.type, RegionType) and r.type.shape == (32,) and v.type is f16
    assert r.owner.loc.line == 9 and v.owner.loc == LOC
    assert [op.name for op in k.body][:3] == ["buffer_dim", "cast", "region"]


def test_attrs_are_normalized_and_defaults_filled():
    k, b = kernel_and_builder()
    with b.insert_into(k.body):
        buf = b.alloc("shared", "f16", [16, 16])
        idx = b.thread_index("warp_id")
        one = b.const(1, f32)
    assert buf.owner.attrs == {"scope": MemScope.SHARED, "dtype": f16, "shape": (16, 16),
                               "layout": None, "offset": None, "per_team": None,
                               "layout_note": None}
    assert buf.type == BufferType(f16, (16, 16), MemScope.SHARED)
    assert idx.owner.attrs["dim"] == 0 and one.owner.attrs["value"] == 1.0


def test_approximate_math_is_a_checked_attribute_of_unary():
    k, b = kernel_and_builder(vector_1d())
    with b.insert_into(k.body):
        x = b.const(1.5, f32)
        assert b.unary("exp", x, approx=True).owner.attrs["approx"] is True
        assert b.unary("exp", x).owner.attrs["approx"] is False
    verify(k)
    for op, x, message in (("sqrt", (1.5, f32), "'sqrt' has no approximate form"),
                           ("log", (1.5, f64), "approximate 'log' is single precision")):
        k, b = kernel_and_builder(vector_1d())
        with b.insert_into(k.body):
            b.unary(op, b.const(*x), approx=True)
        with pytest.raises(CompilationError, match=message):
            verify(k)


def test_structured_helpers_create_typed_blocks():
    k, b = kernel_and_builder(i32)
    with b.insert_into(k.body):
        zero = b.const(0, i32)
        loop, body = b.for_(zero, k.params[0], b.const(1, i32), [b.const(0.0, f32), zero])
        assert [a.type for a in body.args] == [i32, f32, i32] and loop.result_types == (f32, i32)
        op, then_block, else_block = b.if_(b.cmp("eq", zero, zero), [f32])
        assert op.regions == (then_block, else_block) and op.result.type is f32
        w, before, after = b.while_([zero])
        assert [a.type for a in before.args] == [i32] == [a.type for a in after.args]
        team, team_body = b.team("warp")
        assert team.regions == (team_body,) and team.results == ()
        bar = b.alloc_barrier(2)
        assert bar.type == BarrierType(2)


def test_builder_errors_point_at_the_current_location():
    k, b = kernel_and_builder(vector_1d())
    with b.insert_into(k.body):
        with pytest.raises(CompilationError, match="unknown op 'tile.transpose'") as err:
            b.create("tile.transpose")
        assert err.value.loc == LOC and f"{FILE}:7:4" in str(err.value)
        with pytest.raises(CompilationError, match="'op' of binary: expected one of"):
            b.binary("atan2", b.const(1, i32), b.const(2, i32))
        with pytest.raises(CompilationError, match="must be a buffer or region"):
            b.load(b.const(1, i32), [])
        with pytest.raises(CompilationError, match="has no attribute 'axis'"):
            b.create("tile.copy", (k.params[0], k.params[0]), {"axis": 1})
        with pytest.raises(CompilationError, match="needs attribute 'op'"):
            b.create("tile.reduce", (k.params[0], k.params[0]), {"axis": 0})
        one = b.const(1, i32)
        with pytest.raises(CompilationError, match="produces i1, not f32"):
            b.create("cmp", (one, one), {"pred": "eq"}, [f32])
    with pytest.raises(CompilationError, match="no insertion point"):
        Builder(LOC).sync()


def test_replace_returns_a_new_validated_op_and_keeps_names():
    k, b = kernel_and_builder()
    with b.insert_into(k.body):
        one = b.const(1, i32)
        two = b.binary("add", one, one)
    two.name_hint = "two"
    op = two.owner
    new = op.replace(attrs={"op": "mul"})
    assert new is not op and new.attrs["op"] == "mul" and op.attrs["op"] == "add"
    assert new.result is not two and new.result.name_hint == "two"
    with pytest.raises(CompilationError, match="expected one of"):
        op.replace(attrs={"op": "atan2"})
    with b.insert_into(k.body):
        wider = b.const(1, i64)
    assert op.replace(operands=[wider, wider]).result.type is i64  # result type recomputed


def test_replace_with_operands_of_the_same_types_keeps_the_checked_signature():
    # the rewriter rebuilds every op with mapped operands: same types skip re-validation,
    # anything else is validated and typed as a new op would be
    k, b = kernel_and_builder()
    with b.insert_into(k.body):
        one, other = b.const(1, i32), b.const(2, i32)
        two = b.binary("add", one, one)
        half = b.const(1.0, f16)
    op = two.owner
    new = op.replace(operands=[other, other])
    assert new.operands == (other, other) and new.result.type is i32 and new.result is not two
    assert new.attrs == op.attrs and new.attrs is not op.attrs and new.result.owner is new
    assert op.replace(operands=[half, half]).result.type is f16   # other types: recomputed
    with pytest.raises(CompilationError, match="not an IR value"):
        op.replace(operands=[3, one])
    with pytest.raises(CompilationError, match="takes"):
        op.replace(operands=[one])


def test_walk_is_pre_order_through_regions():
    names = [op.name for op in walk(ALL["softmax_like"]().body)]
    assert names.index("for") < names.index("tile.reduce") < names.index("store")
    assert names.count("yield") == 1


def test_blocks_own_their_arguments():
    block = Block.with_arg_types([i32], ["i"])
    with pytest.raises(ValueError, match="already belongs"):
        Block(block.args)
    assert block.args[0].name_hint == "i" and block.terminator is None


def test_operation_requires_ir_values():
    with pytest.raises(CompilationError, match="not an IR value"):
        Operation("yield", [3], loc=LOC)
