"""The opening diagrams of chapters 4-6 draw what their captions say: the soft look-up's weights
and output, the multi-head layer's heads and shapes, the clock hands at the encoding's angles."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import diagrams  # noqa: E402
from transformer_lib.positional import sinusoidal_encoding  # noqa: E402


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_soft_lookup_writes_the_softmax_weights_and_the_weighted_average():
    scores, values = [2.0, 0.5, 1.75, -2.0], [10.0, 20.0, 30.0, 40.0]
    fig = diagrams.soft_lookup(scores=scores, values=values)
    weights = torch.tensor(scores).softmax(0)
    shown = texts(fig)
    for w in weights.tolist():
        assert f"{w:.3f}" in shown
    assert f"output\n{(weights * torch.tensor(values)).sum().item():.2f}" in shown
    assert {"cats", "dogs", "cats and dogs", "no cats"} <= set(shown)
    plt.close(fig)


def test_soft_lookup_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="same non-zero length"):
        diagrams.soft_lookup(keys=["a", "b"], scores=[1.0], values=[1.0, 2.0])


def test_multi_head_draws_the_heads_it_names_and_the_shapes():
    fig = diagrams.multi_head(n_heads=8, shown=3, d_model=512)
    shown = texts(fig)
    heads = [t for t in shown if t.startswith("head ")]
    assert [t.split(":")[0] for t in heads] == ["head 1", "head 2", "head 3", "head 8"]
    assert any("(T, d_k) = (T, 64)" in t for t in shown)
    assert any("Concat" in t and "8 \\cdot 64" in t for t in shown)
    plt.close(fig)
    with pytest.raises(ValueError, match="divisible"):
        diagrams.multi_head(n_heads=3, d_model=512)
    with pytest.raises(ValueError, match="shown"):
        diagrams.multi_head(shown=0)


def test_position_clocks_point_each_hand_at_its_pair_of_channels():
    positions, pairs, d_model = (0, 1, 7), (0, 5), 16
    fig = diagrams.position_clocks(positions, pairs, d_model=d_model)
    table = sinusoidal_encoding(8, d_model, dtype=torch.float64)
    axes = fig.axes
    assert len(axes) == len(positions) * len(pairs)
    for row, pos in enumerate(positions):
        for col, i in enumerate(pairs):
            hand = [a for a in axes[row * len(pairs) + col].texts if a.arrow_patch is not None][0]
            x, y = hand.xy
            assert (x / 0.9, y / 0.9) == pytest.approx((table[pos, 2 * i].item(),
                                                        table[pos, 2 * i + 1].item()), abs=1e-9)
    plt.close(fig)
    with pytest.raises(ValueError, match="pairs"):
        diagrams.position_clocks(pairs=(8,), d_model=16)
