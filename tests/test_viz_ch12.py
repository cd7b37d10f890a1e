import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import diagrams, viz  # noqa: E402


def test_plot_head_grid_draws_every_head_and_the_mean():
    w = torch.softmax(torch.randn(2, 3, 4, 5), -1)
    fig = viz.plot_head_grid(w, list("abcd"), list("vwxyz"))
    maps = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    heads = ("head 1", "head 2", "head 3", "mean of heads")
    assert sorted(maps) == sorted(f"layer {layer}, {h}" for layer in (1, 2) for h in heads)
    column = [ax for ax in fig.axes if ax.get_title().startswith("layer 1")]   # layer 1: one column, mean last
    assert [ax.get_title() for ax in column][-1] == "layer 1, mean of heads"
    assert len({round(ax.get_position().x0, 3) for ax in column}) == 1
    drawn = maps["layer 1, mean of heads"].collections[0].get_array().reshape(4, 5)
    assert torch.allclose(torch.as_tensor(drawn, dtype=torch.float64), w[0].mean(0).double(), atol=1e-6)
    plt.close(fig)


def test_plot_head_grid_names_bad_input():
    with pytest.raises(ValueError, match="4-D"):
        viz.plot_head_grid(torch.rand(3, 4, 5), list("abcd"), list("vwxyz"))
    with pytest.raises(ValueError, match="query_tokens"):
        viz.plot_head_grid(torch.rand(1, 2, 4, 5), list("abc"), list("vwxyz"))


def test_draw_beam_tree_places_children_right_of_their_parent():
    steps = [[(("A",), -0.4, False), (("B",), -1.1, False)],
             [(("B", "A"), -1.2, False), (("A", "A"), -1.6, True)]]
    ax = diagrams.draw_beam_tree(steps, best=("B", "A"))
    labels = {t.get_text(): t.get_position() for t in ax.texts}
    assert set(labels) == {"<bos>", "A", "B", "-0.40", "-1.10", "-1.20", "-1.60"}
    assert labels["-1.20"][0] == 2 and labels["-1.10"][0] == 1 and labels["B"][0] == 1
    assert labels["-1.20"][1] == labels["-1.10"][1]            # an only child sits level with its parent
    assert labels["-1.10"][1] < labels["B"][1]                  # the log-probability above its box (y points down)
    thick = [line for line in ax.lines if line.get_linewidth() > 2]
    assert len(thick) == 2                                      # <bos> -> B -> A
    plt.close(ax.figure)


def test_draw_beam_tree_names_bad_input():
    with pytest.raises(ValueError, match="steps\\[1\\]"):
        diagrams.draw_beam_tree([[(("A",), -0.1, False)], [(("A",), -0.2, False)]])
    with pytest.raises(ValueError, match="missing"):
        diagrams.draw_beam_tree([[(("A",), -0.1, False)], [(("B", "A"), -0.2, False)]])
    with pytest.raises(ValueError, match="at least one"):
        diagrams.draw_beam_tree([])
