"""ComposeLayout: XOR swizzles over a tile layout."""
import pytest

from tilejit.errors import LayoutError
from tilejit.layout import ComposeLayout, S, SwizzleMode, TileLayout, laneid, parse_layout

ROWS_64 = TileLayout(S[(8, 64):(64, 1)])  # eight 128-byte rows of fp16


def reference_swizzle(address, per_element, swizzle_len, atom_len):
    x = address >> per_element
    fx = x ^ ((x & ((2**swizzle_len - 1) << atom_len)) >> atom_len)
    return (fx << per_element) + (address & (2**per_element - 1))


def test_modes():
    assert [mode.swizzle_len for mode in SwizzleMode] == [0, 1, 2, 3]
    assert SwizzleMode.B128.bytes == 128 and SwizzleMode.B32.bytes == 32
    assert SwizzleMode.NONE.bytes == 0


@pytest.mark.parametrize("mode, elem_bytes, params", [
    (SwizzleMode.B128, 2, (3, 3, 3)),
    (SwizzleMode.B64, 2, (3, 2, 3)),
    (SwizzleMode.B32, 4, (2, 1, 3)),
    (SwizzleMode.B128, 1, (4, 3, 3)),
    (SwizzleMode.NONE, 2, (3, 0, 3)),
    ("b128", 16, (0, 3, 3)),
])
def test_for_mode(mode, elem_bytes, params):
    layout = ComposeLayout.for_mode(mode, elem_bytes, ROWS_64)
    assert (layout.per_element, layout.swizzle_len, layout.atom_len) == params
    assert layout.tile_layout == ROWS_64


def test_for_mode_errors():
    with pytest.raises(LayoutError, match="does not divide"):
        ComposeLayout.for_mode(SwizzleMode.B128, 3, ROWS_64)
    with pytest.raises(LayoutError, match="unknown swizzle mode"):
        ComposeLayout.for_mode("B256", 2, ROWS_64)


def test_fp16_128b_swizzle_moves_16_byte_chunks_by_row():
    layout = ComposeLayout(3, 3, 3, ROWS_64)
    # row r, chunk c -> chunk c ^ r; inside a chunk the 8 halves stay in order
    for row in range(8):
        for col in range(64):
            chunk, lane = divmod(col, 8)
            expected = row * 64 + (chunk ^ row) * 8 + lane
            assert layout.apply(row, col, shape=(8, 64)) == {"m": expected}


@pytest.mark.parametrize("params", [(3, 3, 3), (0, 2, 2), (2, 1, 4), (1, 0, 0), (4, 2, 5)])
def test_swizzle_formula(params):
    layout = ComposeLayout(*params, TileLayout(S[4096:1]))
    for address in range(0, 4096, 7):
        assert layout.swizzle(address) == reference_swizzle(address, *params)
        assert layout.apply(address) == {"m": reference_swizzle(address, *params)}


def test_other_axes_are_untouched():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[(32, 64):(1@laneid, 9)]))
    assert layout.apply(5, 10, shape=(32, 64)) == {"laneid": 5, "m": reference_swizzle(90, 3, 3, 3)}
    assert layout.locations(5, 10, shape=(32, 64)) == [layout.apply(5, 10, shape=(32, 64))]


def test_tile_layout_without_m_is_unchanged():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[32:1@laneid]))
    assert layout.apply(9) == {"laneid": 9}


@pytest.mark.parametrize("args, message", [
    ((-1, 3, 3), "per_element >= 0"),
    ((3, -1, 3), "swizzle_len >= 0"),
    ((3, 3, 2), "overlap"),
    ((3.0, 3, 3), "integer"),
])
def test_invalid_swizzles(args, message):
    with pytest.raises(LayoutError, match=message):
        ComposeLayout(*args, ROWS_64)


def test_size_and_span():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[(3, 64):(64, 1)]))
    assert layout.size() == 192
    assert layout.span() == 192  # whole 64-element swizzle blocks
    assert ComposeLayout(3, 3, 3, TileLayout(S[(3, 60):(64, 1)])).span() == 192
    assert ComposeLayout(3, 3, 3, TileLayout(S[8:1@laneid])).span(laneid) == 8


def test_text_round_trip():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[(8, 64):(64, 1@laneid)] + 4))
    text = str(layout)
    assert text == "swizzle(3,3,3, (8,64):(64@m,1@laneid) + 4@m)"
    assert ComposeLayout.parse(text) == layout
    assert parse_layout(text) == layout
    assert repr(layout).startswith("ComposeLayout(3, 3, 3, TileLayout(")


@pytest.mark.parametrize("text, message", [
    ("swizzle(3,3, (8):(1))", "expected"),
    ("swizzle(3,3,2, 8:1)", "overlap"),
    ("swizzle(3,3,3, 8:1 *)", "unexpected"),
    ("(8):(1)", "expected"),
])
def test_parse_errors(text, message):
    with pytest.raises(LayoutError, match=message):
        ComposeLayout.parse(text)


def test_builds_from_expression_and_compares():
    a = ComposeLayout(3, 3, 3, S[(8, 64):(64, 1)])
    assert a == ComposeLayout(3, 3, 3, ROWS_64) and hash(a) == hash(ComposeLayout(3, 3, 3, ROWS_64))
    assert a.equivalent(ComposeLayout(3, 3, 3, TileLayout(S[512:1])))
    assert not a.equivalent(ComposeLayout(3, 2, 3, ROWS_64))
    assert ComposeLayout(3, 0, 3, ROWS_64).equivalent(TileLayout(S[512:1]))
    assert a.canonicalize().tile_layout == TileLayout(S[512:1])
