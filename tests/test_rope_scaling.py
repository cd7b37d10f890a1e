"""Context extension of rotary positions (`positional.RotaryEmbedding(scaling=...)`, the
`rope_*` fields of `lm.CausalLMConfig`): each method's frequencies from its paper's equation,
plain RoPE unchanged, and what every method keeps: rotations that keep lengths and scores that
depend on the offset alone."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import lm
from transformer_lib.positional import YARN_ALPHA, YARN_BETA, RotaryEmbedding, frequencies

D_K = 16


def test_plain_rope_is_unchanged_by_the_new_options():
    x = torch.randn(2, 3, 10, D_K, generator=torch.Generator().manual_seed(0))
    old = RotaryEmbedding(D_K)
    assert torch.equal(old(x, 5), RotaryEmbedding(D_K, scaling=None, factor=1.0)(x, 5))
    assert torch.equal(old.frequencies(), frequencies(D_K))
    assert old.magnitude == 1.0


def test_position_interpolation_reads_position_m_as_m_over_s():
    # Chen et al. 2023: f'(x, m) = f(x, m L / L') = f(x, m / s)
    s = 4
    pi = RotaryEmbedding(D_K, scaling="pi", factor=s)
    plain = RotaryEmbedding(D_K)
    torch.testing.assert_close(pi.angles(0, 64), plain.angles(0, 64) / s)
    torch.testing.assert_close(pi.angles(0, 64)[::s], plain.angles(0, 16))  # position 4k as k


def test_ntk_aware_scaling_raises_the_base():
    # Peng et al. 2023, section 3.1: b' = b s^(|D| / (|D| - 2))
    s = 8
    ntk = RotaryEmbedding(D_K, scaling="ntk", factor=s).frequencies()
    torch.testing.assert_close(ntk, frequencies(D_K, 10000.0 * s ** (D_K / (D_K - 2))))
    plain = frequencies(D_K)
    assert ntk[0] == plain[0]                      # the fastest pair is kept
    torch.testing.assert_close(ntk[-1], plain[-1] / s)  # the slowest is interpolated


def test_yarn_ramps_between_interpolation_and_the_plain_frequencies():
    # Peng et al. 2023, sections 3.2 and 3.4, by hand for each pair
    s, L = 8, 32
    yarn = RotaryEmbedding(D_K, scaling="yarn", factor=s, trained_length=L)
    plain = frequencies(D_K)
    expected = []
    for theta in plain.tolist():
        r = L * theta / (2 * math.pi)
        gamma = 0.0 if r < YARN_ALPHA else 1.0 if r > YARN_BETA else (r - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)
        expected.append((1 - gamma) * theta / s + gamma * theta)
    torch.testing.assert_close(yarn.frequencies(), torch.tensor(expected, dtype=torch.float64))
    assert yarn.magnitude == pytest.approx(0.1 * math.log(s) + 1)
    # a long trained length puts the fast pairs past BETA turns: those keep their frequency
    long = RotaryEmbedding(D_K, scaling="yarn", factor=s, trained_length=4096).frequencies()
    assert long[0] == plain[0] and long[-1] == plain[-1] / s


def test_yarn_divides_the_logits_by_its_temperature():
    s = 4
    q, k = torch.randn(2, 1, 5, D_K, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    yarn = RotaryEmbedding(D_K, scaling="yarn", factor=s, trained_length=32)
    theta = yarn.frequencies()
    scores = yarn(q) @ yarn(k).transpose(-1, -2)
    angle = torch.arange(5, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos(), angle.sin()

    def turn(x):
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)

    unscaled = turn(q) @ turn(k).transpose(-1, -2)
    torch.testing.assert_close(scores, unscaled * (0.1 * math.log(s) + 1) ** 2)


@settings(max_examples=40, deadline=None)
@given(scaling=st.sampled_from(["pi", "ntk", "yarn"]), factor=st.floats(1.0, 16.0),
       m=st.integers(0, 300), n=st.integers(0, 300), shift=st.integers(0, 100))
def test_every_method_keeps_scores_relative(scaling, factor, m, n, shift):
    # each method only changes the frequencies, so q_m . k_n still depends on m - n alone
    rope = RotaryEmbedding(D_K, scaling=scaling, factor=factor, trained_length=32 if scaling == "yarn" else None)
    q, k = torch.randn(2, 1, D_K, dtype=torch.float64, generator=torch.Generator().manual_seed(m + n))

    def score(a, b):
        return (rope(q, a) @ rope(k, b).T).item()

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-9)
    if scaling != "yarn":  # a rotation keeps lengths (YaRN also scales them by its magnitude)
        assert rope(q, m).norm().item() == pytest.approx(q.norm().item(), rel=1e-12)


@pytest.mark.parametrize("kwargs, name", [
    (dict(scaling="linear"), "scaling"), (dict(scaling="pi", factor=0.5), "factor"),
    (dict(scaling="pi", factor=float("nan")), "factor"), (dict(scaling="pi", factor=True), "factor"),
    (dict(factor=2.0), "factor"), (dict(scaling="yarn", factor=2.0), "trained_length"),
    (dict(scaling="yarn", factor=2.0, trained_length=0), "trained_length"),
    (dict(scaling="pi", factor=2.0, trained_length=32), "trained_length"),
])
def test_bad_scaling_is_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RotaryEmbedding(D_K, **kwargs)


def test_a_trained_state_dict_loads_into_every_stretched_model():
    config = lm.CausalLMConfig(30, d_model=32, n_heads=2, d_ff=64, n_layers=1, max_len=64, positions="rope")
    torch.manual_seed(0)
    model = lm.CausalLM(config).eval()
    x = torch.randint(0, 30, (2, 48))
    for scaling in ("pi", "ntk", "yarn"):
        stretched = lm.CausalLM(dataclasses.replace(config, rope_scaling=scaling, rope_factor=2.0,
                                                    rope_trained_length=24 if scaling == "yarn" else None)).eval()
        stretched.load_state_dict(model.state_dict())
        assert stretched.layers[0].self_attn.rotary.scaling == scaling
        assert not torch.allclose(stretched(x), model(x))
    same = lm.CausalLM(dataclasses.replace(config, rope_scaling="pi", rope_factor=1.0)).eval()
    same.load_state_dict(model.state_dict())
    torch.testing.assert_close(same(x), model(x))  # s = 1 reads positions as trained


def test_generation_with_a_cache_equals_the_full_pass_when_stretched():
    config = lm.CausalLMConfig(30, d_model=32, n_heads=2, d_ff=64, n_layers=2, max_len=64, positions="rope",
                               rope_scaling="yarn", rope_factor=4.0, rope_trained_length=16)
    torch.manual_seed(1)
    model = lm.CausalLM(config).eval()
    x = torch.randint(0, 30, (1, 40))
    cache = model.new_cache(1)
    with torch.no_grad():
        full = model(x)
        first = model(x[:, :30], cache=cache)
        rest = torch.cat([model(x[:, t: t + 1], cache=cache) for t in range(30, 40)], dim=1)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_the_config_refuses_scaling_without_rotary_positions():
    with pytest.raises(ValueError, match="rope_scaling"):
        lm.CausalLMConfig(30, positions="sinusoidal", rope_scaling="pi", rope_factor=2.0)
