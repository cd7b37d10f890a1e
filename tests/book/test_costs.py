"""book.costs: chapter 13's opening picture and the growth curves."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from transformer_lib.book import costs  # noqa: E402


def test_what_is_held_draws_four_panels_whose_held_cells_are_counted_right():
    fig = costs.what_is_held(T=20, block=4, window=2, n_global=1, rank=5)
    axes = fig.axes
    assert len(axes) == 4 and fig.get_size_inches()[0] <= 6.5
    held = [ax.images[0].get_array().sum() for ax in axes]
    # exact: all 400; blockwise: 20 rows x 4 keys; Linformer: 20 x 5
    assert held[0] == 400 and held[1] == 80 and held[3] == 100
    assert 0 < held[2] < 400  # the band and the global row and column
    assert all(text.get_fontsize() >= 9 for ax in axes
               for text in ax.get_xticklabels() + [ax.title, ax.xaxis.label])
    plt.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    (dict(T=10, block=4), "3 \\* block <= T"),
    (dict(T=10, block=2, rank=11), "rank <= T"),
    (dict(T=0), "T must be a positive integer"),
    (dict(window=1.5), "window must be a positive integer"),
])
def test_what_is_held_refuses_shapes_it_cannot_draw(kwargs, match):
    with pytest.raises(ValueError, match=match):
        costs.what_is_held(**kwargs)


def test_plot_growth_draws_each_series_and_a_reference_slope():
    ax = costs.plot_growth([1, 2, 4], {"a": [1, 2, 4], "b": [1, 4, 16]}, xlabel="x",
                           ylabel="y", slope_from="b", slope=2.0)
    lines = ax.get_lines()
    assert len(lines) == 3
    assert list(lines[2].get_ydata()) == [1, 4, 16]  # slope 2 through b's first point
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="series 'a' has 2 values for 3"):
        costs.plot_growth([1, 2, 4], {"a": [1, 2]}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="slope_from"):
        costs.plot_growth([1, 2], {"a": [1, 2]}, xlabel="x", ylabel="y", slope_from="c")


def test_plot_window_accuracy_draws_bolted_on_trained_and_full():
    ax = costs.plot_window_accuracy({None: 0.99, 4: 0.8, 2: 0.5}, {2: 0.98}, [4, 2])
    lines = ax.get_lines()
    assert list(lines[0].get_ydata()) == [80.0, 50.0]
    assert list(lines[1].get_xdata()) == [1] and list(lines[1].get_ydata()) == [98.0]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="no value for windows"):
        costs.plot_window_accuracy({4: 0.8}, {}, [4])


def test_plot_loss_curves_and_generation_speed():
    steps = [0, 100, 200]
    fig = costs.plot_loss_curves(steps, {"a": [5.0, 3.0, 2.0]}, [5.0] * 50 + [2.0] * 50,
                                 reference=3.2, zoom_from=100)
    top, bottom = fig.axes
    assert list(bottom.get_lines()[0].get_xdata()) == [100, 200]
    assert len(top.get_lines()[0].get_xdata()) == 4  # 100 batch losses, means of 25
    plt.close(fig)
    with pytest.raises(ValueError, match="curve 'a' has 2 values for 3 steps"):
        costs.plot_loss_curves(steps, {"a": [1.0, 2.0]}, [1.0] * 25, 1.0, 0)
    fig = costs.plot_generation_speed([32, 64], [100.0, 50.0], [200.0, 200.0])
    assert list(fig.axes[1].get_lines()[0].get_ydata()) == [2.0, 4.0]
    plt.close(fig)
    with pytest.raises(ValueError, match="one rate per length"):
        costs.plot_generation_speed([32], [1.0, 2.0], [1.0])
