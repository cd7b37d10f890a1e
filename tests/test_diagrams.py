import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from transformer_lib.book import diagrams  # noqa: E402


def lit_labels(ax):
    """Labels of the boxes drawn with a thick edge (the highlighted ones)."""
    thick = [p for p in ax.patches if p.get_linewidth() >= 2.0]
    labels = {t.get_position(): t.get_text() for t in ax.texts}
    out = set()
    for patch in thick:
        x0, y0 = patch.get_x(), patch.get_y()
        centre = (round(x0 + patch.get_width() / 2, 6), round(y0 + patch.get_height() / 2, 6))
        out |= {text for (x, y), text in labels.items() if (round(x, 6), round(y, 6)) == centre}
    return out


@pytest.mark.parametrize("highlight, expected", [
    ("attention", {"self-attention", "masked self-attention", "cross-attention"}),
    ("position", {"+ positional encoding"}),
    (["ffn"], {"feed-forward"}),
    ("decoder", {"masked self-attention", "cross-attention", "add & norm", "feed-forward"}),
])
def test_model_map_lights_the_named_parts(highlight, expected):
    ax = diagrams.model_map(highlight)
    assert lit_labels(ax) == expected | {"source tokens", "target, shifted right"}
    plt.close("all")


def test_encoder_lights_only_the_encoder_column():
    ax = diagrams.model_map("encoder")
    thick = [p for p in ax.patches if p.get_linewidth() >= 2.0]
    # the two input boxes plus the four boxes of the encoder layer; all but the target in the left column
    assert len(thick) == 6
    assert sum(p.get_x() + p.get_width() / 2 < 1.0 for p in thick) == 5
    plt.close("all")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="highlight"):
        diagrams.model_map("softmax layer")
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="points"):
        diagrams.arrow(ax, [(0, 0)])
    plt.close("all")
