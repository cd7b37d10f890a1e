"""The drawing helpers added for chapters 5-10: every head of one layer on one scale (chapter 5)
and the two layouts of the sinusoidal encoding side by side (chapter 6)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib import sinusoidal_encoding
from transformer_lib.book import positions, viz  # noqa: E402


def heat_maps(fig):
    """The QuadMesh of every visible panel, in panel order (not the colour bar's)."""
    return [c for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"
            for c in ax.collections if isinstance(c, matplotlib.collections.QuadMesh)]


def test_plot_heads_draws_every_head_on_one_scale():
    w = torch.rand(6, 3, 5).softmax(-1)
    fig = viz.plot_heads(w, ["a", "b", "c"], list("vwxyz"), ncols=4, mean=True)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert titles == [f"head {i}" for i in range(6)] + ["mean of the heads"]
    maps = heat_maps(fig)
    assert len(maps) == 7
    for i, m in enumerate(maps[:6]):                         # each panel holds its own head
        np.testing.assert_allclose(np.asarray(m.get_array()).reshape(3, 5), w[i].numpy())
    np.testing.assert_allclose(np.asarray(maps[6].get_array()).reshape(3, 5), w.mean(0).numpy(), rtol=1e-6)
    assert {m.get_clim() for m in maps} == {(0.0, 1.0)}      # one colour scale for all
    hidden = [ax for ax in fig.axes if not ax.get_visible()]
    assert len(hidden) == 1                                  # 2 rows x 4 columns, 7 maps
    first = fig.axes[0]
    assert [t.get_text() for t in first.get_yticklabels()] == ["a", "b", "c"]
    plt.close(fig)


def test_plot_heads_without_mean_fills_one_row():
    fig = viz.plot_heads(torch.full((2, 4, 4), 0.25), list("abcd"), list("abcd"), vmax=0.5)
    assert len(heat_maps(fig)) == 2 and all(ax.get_visible() for ax in fig.axes)
    assert heat_maps(fig)[0].get_clim() == (0.0, 0.5)
    plt.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    ({"weights": torch.rand(3, 3)}, "3-D"),
    ({"query_tokens": ["a"]}, "query_tokens"),
    ({"ncols": 0}, "ncols"),
    ({"vmax": 0.0}, "vmax"),
])
def test_plot_heads_refuses_bad_input(kwargs, match):
    args = {"weights": torch.rand(2, 3, 3), "query_tokens": list("abc"), "key_tokens": list("abc")} | kwargs
    with pytest.raises(ValueError, match=match):
        viz.plot_heads(**args)
    plt.close("all")


def test_plot_encoding_layouts_marks_sines_and_cosines():
    pe = sinusoidal_encoding(20, 8)
    cat = torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)
    flags = {"interleaved": [c % 2 == 0 for c in range(8)], "concatenated": [c < 4 for c in range(8)]}
    fig = positions.plot_encoding_layouts({"interleaved": pe, "concatenated": cat}, flags)
    strips, tables = heat_maps(fig)[:2], heat_maps(fig)[2:]     # the top row, then the tables
    for strip, name in zip(strips, flags):
        assert np.asarray(strip.get_array()).ravel().tolist() == [float(f) for f in flags[name]]
        assert strip.cmap(1.0)[:3] == pytest.approx(matplotlib.colors.to_rgb(positions.SINE_COLOUR))
    for mesh, table in zip(tables, (pe, cat)):
        np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(20, 8), table.numpy())
        assert mesh.get_clim() == (-1.0, 1.0)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["interleaved", "concatenated"]
    plt.close(fig)


def test_plot_encoding_layouts_refuses_mismatched_input():
    pe = sinusoidal_encoding(5, 4)
    with pytest.raises(ValueError, match="same keys"):
        positions.plot_encoding_layouts({"a": pe}, {"b": [True] * 4})
    with pytest.raises(ValueError, match="one flag per channel"):
        positions.plot_encoding_layouts({"a": pe}, {"a": [True] * 3})
    with pytest.raises(ValueError, match="2-D"):
        positions.plot_encoding_layouts({"a": pe[0]}, {"a": [True] * 4})
    plt.close("all")
