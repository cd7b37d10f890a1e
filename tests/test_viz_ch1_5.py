"""The plotting helpers of chapters 3-5: contrast-aware labels, matrices as blocks, the head split."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import shapes, viz  # noqa: E402


def test_text_colour_contrasts_with_the_cell():
    assert viz.text_colour("#FFFFFF") == "black"
    assert viz.text_colour("#000000") == "white"
    assert viz.text_colour("#F0E442") == "black"    # Okabe-Ito yellow
    assert viz.text_colour("#00204C") == "white"    # the dark end of cividis
    assert viz.text_colour((0.49, 0.49, 0.47)) == "black"  # the grey middle of cividis: black reads better


def test_head_split_layout_is_the_real_reshape():
    token, part = shapes.head_split_layout(3, 512, 8)
    assert token.shape == part.shape == (8, 3)
    assert torch.equal(token, torch.arange(3).expand(8, 3))          # every head holds every token
    assert torch.equal(part, torch.arange(8)[:, None].expand(8, 3))  # head i holds slice i
    # The mistake view(B, h, T, d_k): head 0 holds the first token three times, in slices 0, 1, 2.
    token, part = shapes.head_split_layout(3, 512, 8, direct_view=True)
    assert token[0].tolist() == [0, 0, 0] and part[0].tolist() == [0, 1, 2]
    # It agrees with the library's own split on real numbers.
    from transformer_lib import MultiHeadAttention
    x = torch.randn(1, 3, 16)
    heads = MultiHeadAttention(16, 4).split_heads(x)
    token, part = shapes.head_split_layout(3, 16, 4)
    for i in range(4):
        for t in range(3):
            assert torch.equal(heads[0, i, t], x[0, token[i, t], 4 * part[i, t]:4 * part[i, t] + 4])
    with pytest.raises(ValueError, match="divisible"):
        shapes.head_split_layout(3, 10, 4)


def test_draw_head_split_colours_each_right_head_with_one_colour():
    ax = shapes.draw_head_split(["a", "b"], d_model=8, n_heads=4, show_mistake=False)
    cells = [p for p in ax.patches if p.get_width() == pytest.approx(1.1)]
    assert len(cells) == 2 * 2 * 4                    # two panels of T x h cells
    right_panel = sorted(cells, key=lambda p: p.get_x())[-8:]
    colours = {round(p.get_x(), 3): set() for p in right_panel}
    for p in right_panel:
        colours[round(p.get_x(), 3)].add(p.get_facecolor())
    assert all(len(c) == 1 for c in colours.values())  # one slice per head
    with pytest.raises(ValueError, match="n_heads"):
        shapes.draw_head_split(["a"], d_model=16, n_heads=16)
    plt.close("all")


def test_draw_blocks_and_plot_matrix_label_what_they_draw():
    ax = shapes.draw_blocks([{"name": "X", "shape": (2, 512), "rows": ["Thinking", "Machines"]}, "×",
                          {"name": "W", "shape": (512, 64)}, "=", {"name": "Q", "shape": (2, 64)}])
    texts = [t.get_text() for t in ax.texts]
    assert "X\n(2, 512)" in texts and "W\n(512, 64)" in texts and "Q\n(2, 64)" in texts and "Thinking" in texts
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights[0] < heights[-1]                   # 2 rows drawn shorter than 512
    with pytest.raises(ValueError, match="row labels"):
        shapes.draw_blocks([{"name": "X", "shape": (2, 4), "rows": ["only one"]}])
    ax = viz.plot_matrix(torch.tensor([[1.0, -1.0], [0.0, 0.5]]), ["a", "b"], ["c", "d"], colorbar_label="v")
    cell_text = {t.get_text(): t.get_color() for t in ax.texts}
    assert cell_text["1.00"] == "black" and cell_text["-1.00"] == "white"   # bright and dark ends of cividis
    with pytest.raises(ValueError, match="values"):
        viz.plot_matrix(torch.zeros(2, 3), ["a", "b"], ["c", "d"])
    plt.close("all")


