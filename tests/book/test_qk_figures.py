"""Chapter 16's QK-norm figure (`transformer_lib.book.qk_figures`)."""
import matplotlib
import pytest

from transformer_lib.book import qk_figures

matplotlib.use("Agg")


def test_plot_logit_growth_draws_both_panels_with_every_run():
    runs = {"plain": {"logits": [3, 30, 300], "train": [4.0, 3.0, 2.9]},
            "QK-norm": {"logits": [3, 4, 5], "train": [4.0, 2.8, 2.5]}}
    fig = qk_figures.plot_logit_growth(runs, bound=4.0, lr=0.1)
    left, right = fig.axes
    assert left.get_yscale() == "log" and "0.1" in right.get_title()
    assert [line.get_label() for line in right.get_lines()] == ["plain", "QK-norm"]
    assert list(left.get_lines()[0].get_ydata()) == [3, 30, 300]
    assert left.get_xlabel() == right.get_xlabel() == "training step"
    with pytest.raises(ValueError, match="runs"):
        qk_figures.plot_logit_growth({}, bound=4.0, lr=0.1)
    matplotlib.pyplot.close(fig)
