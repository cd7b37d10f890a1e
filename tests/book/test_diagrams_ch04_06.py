"""The opening diagrams of chapters 4-6 draw what their captions say: the soft look-up's weights
and output, the multi-head layer's heads and shapes, the clock hands at the encoding's angles;
and the chapters' figures (the scaling study, rows of weights, the positional table, the
offset turns, dot products by offset) draw the numbers they are given."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import geometry, pictures, positions, viz  # noqa: E402
from transformer_lib.positional import sinusoidal_encoding  # noqa: E402


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_soft_lookup_writes_the_softmax_weights_and_the_weighted_average():
    scores, values = [2.0, 0.5, 1.75, -2.0], [10.0, 20.0, 30.0, 40.0]
    fig = pictures.soft_lookup(scores=scores, values=values)
    weights = torch.tensor(scores).softmax(0)
    shown = texts(fig)
    for w in weights.tolist():
        assert f"{w:.3f}" in shown
    assert f"output\n{(weights * torch.tensor(values)).sum().item():.2f}" in shown
    assert {"cats", "dogs", "cats and dogs", "no cats"} <= set(shown)
    plt.close(fig)


def test_soft_lookup_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="same non-zero length"):
        pictures.soft_lookup(keys=["a", "b"], scores=[1.0], values=[1.0, 2.0])


def test_multi_head_draws_the_heads_it_names_and_the_shapes():
    fig = pictures.multi_head(n_heads=8, shown=3, d_model=512)
    shown = texts(fig)
    heads = [t for t in shown if t.startswith("head ")]
    assert [t.split(":")[0] for t in heads] == ["head 1", "head 2", "head 3", "head 8"]
    assert any("(T, d_k) = (T, 64)" in t for t in shown)
    assert any("Concat" in t and "8 \\cdot 64" in t for t in shown)
    plt.close(fig)
    with pytest.raises(ValueError, match="divisible"):
        pictures.multi_head(n_heads=3, d_model=512)
    with pytest.raises(ValueError, match="shown"):
        pictures.multi_head(shown=0)


def test_position_clocks_point_each_hand_at_its_pair_of_channels():
    positions, pairs, d_model = (0, 1, 7), (0, 5), 16
    fig = pictures.position_clocks(positions, pairs, d_model=d_model)
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
        pictures.position_clocks(pairs=(8,), d_model=16)


def test_scaling_panels_draw_both_runs_of_every_panel():
    widths = [4, 16, 64]
    growth = {d: (float(d), 1.0) for d in widths}
    share = {d: (1.0 / d, 0.5) for d in widths}
    fig = viz.plot_scaling_panels(widths, [
        dict(values=growth, ylabel="variance", title="grows", log=True),
        dict(values=share, ylabel="share", title="stuck", ylim=(0, 1)),
    ], ncols=2, figsize=(6, 3))
    first, second = fig.axes[:2]
    assert [line.get_label() for line in first.lines] == ["unscaled", "scaled"]
    assert list(first.lines[0].get_ydata()) == [4.0, 16.0, 64.0]
    assert list(second.lines[0].get_ydata()) == [0.25, 1 / 16, 1 / 64]
    assert first.get_yscale() == "log" and second.get_yscale() == "linear"
    assert second.get_ylim() == (0, 1) and first.get_xscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"widths \[64\]"):
        viz.plot_scaling_panels(widths, [dict(values={4: (1, 1), 16: (1, 1)}, ylabel="", title="")])


def test_weight_rows_draw_one_bar_per_token():
    tokens = ["a", "b", "c"]
    rows = {"one": torch.tensor([0.2, 0.3, 0.5]), "two": [1.0, 0.0, 0.0]}
    fig = viz.plot_weight_rows(rows, tokens, ylabel="weight of 'a'")
    assert [ax.get_title() for ax in fig.axes] == ["one", "two"]
    assert [b.get_height() for b in fig.axes[0].patches] == pytest.approx([0.2, 0.3, 0.5])
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == tokens
    assert fig.axes[0].get_ylabel() == "weight of 'a'"
    plt.close(fig)
    with pytest.raises(ValueError, match="one weight per token"):
        viz.plot_weight_rows({"short": [0.5, 0.5]}, tokens)


def test_positional_table_and_dot_products_show_the_numbers_given():
    table = sinusoidal_encoding(10, 8, dtype=torch.float64)
    fig = positions.plot_positional_table(table, title="pe")
    image = fig.axes[0].images[0]
    assert (image.get_array() == table.numpy()).all() and image.get_clim() == (-1, 1)
    plt.close(fig)
    gram = table @ table.T
    ks = torch.arange(-9, 10)
    curve = torch.cos(ks[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)).sum(-1)
    fig = positions.plot_offset_dot_products(gram, ks, curve)
    assert (fig.axes[0].images[0].get_array() == gram.numpy()).all()
    assert list(fig.axes[1].lines[0].get_ydata()) == pytest.approx(curve.tolist())
    assert fig.axes[0].get_title() == "$p_p \\cdot p_q$ for 10 positions"
    plt.close(fig)
    with pytest.raises(ValueError, match="2-D"):
        positions.plot_positional_table(table[0])
    with pytest.raises(ValueError, match="square"):
        positions.plot_offset_dot_products(table, ks, curve)


def test_offset_turns_draw_each_pair_at_its_frequency():
    zoomed = ((-0.3, 1.4), (-0.15, 1.55))
    fig = geometry.plot_offset_turns(64, pairs=[4, 10], starts=[2, 10], offset=3,
                                   limits=[((-1.5, 1.5), (-1.5, 1.5)), zoomed])
    left, right = fig.axes
    assert left.get_title() == f"pair 4: $\\omega$ = {10000 ** (-8 / 64):.3f} per step"
    assert right.get_title().endswith("(zoomed in)") and right.get_xlim() == zoomed[0]
    assert right.get_xlabel() == "channel 20: sin($\\omega\\, pos$)"
    assert fig._suptitle.get_text().endswith("from positions 2 and 10")
    plt.close(fig)
    with pytest.raises(ValueError, match="pairs must lie in 0 .. d_model/2 - 1 = 31"):
        geometry.plot_offset_turns(64, pairs=[32], starts=[2], offset=3)
    with pytest.raises(ValueError, match="one limits and one label_positions entry per pair"):
        geometry.plot_offset_turns(64, pairs=[4, 10], starts=[2], offset=3, limits=[zoomed])
