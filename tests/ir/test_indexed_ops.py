"""The verifier's checks of tile.permute, tile.gather and tile.scatter (ops_tile.py)."""
import pytest

from tilejit.ir import parse_kernel, verify
from tilejit.ir.types import f16, f32, i1, i32

from .samples import matrix
from .test_verifier import BAD, new_kernel, rejects


def frag(b, dtype, shape):
    return b.alloc("fragment", dtype, shape)


@pytest.mark.parametrize("build, message", [
    (lambda b: b.tile("permute", frag(b, f32, (3, 5)), frag(b, f32, (3, 5)), dims=(1, 0)),
     r"permuting src \[3, 5\] by \[1, 0\] cannot write dst \[3, 5\]"),
    (lambda b: b.tile("permute", frag(b, f32, (5, 3)), frag(b, f32, (3, 5)), dims=(0, 0)),
     "not a permutation"),
    (lambda b: b.tile("gather", frag(b, f32, (4, 5)), frag(b, f32, (3, 5)), frag(b, f32, (4, 5)),
                      axis=0), "the index of a gather must be an integer tile, got f32"),
    (lambda b: b.tile("gather", frag(b, f32, (4, 5)), frag(b, f32, (3, 5)), frag(b, i1, (4, 5)),
                      axis=0), "must be an integer tile, got i1"),
    (lambda b: b.tile("gather", frag(b, f32, (4, 5)), frag(b, f32, (3, 5)), frag(b, i32, (4,)),
                      axis=0), "has rank 1 but the tile it indexes has rank 2"),
    (lambda b: b.tile("gather", frag(b, f32, (4, 5)), frag(b, f32, (3, 5)), frag(b, i32, (4, 5)),
                      axis=2), "axis 2 out of range"),
    (lambda b: b.tile("gather", frag(b, f32, (4, 5)), frag(b, f32, (3, 5)), frag(b, i32, (4, 2)),
                      axis=0), r"index shape \[4, 2\] does not broadcast to dst \[4, 5\]"),
    (lambda b: b.tile("scatter", frag(b, f32, (4, 5)), frag(b, i32, (2, 5)), frag(b, f32, (3, 5)),
                      axis=0), r"src shape \[3, 5\] and index shape \[2, 5\] do not broadcast"),
    (lambda b: b.tile("scatter", frag(b, f32, (4, 5)), frag(b, i32, (2, 5, 1)), b.const(1.0, f32),
                      axis=0), "the index of a scatter has rank 3"),
])
def test_indexed_op_checks(build, message):
    k, b = new_kernel(matrix(f16))
    with b.insert_into(k.body), b.at(BAD):
        build(b)
    rejects(k, message)


def test_well_formed_indexed_ops_verify():
    k, b = new_kernel(matrix(f16))
    with b.insert_into(k.body):
        b.tile("permute", frag(b, f32, (5, 3)), frag(b, f32, (3, 5)), dims=(1, 0))
        b.tile("gather", frag(b, f32, (4, 5)), k.params[0], frag(b, i32, (4, 1)), axis=0,
               other=-1.0)
        b.tile("scatter", k.params[0], frag(b, i32, (4, 1)), frag(b, f32, (4, 5)), axis=0)
    verify(k)
    assert str(parse_kernel(str(k))) == str(k)
