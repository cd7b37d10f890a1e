"""book.sinks: the sink scores and the streaming caches and losses (Xiao et al. 2023)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.book import sinks


def small_model(positions="rope", n_layers=1, seed=0):
    torch.manual_seed(seed)
    config = lm.CausalLMConfig(20, d_model=16, n_heads=2, d_ff=32, n_layers=n_layers, max_len=64,
                               positions=positions)
    return lm.CausalLM(config)


def per_position(logits, y):
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.data())
def test_every_row_holds_the_first_tokens_then_the_most_recent(batch, T, data):
    window = data.draw(st.integers(1, T))
    n_sink = data.draw(st.integers(0, window - 1))
    start = data.draw(st.integers(window - 1, T - 1))
    x = torch.randint(0, 50, (batch, T))
    rows = sinks.streaming_inputs(x, window, n_sink, start)
    assert rows.shape == (batch, T - start, window)
    for b in range(batch):
        for j, t in enumerate(range(start, T)):
            expected = x[b, :n_sink].tolist() + x[b, t - (window - n_sink) + 1: t + 1].tolist()
            assert rows[b, j].tolist() == expected


def test_a_window_as_long_as_the_sequence_is_the_plain_run():
    model = small_model(n_layers=2)
    x, y = torch.randint(0, 20, (3, 24)), torch.randint(0, 20, (3, 24))
    full = per_position(model(x), y)
    for n_sink in (0, 3):
        torch.testing.assert_close(sinks.streaming_loss(model, x, y, 24, n_sink), full)
    torch.testing.assert_close(sinks.streaming_loss(model, x, y, 24, 0, start=10), full[10:])


def test_one_rotary_layer_with_a_sliding_cache_equals_a_banded_mask():
    # RoPE scores depend only on offsets, so renumbering the cache from 0 changes nothing in one layer
    model = small_model("rope", n_layers=1)
    x, y = torch.randint(0, 20, (2, 40)), torch.randint(0, 20, (2, 40))
    banded = sinks.banded_loss(model, x, y, 8)
    torch.testing.assert_close(sinks.streaming_loss(model, x, y, 8, chunk=5), banded)
    # keeping sink tokens changes what the late positions read
    assert not torch.allclose(sinks.streaming_loss(model, x, y, 8, 2)[8:], banded[8:])


def test_a_band_as_wide_as_the_sequence_is_the_plain_run_and_a_narrow_one_is_not():
    model = small_model("sinusoidal", n_layers=2)
    x, y = torch.randint(0, 20, (2, 30)), torch.randint(0, 20, (2, 30))
    with torch.no_grad():
        full = per_position(model(x), y)
    torch.testing.assert_close(sinks.banded_loss(model, x, y, 30), full)
    narrow = sinks.banded_loss(model, x, y, 4)
    torch.testing.assert_close(narrow[:4], full[:4])  # the first positions see all they saw before
    assert not torch.allclose(narrow[10:], full[10:])


def test_each_cache_is_read_with_positions_counted_from_zero():
    model = small_model("sinusoidal", n_layers=2)
    x, y = torch.randint(0, 20, (2, 30)), torch.randint(0, 20, (2, 30))
    loss = sinks.streaming_loss(model, x, y, 6, 2, start=20)
    rows = sinks.streaming_inputs(x, 6, 2, start=20)  # (2, 10, 6)
    with torch.no_grad():
        direct = F.cross_entropy(model(rows.reshape(-1, 6))[:, -1], y[:, 20:].reshape(-1),
                                 reduction="none").view(2, -1).mean(0)
    torch.testing.assert_close(loss, direct)


def test_sink_scores_against_uniform_and_a_planted_sink():
    T = 12
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    weights = uniform.expand(2, 3, T, T).clone()
    for n_first in (1, 4):
        got = sinks.sink_scores(weights, n_first, start=5)
        torch.testing.assert_close(got, torch.full((3,), sinks.uniform_share(T, n_first, 5)))
    weights[:, 1] = 0.0
    weights[:, 1, :, 0] = 1.0  # head 1 puts everything on position 0
    by_layer = sinks.sink_scores({"layers.0.self_attn": weights, "layers.1.self_attn": uniform.expand(1, 3, T, T)})
    assert by_layer.shape == (2, 3)
    assert by_layer[0, 1] == 1.0 and by_layer[0, 0] < 0.2
    assert sinks.uniform_share(T, 1, 0) == pytest.approx(sum(1 / (t + 1) for t in range(T)) / T)


def test_relative_weight_is_one_for_uniform_attention_and_finds_a_favoured_token():
    T = 10
    uniform = (torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]).expand(1, 2, T, T).clone()
    ids = torch.tensor([[3, 1, 3, 2, 3, 1, 1, 3, 2, 1]])
    torch.testing.assert_close(sinks.relative_weight(uniform, ids == 3, start=4), torch.ones(2))
    favoured = uniform.clone()
    favoured[:, 0] = torch.where(ids[:, None, :] == 3, 1.0, 0.0).expand(1, T, T).tril()
    favoured[:, 0] /= favoured[:, 0].sum(-1, keepdim=True)
    score = sinks.relative_weight(favoured, ids == 3, start=4)
    assert score[0] > 1.5 and score[1] == pytest.approx(1.0)


def test_recorded_weights_of_a_model_feed_the_scores():
    model = small_model("rope", n_layers=2)
    with torch.no_grad(), tl.record_attention(model) as weights:
        model(torch.randint(0, 20, (4, 16)))
    scores = sinks.sink_scores(weights, 4)
    assert scores.shape == (2, 2) and bool(((scores > 0) & (scores < 1)).all())


@pytest.mark.parametrize("call, message", [
    (lambda: sinks.streaming_inputs(torch.zeros(2, 5, dtype=torch.long), 6), "window"),
    (lambda: sinks.banded_loss(small_model(), torch.zeros(2, 5, dtype=torch.long),
                               torch.zeros(2, 5, dtype=torch.long), 0), "window"),
    (lambda: sinks.streaming_inputs(torch.zeros(2, 5, dtype=torch.long), 3, 3), "n_sink"),
    (lambda: sinks.streaming_inputs(torch.zeros(2, 5, dtype=torch.long), 3, 1, start=1), "start"),
    (lambda: sinks.streaming_inputs(torch.zeros(5, dtype=torch.long), 3), "x must be"),
    (lambda: sinks.sink_scores(torch.zeros(2, 3, 4)), "weights must"),
    (lambda: sinks.sink_scores(torch.zeros(1, 1, 4, 4), start=4), "start"),
    (lambda: sinks.sink_scores(torch.zeros(1, 1, 4, 4), n_first=0, start=1), "n_first"),
    (lambda: sinks.relative_weight(torch.zeros(1, 1, 4, 4), torch.ones(1, 4), start=1), "select"),
    (lambda: sinks.streaming_loss(torch.nn.Linear(2, 2), torch.zeros(1, 4, dtype=torch.long),
                                  torch.zeros(1, 4, dtype=torch.long), 2), "lm.CausalLM"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_plot_last_query_draws_one_panel_per_layer_and_one_line_per_head():
    import matplotlib
    matplotlib.use("Agg")
    weights = {f"layers.{i}": torch.softmax(torch.randn(3, 4, 8, 8), -1) for i in range(2)}
    fig = sinks.plot_last_query(weights, 8)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["layer 0", "layer 1"]
    assert all(len([line for line in ax.get_lines() if line.get_label().startswith("head")]) == 4 for ax in axes)
    assert axes[0].get_xlabel() == "key position (the query is at 7)" and axes[0].get_ylabel()
    with pytest.raises(ValueError, match="weights"):
        sinks.plot_last_query({}, 8)
    matplotlib.pyplot.close(fig)
