"""The opening figures of chapters 7-10: no wider than the page's column, no text under 9 points,
and the mask figure draws the masks it names."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from transformer_lib.book import layer_figures  # noqa: E402

FIGURES = {
    "encoder layer": layer_figures.encoder_layer_figure,
    "masks": lambda: layer_figures.mask_figure(["the", "cat", "sat", "<pad>", "<pad>"]),
    "decoder layer": layer_figures.decoder_layer_figure,
    "full model": layer_figures.full_model_figure,
}


@pytest.mark.parametrize("name", FIGURES)
def test_figures_fit_the_column_with_legible_text(name):
    fig = FIGURES[name]()
    try:
        width, _ = fig.get_size_inches()
        assert width <= layer_figures.MAX_WIDTH
        sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
        assert sizes and min(sizes) >= layer_figures.MIN_FONT, (name, min(sizes))
    finally:
        plt.close(fig)


def test_the_mask_figure_draws_padding_causal_and_both():
    fig = layer_figures.mask_figure(["a", "b", "<pad>"])
    try:
        padding, causal, both = (ax.images[0].get_array() for ax in fig.axes)
        assert np.array_equal(padding, [[1, 1, 0]] * 3)
        assert np.array_equal(causal, np.tril(np.ones((3, 3))))
        assert np.array_equal(both, [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
        assert [ax.get_title() for ax in fig.axes] == ["padding mask", "causal mask",
                                                      "target mask = both"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("tokens", [[], "the cat", ["a", 3]])
def test_the_mask_figure_refuses_what_is_not_a_list_of_tokens(tokens):
    with pytest.raises(ValueError, match="tokens must be a non-empty list of strings"):
        layer_figures.mask_figure(tokens)
