import pytest

from tilejit.errors import CompilationError, SourceLocation
from tilejit.ir import Builder, FilterSpec, KernelIR, parse_kernel, verify
from tilejit.ir.types import f16, f32, i1, i8, i32

from .samples import ALL, FILE, matrix, vector_1d

LOC = SourceLocation(FILE, 12, 8)
BAD = SourceLocation(FILE, 30, 5)


def new_kernel(*param_types):
    k = KernelIR.new("k", [f"p{i}" for i in range(len(param_types))], param_types, {},
                     SourceLocation(FILE, 10, 0))
    return k, Builder(LOC)


def rejects(kernel, message, loc=BAD):
    with pytest.raises(CompilationError, match=message) as err:
        verify(kernel)
    assert err.value.loc == loc, str(err.value)
    assert f"{loc.file}:{loc.line}:{loc.col}" in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_kernels_verify(name):
    assert verify(ALL[name]()) is not None


def test_a_shared_memo_checks_each_signature_once_and_a_changed_one_again():
    from tilejit.ir import walk
    accepted = {}
    kernel = ALL["softmax_like"]()
    verify(kernel, accepted)
    known = dict(accepted)
    assert known and verify(kernel, accepted) is kernel and accepted == known
    binary = next(op for op in walk(kernel.body) if op.name == "binary")
    binary.attrs = {**binary.attrs, "op": "atan2"}   # a new value: checked, and refused
    with pytest.raises(CompilationError, match="expected one of"):
        verify(kernel, accepted)


def test_use_before_definition():
    k, b = new_kernel()
    with b.insert_into(k.body):
        one = b.const(1, f32)
        one.name_hint = "one"
        with b.at(BAD):
            b.unary("neg", one)
    k.body.ops.reverse()
    text = rejects(k, "operand %one of unary is used before its definition")
    assert "in: %0 = unary(%one) {op = neg} : f32" in text


def test_use_of_a_value_from_a_sibling_region():
    k, b = new_kernel()
    with b.insert_into(k.body):
        _, then_block, else_block = b.if_(b.const(True, i1), [f32])
        with b.insert_into(then_block):
            inner = b.const(2.0, f32)
            b.yield_([inner])
        with b.insert_into(else_block), b.at(BAD):
            b.yield_([inner])
    rejects(k, "is defined in a region that does not enclose this use")


def test_use_of_a_loop_body_value_after_the_loop():
    k, b = new_kernel()
    with b.insert_into(k.body):
        zero = b.const(0, i32)
        _, body = b.for_(zero, zero, zero)
        with b.insert_into(body):
            inner = b.binary("add", body.args[0], zero)
            b.yield_()
        with b.at(BAD):
            b.binary("add", inner, zero)
    rejects(k, "defined in a region that does not enclose")


def test_value_of_another_kernel():
    other, _ = new_kernel(i32)
    k, b = new_kernel()
    with b.insert_into(k.body), b.at(BAD):
        b.unary("neg", other.params[0])
    rejects(k, "is not defined in this kernel")


def test_missing_terminator_points_at_the_parent():
    k, b = new_kernel()
    with b.insert_into(k.body):
        zero = b.const(0, i32)
        with b.at(BAD):
            _, body = b.for_(zero, zero, zero)
        with b.insert_into(body):
            b.sync()
    rejects(k, "region 'body' of for must end with yield")


def test_terminator_only_at_the_end_of_a_region():
    k, b = new_kernel()
    with b.insert_into(k.body):
        with b.at(BAD):
            b.yield_()
    rejects(k, "yield must be the last op of a region")


def test_yield_count_mismatch():
    k, b = new_kernel()
    with b.insert_into(k.body):
        zero, acc = b.const(0, i32), b.const(0.0, f32)
        _, body = b.for_(zero, zero, zero, [acc])
        with b.insert_into(body), b.at(BAD):
            b.yield_([acc, acc])
    rejects(k, r"yield passes 2 value\(s\) \(f32, f32\) but for expects 1 \(f32\)")


def test_yield_type_mismatch_in_if_and_team():
    k, b = new_kernel()
    with b.insert_into(k.body):
        _, team_body = b.team("warp", [f32])
        with b.insert_into(team_body), b.at(BAD):
            b.yield_([b.const(1, i32)])
    rejects(k, r"yield passes 1 value\(s\) \(i32\) but team expects 1 \(f32\)")


def test_while_regions():
    k, b = new_kernel()
    with b.insert_into(k.body):
        start = b.const(0, i32)
        loop, before, after = b.while_([start])
        with b.insert_into(before):
            b.condition(b.cmp("lt", before.args[0], b.const(10, i32)), [before.args[0]])
        with b.insert_into(after):
            b.yield_([b.binary("add", after.args[0], b.const(1, i32))])
    verify(k)
    assert "condition(" in str(k) and str(parse_kernel(str(k))) == str(k)
    with b.insert_into(after), b.at(BAD):
        after.ops[-1:] = []
        b.condition(b.const(True, i1))
    rejects(k, "region 'after' of while must end with yield")


def test_wrong_attribute_type_is_caught_even_after_construction():
    k, b = new_kernel()
    with b.insert_into(k.body), b.at(BAD):
        op = b.thread_index("warp_id").owner
    op.attrs["kind"] = "warp_index"  # a pass that edited attrs in place behind our back
    rejects(k, "'kind' of thread_index: expected one of")


def test_load_with_the_wrong_number_of_indices():
    k, b = new_kernel(matrix(f16))
    with b.insert_into(k.body), b.at(BAD):
        b.load(k.params[0], [b.const(0, i32)])
    rejects(k, "load of a rank-2 buffer needs 2 indices, got 1")


def test_unknown_op_in_text_is_located():
    text = 'kernel @k() loc("/src/kernels.py":10:0) {\n  tile.magic loc(30:5)\n}'
    with pytest.raises(CompilationError, match="unknown op 'tile.magic'") as err:
        parse_kernel(text)
    assert err.value.loc == BAD


@pytest.mark.parametrize("build, message", [
    (lambda b, k: b.binary("add", b.const(1, i32), b.const(1.0, f32)), "operand types differ: i32 and f32"),
    (lambda b, k: b.binary("xor", b.const(1.0, f32), b.const(1.0, f32)), "'xor' needs integer operands"),
    (lambda b, k: b.unary("exp", b.const(1, i32)), "'exp' needs a float operand"),
    (lambda b, k: b.const(300, i8), "300 does not fit in i8"),
    (lambda b, k: b.const(1.5, i32), "needs an int"),
    (lambda b, k: b.thread_index("lane_id", 1), "lane_id has no dim 1"),
    (lambda b, k: b.buffer_dim(k.params[0], 2), "dim 2 out of range"),
    (lambda b, k: b.store(k.params[0], b.const(1.0, f32), [b.const(0, i32)] * 2),
     "stored value is f32, buffer holds f16"),
    (lambda b, k: b.view(b.alloc("shared", f16, (4, 4)), (8, 4)), "view changes the element count"),
    (lambda b, k: b.alloc_barrier(0), "positive count"),
    (lambda b, k: b.tile("gemm", b.alloc("fragment", f32, (64, 64)), b.alloc("shared", f16, (64, 32)),
                         b.alloc("shared", f16, (16, 64))), "gemm shapes do not agree"),
    (lambda b, k: b.tile("reduce", b.alloc("fragment", f32, (4,)), b.alloc("fragment", f32, (4, 8)),
                         op="sum", axis=0), r"cannot write \[4\]"),
    (lambda b, k: b.tile("pointwise", b.alloc("fragment", f32, (4,)), op="add"), "takes 2 source"),
    (lambda b, k: b.tile("pointwise", b.alloc("fragment", f32, (4, 8)), b.alloc("fragment", f32, (4,)),
                         op="exp"), "does not broadcast"),
    (lambda b, k: b.tile("copy_async", b.alloc("shared", f16, (4,)), b.alloc("shared", f16, (4,)),
                         b.const(0, i32)), "optional \\(barrier, index\\) pair"),
    (lambda b, k: b.create("device_print", [b.const(1.0, f32)], {"fmt": "%d", "printf": True}),
     "conversion %d cannot print an operand of type f32"),
    (lambda b, k: b.create("device_print", [b.const(1, i32)], {"fmt": "%d %d", "printf": True}),
     "the format has 2 conversions for 1 operands"),
    (lambda b, k: b.create("device_print", [], {"fmt": "100%!", "printf": True}),
     "is not a printf conversion"),
])
def test_per_op_checks(build, message):
    k, b = new_kernel(matrix(f16))
    with b.insert_into(k.body), b.at(BAD):
        build(b, k)
    rejects(k, message)


def test_block_argument_types_must_match_the_region_spec():
    text = ('kernel @k() loc("/src/kernels.py":10:0) {\n'
            '  %0 = const {value = 0} : i32 loc(11:0)\n'
            '  for(%0, %0, %0) loc(30:5) {\n'
            '  ^(%i: i64):\n'
            '    yield loc(12:0)\n'
            '  }\n'
            '}')
    rejects(parse_kernel(text), r"region 'body' of for takes \(i32\), its block has arguments \(i64\)")


def test_filters_and_kernel_attrs_are_checked():
    with pytest.raises(ValueError, match=r"filter range \[4, 2\) on warp is empty"):
        FilterSpec("warp", 4, 2)
    text = ('kernel @k() loc("/src/kernels.py":10:0) {\n  %0 = const {value = true} : i1 loc(11:0)\n'
            '  if(%0) {filter = {axis = lanes, lo = 0, hi = 1}} loc(30:5) {\n  ^():\n    yield loc(12:0)\n'
            '  } {\n  ^():\n    yield loc(12:0)\n  }\n}')
    with pytest.raises(CompilationError, match="filter axis must be one of") as err:
        parse_kernel(text)
    assert err.value.loc == BAD
    with pytest.raises(CompilationError, match="'cluster' of kernel k"):
        KernelIR.new("k", [], [], {"cluster": (1, "x", 1)}, LOC)
    k, b = new_kernel(vector_1d())
    k.attrs["num_warps"] = 2.5
    with pytest.raises(CompilationError, match="num_warps"):
        verify(k)
