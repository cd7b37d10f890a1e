"""The drawing helpers of chapters 1-3: the recurrent encoder-decoder (book.diagrams.
draw_seq2seq), chapter 3's opening picture (draw_average) and the similarity maps of chapter
2 (viz.plot_similarity without numbers in the cells)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import pictures, viz  # noqa: E402


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_the_bidirectional_encoder_has_two_rows_and_the_summary_comes_from_both_ends():
    ax = pictures.draw_seq2seq(list("pqr"), list("xy"))
    assert {"forward", "backward", "decoder", "c"} <= set(texts(ax))
    one_way = pictures.draw_seq2seq(list("pqr"), list("xy"), bidirectional=False)
    assert "backward" not in texts(one_way) and "c" in texts(one_way)
    # the drawing with c has more arrows than the one-way one: the backward row's links and
    # the line from its first state to c
    def arrows(a):
        return sum(1 for t in a.texts if t.get_text() == "" and t.arrow_patch)
    assert arrows(ax) > arrows(one_way)
    plt.close("all")


def test_attention_lines_replace_the_summary():
    w = torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5]])
    ax = pictures.draw_seq2seq(list("pqr"), list("xy"), weights=w, step=1)
    assert "c" not in texts(ax)
    with pytest.raises(ValueError, match="weights"):
        pictures.draw_seq2seq(list("pqr"), list("xy"), weights=w.T, step=0)
    plt.close("all")


def test_draw_average_shows_the_weights_of_the_focus_word():
    words = ["a", "b", "c"]
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    fig = pictures.draw_average(X, words, focus="c")
    left = fig.axes[0]
    W = (X @ X.T).softmax(-1)
    assert [f"{w:.2f}" for w in W[2].tolist()] == [t for t in texts(left) if "." in t]
    with pytest.raises(ValueError, match="focus"):
        pictures.draw_average(X, words, focus="d")
    with pytest.raises(ValueError, match="X"):
        pictures.draw_average(X[:, :1], words, focus="a")
    plt.close("all")


def test_similarity_maps_can_leave_the_numbers_out():
    sim = torch.eye(4)
    labels = ["a", "b", "c", "d"]
    assert len(viz.plot_similarity(sim, labels).texts) == 16
    assert len(viz.plot_similarity(sim, labels, annotate=False).texts) == 0
    plt.close("all")


def test_two_paths_names_both_roads():
    ax = pictures.draw_two_paths()
    words = " ".join(texts(ax))
    assert "not linear" in words and "linear in $X$ (for fixed weights)" in words
    plt.close("all")
