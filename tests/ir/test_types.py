import numpy as np
import pytest
import torch

from tilejit.ir import parse_type
from tilejit.ir.types import (SCALAR_TYPES, BarrierType, BufferType, MemScope, RegionType,
                              TeamKind, bf16, f8e4m3, f16, f32, f64, i1, i8, i16, i32, i64,
                              promote, u8, u32)
from tilejit.layout import TileLayout


def test_scalar_types_are_hashable_value_objects_with_public_repr():
    assert repr(f32) == "tj.float32" and str(f32) == "f32"
    assert repr(i1) == "tj.bool" and repr(f8e4m3) == "tj.float8_e4m3"
    assert {f32: "a", i32: "b"}[f32] == "a"
    assert SCALAR_TYPES["bf16"] is bf16 and len(SCALAR_TYPES) == 15


@pytest.mark.parametrize("t, is_float, is_int, is_signed, itemsize", [
    (f32, True, False, True, 4), (bf16, True, False, True, 2), (f8e4m3, True, False, True, 1),
    (i1, False, True, False, 1), (u8, False, True, False, 1), (i64, False, True, True, 8),
])
def test_scalar_properties(t, is_float, is_int, is_signed, itemsize):
    assert (t.is_float, t.is_int, t.is_signed, t.itemsize) == (is_float, is_int, is_signed, itemsize)


@pytest.mark.parametrize("a, b, expected", [
    (i32, f16, f16), (f16, f32, f32), (bf16, f16, f32), (i8, i32, i32), (i1, i8, i8),
    (u8, i8, i16), (u32, i32, i64), (f64, i64, f64), (f32, f32, f32),
])
def test_promote_is_numpy_like_and_symmetric(a, b, expected):
    assert promote(a, b) == expected and promote(b, a) == expected


def test_dtype_bridges():
    assert f16.numpy_dtype() == np.float16
    assert bf16.torch_dtype() is torch.bfloat16


def test_enums_print_lower_case_and_team_kinds_are_ordered():
    assert str(MemScope.SHARED) == "shared" and MemScope.parse("psum") is MemScope.PSUM
    assert TeamKind.THREAD < TeamKind.WARP < TeamKind.WARPGROUP < TeamKind.CTA < TeamKind.CLUSTER
    assert max(TeamKind.WARP, TeamKind.CTA) is TeamKind.CTA
    with pytest.raises(ValueError, match="one of"):
        MemScope.parse("registers")


def test_buffer_type_text_and_validation():
    g = BufferType(f32, (None, None), MemScope.GLOBAL, strides=(None, 1))
    assert str(g) == "buffer<global, f32, [?, ?], strides=[?, 1]>"
    assert g == BufferType(f32, [None, None], MemScope.GLOBAL, strides=[None, 1])
    assert hash(g) == hash(BufferType(f32, (None, None), MemScope.GLOBAL, strides=(None, 1)))
    assert str(BufferType(f16, (128, 64), MemScope.SHARED)) == "buffer<shared, f16, [128, 64]>"
    with pytest.raises(ValueError, match="static shape"):
        BufferType(f32, (None,), MemScope.SHARED)
    with pytest.raises(ValueError, match="only global"):
        BufferType(f32, (4,), MemScope.SHARED, strides=(1,))


def test_region_type_drops_integer_indexed_dims():
    g = BufferType(f32, (None, None), MemScope.GLOBAL, strides=(None, 1))
    r = RegionType(g, (1, 64), (False, True))
    assert r.shape == (64,) and r.dtype is f32 and r.scope is MemScope.GLOBAL
    assert str(r) == f"region<{g}, [1, 64], keep=[false, true]>"
    with pytest.raises(ValueError, match="size 1"):
        RegionType(g, (2, 64), (False, True))


@pytest.mark.parametrize("text", [
    "f32", "i1", "barrier<3>", "buffer<global, bf16, [?], strides=[1]>",
    "buffer<fragment, f32, [128, 128]>", "buffer<global, u8, [2, ?, 4]>",
    "region<buffer<global, f32, [?, ?], strides=[?, 1]>, [64, 1], keep=[true, false]>",
    "region<buffer<shared, f16, [8, 8]>, [4, 4]>",
])
def test_type_text_round_trips(text):
    assert str(parse_type(text)) == text


def test_barrier_type():
    assert BarrierType(2) == parse_type("barrier<2>")


def test_layout_in_buffer_type_round_trips():
    layout = TileLayout.parse("(128,64):(64,1)")
    t = BufferType(f16, (128, 64), MemScope.SHARED, layout)
    assert parse_type(str(t)) == t
