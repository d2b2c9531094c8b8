"""visualize(): content checked through cell_labels/cell_values, plus a PNG smoke test."""
import pytest

from tilejit.layout import R, S, SwizzleMode, TileLayout, laneid, warpid
from tilejit.layout import hardware as hw
from tilejit.layout.visualize import cell_labels, cell_values, location_label, visualize


def _mpl():
    pytest.importorskip("matplotlib")


def paper_tile():
    """TIRx paper Figure 3 (left): 8x16 tile over lanes/warps/registers, 2 replicas."""
    return TileLayout(S[(8, 2, 4, 2):(4 @ laneid, 1 @ warpid, 1 @ laneid, 1)]
                      + R[2:4 @ warpid] + 5 @ warpid)


def test_paper_tile_labels():
    labels = cell_labels(paper_tile(), (8, 16))
    assert len(labels) == 8 and all(len(row) == 16 for row in labels)
    assert labels[0][0] == "w5 l0 r0 / w9 l0 r0"
    assert labels[1][0] == "w5 l4 r0 / w9 l4 r0"
    assert labels[0][1] == "w5 l0 r1 / w9 l0 r1"
    assert labels[0][8] == "w6 l0 r0 / w10 l0 r0"
    assert labels[7][15] == "w6 l31 r1 / w10 l31 r1"


def test_paper_tile_values_default_axis():
    vals = cell_values(paper_tile(), (8, 16))          # first non-m shard axis: laneid
    assert vals[1][0] == 4 and vals[7][15] == 31
    warps = cell_values(paper_tile(), (8, 16), axis="warpid")
    assert warps[0][0] == 5 and warps[0][8] == 6


def test_visualize_writes_png(tmp_path):
    _mpl()
    from matplotlib.figure import Figure

    path = tmp_path / "paper_tile.png"
    fig = visualize(paper_tile(), (8, 16), path)
    assert isinstance(fig, Figure)
    data = path.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(paper_tile()) in fig.axes[0].get_title().replace("\n", "")


def test_compose_layout_labels_use_swizzled_m(tmp_path):
    lay = hw.smem_layout((8, 64), "float16", SwizzleMode.B128)
    labels = cell_labels(lay, (8, 64))
    assert labels[0][0] == "m0"
    assert labels[1][0] == "m72"       # row 1, chunk 0 -> chunk 1 of line 1: 64 + 8
    assert labels[7][63] == "m455"     # row 7, chunk 7 ^ 7 = 0, element 7: 448 + 7
    assert cell_values(lay, (8, 64))[1][0] == 1      # default colour: chunk within the row
    _mpl()
    visualize(lay, (8, 64), tmp_path / "smem.png")
    assert (tmp_path / "smem.png").stat().st_size > 0
    lay.visualize((8, 64), tmp_path / "method.png")      # the method, as on TileLayout
    assert (tmp_path / "method.png").read_bytes() == (tmp_path / "smem.png").read_bytes()


def test_one_d_three_d_and_hardware_axes():
    assert cell_labels(TileLayout(S[8]), (8,)) == [[f"m{i}" for i in range(8)]]
    three = cell_labels(TileLayout(S[2, 2, 4]), (2, 2, 4))
    assert len(three) == 4 and three[3][3] == "m15"
    sf = cell_labels(hw.tmem_scale_factor_layout(4), (32, 4))
    assert sf[5][3] == "lane5 col3 / lane37 col3 / lane69 col3 / lane101 col3"
    assert location_label({"m": 2, "warpid": 1, "laneid": 3}, m_name="r") == "w1 l3 r2"


def test_visualize_large_layout_without_text(tmp_path):
    _mpl()
    fig = visualize(hw.wgmma_acc_layout(64), (64, 64), tmp_path / "wgmma.png",
                    max_text_cells=100)
    assert (tmp_path / "wgmma.png").stat().st_size > 0
    assert len(fig.axes[0].texts) == 0
