"""The drawing helpers added for chapters 2 and 4: the similarity map of word-like vectors and
the whole shape flow of single-head attention."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.book import shapes, viz  # noqa: E402


def test_attention_flow_shapes_are_the_real_ones():
    sizes = shapes.attention_flow_shapes(2, 512, 64)
    x = torch.randn(*sizes["X"])
    w = {name: torch.randn(*sizes[name]) for name in ("W^Q", "W^K", "W^V")}
    q, k, v = x @ w["W^Q"], x @ w["W^K"], x @ w["W^V"]
    z, a = tl.scaled_dot_product_attention(q, k, v)
    real = {"X": x, **w, "Q": q, "K": k, "V": v, "scores": q @ k.T, "A": a, "Z": z}
    assert sizes == {name: tuple(t.shape) for name, t in real.items()}
    assert shapes.attention_flow_shapes(3, 16, 4, d_v=8)["Z"] == (3, 8)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="d_k"):
            shapes.attention_flow_shapes(2, 512, bad)


def test_draw_attention_flow_labels_every_tensor_with_its_shape():
    weights = torch.tensor([[0.2344, 0.7656], [0.7406, 0.2594]])
    ax = shapes.draw_attention_flow(["Thinking", "Machines"], 512, 64, weights=weights)
    texts = [t.get_text() for t in ax.texts]
    for name, shape in (("X", "(2, 512)"), ("Q", "(2, 64)"), ("K", "(2, 64)"), ("V", "(2, 64)"),
                        ("A", "(2, 2)"), ("Z", "(2, 64)")):
        assert f"${name}$\n{shape}" in texts
    assert any(t.endswith("\n(2, 2)") and "sqrt" in t for t in texts)  # the scaled scores
    assert sum("(512, 64)" in t for t in texts) == 3                     # W^Q, W^K, W^V
    assert "Thinking" in texts and "Machines" in texts
    assert [t for t in texts if t in ("0.23", "0.77", "0.74", "0.26")] == ["0.23", "0.77", "0.74", "0.26"]
    # block sides grow with the size: X (2 x 512) is drawn wider than Q (2 x 64)
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths[-1] > widths[0]
    with pytest.raises(ValueError, match="weights"):
        shapes.draw_attention_flow(["a", "b"], 8, 4, weights=torch.ones(3, 3))
    plt.close("all")


def test_plot_similarity_uses_one_fixed_scale_and_marks_groups():
    labels = ["March", "mars", "Juni", "Juli"]
    sim = torch.tensor([[1.0, 0.5, -0.2, 0.0], [0.5, 1.0, 0.1, -0.3],
                        [-0.2, 0.1, 1.0, 0.6], [0.0, -0.3, 0.6, 1.0]])
    ax = viz.plot_similarity(sim, labels, group_size=2, title="months")
    mesh = ax.collections[0]
    assert mesh.get_clim() == (-1, 1)                       # the same colours on every map
    assert [t.get_text() for t in ax.texts][:4] == ["1.0", "0.5", "-0.2", "0.0"]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert len(ax.lines) == 2                               # one line across, one down
    with pytest.raises(ValueError, match="group_size"):
        viz.plot_similarity(sim, labels, group_size=3)
    with pytest.raises(ValueError, match="similarity"):
        viz.plot_similarity(sim[:3], labels)
    plt.close("all")
