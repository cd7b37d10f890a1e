"""Chapter 16's context-extension tools (`transformer_lib.book.context`)."""
from __future__ import annotations

import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from transformer_lib import lm
from transformer_lib.book import context as ctx
from transformer_lib.positional import RotaryEmbedding

matplotlib.use("Agg")
CONFIG = lm.CausalLMConfig(20, d_model=32, n_heads=2, d_ff=32, n_layers=1, max_len=128, positions="rope")


def _model(seed=0):
    torch.manual_seed(seed)
    return lm.CausalLM(CONFIG)


def test_stretched_keeps_the_weights_and_changes_only_the_positions():
    model = _model()
    for label, scaling in ctx.METHODS.items():
        out = ctx.stretched(model, scaling, 4, trained_length=16)
        assert not out.training
        rotary = out.layers[0].self_attn.rotary
        assert rotary.scaling == scaling, label
        assert rotary.trained_length == (16 if scaling == "yarn" else None)
        for (name, a), b in zip(model.state_dict().items(), out.state_dict().values()):
            assert torch.equal(a, b), name
    assert model.layers[0].self_attn.rotary.scaling is None  # the original is untouched
    x = torch.randint(0, 20, (2, 16))
    with torch.no_grad():  # factor 1 reads positions as trained, whatever the method
        torch.testing.assert_close(ctx.stretched(model, "pi", 1, 16)(x), model.eval()(x))


def test_stretched_refuses_a_model_without_rotary_positions():
    with pytest.raises(ValueError, match="positions='rope'"):
        ctx.stretched(lm.CausalLM(lm.CausalLMConfig(20, d_model=32, n_heads=2, d_ff=32, n_layers=1)), "pi", 2, 16)


def test_windows_and_window_loss():
    ids = torch.arange(50) % 20
    x, y = ctx.windows(ids, 8)
    assert x.shape == y.shape == (6, 8)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(x.flatten()[1:], y.flatten()[:-1])
    with pytest.raises(ValueError, match="length=60"):
        ctx.windows(ids, 60)
    with pytest.raises(ValueError, match="ids"):
        ctx.windows(ids.view(5, 10), 4)
    model = _model()
    with torch.no_grad():
        expected = F.cross_entropy(model.eval()(x).flatten(0, 1), y.flatten()).item()
    assert ctx.window_loss(model, ids, 8) == pytest.approx(expected, rel=1e-6)


def test_fine_tune_trains_a_copy():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tuned = ctx.fine_tune(model, torch.arange(400) % 20, length=24, steps=3, seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in tuned.state_dict().items())
    again = ctx.fine_tune(model, torch.arange(400) % 20, length=24, steps=3, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), again.state_dict().values()))


def test_seen_angles_marks_pairs_that_completed_a_turn():
    rotary = RotaryEmbedding(16)
    seen = ctx.seen_angles(rotary, 32)
    turns = 31 * rotary.frequencies() / (2 * math.pi)
    assert torch.equal(torch.isinf(seen), turns >= 1)
    assert int(torch.isinf(seen).sum()) == 2  # chapter 16: 6 of 8 pairs never complete a turn
    torch.testing.assert_close(seen[2:], 31 * rotary.frequencies()[2:])


def test_plot_pair_angles_draws_one_panel_per_method():
    fig = ctx.plot_pair_angles(16, 32, 8)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split(",")[0] for ax in axes] == list(ctx.METHODS)
    assert all(ax.get_xlabel() == "position m" for ax in axes)
    assert axes[0].get_ylabel()
    matplotlib.pyplot.close(fig)
