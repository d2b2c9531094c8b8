"""A launch never reuses a binary built with outside values that have since changed: a
mutable global is refused when the kernel compiles, a rebound immutable one recompiles."""
import sys

import pytest
import torch

import tilejit as tj

SIZES = (4.0,)


@tj.kernel
def first_size(out):
    out[0] = SIZES[0]


def test_a_list_mutated_in_place_cannot_leave_a_stale_binary(monkeypatch, fresh_cache):
    # The issue: SIZES = [4.0]; a launch; SIZES[0] = 9.0; the next launch still wrote 4.0.
    monkeypatch.setattr(sys.modules[__name__], "SIZES", [4.0])
    with pytest.raises(tj.CompilationError, match="'SIZES' is a list") as info:
        first_size[(1,)](torch.zeros(1))
    assert info.value.line == first_size.fn.__code__.co_firstlineno + 2


def test_a_rebound_tuple_recompiles_with_its_new_value(monkeypatch, fresh_cache):
    out = torch.zeros(1)
    first_size[(1,)](out)
    assert out.item() == 4.0
    monkeypatch.setattr(sys.modules[__name__], "SIZES", (9.0,))
    first_size[(1,)](out)
    assert out.item() == 9.0


class Tiles:
    SCALE = 2.0
    SIZES = (3.0,)


@tj.kernel
def class_constants(out):
    out[0] = Tiles.SCALE * Tiles.SIZES[0]


def test_a_rebound_class_attribute_recompiles(monkeypatch, fresh_cache):
    out = torch.zeros(1)
    class_constants[(1,)](out)
    assert out.item() == 6.0
    monkeypatch.setattr(Tiles, "SCALE", 5.0)     # was compiled in and never looked at again
    class_constants[(1,)](out)
    assert out.item() == 15.0


def test_a_mutable_class_attribute_is_refused(monkeypatch, fresh_cache):
    monkeypatch.setattr(Tiles, "SIZES", [3.0])
    with pytest.raises(tj.CompilationError, match="'.*Tiles.SIZES' is a list"):
        class_constants[(1,)](torch.zeros(1))
