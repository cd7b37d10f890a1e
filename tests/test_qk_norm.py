"""QK-norm (Dehghani et al. 2023): `MultiHeadAttention(qk_norm=...)`, `EncoderLayer(qk_norm=...)`
and `CausalLMConfig.qk_norm`. Queries and keys are normalised per head over their d_k channels,
after the projections and before the rotary positions and the dot product; the cache holds the
normalised, rotated keys, so generation with a cache matches the full forward.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.positional import RotaryEmbedding

BASE = lm.CausalLMConfig(vocab_size=30, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=48, qk_norm=True)


class Recorder:
    """An attention_fn that keeps the per-head queries and keys that reach the product."""

    def __init__(self):
        self.q = self.k = None

    def __call__(self, q, k, v, mask=None, dropout=None):
        self.q, self.k = q, k
        return scaled_dot_product_attention(q, k, v, mask, dropout)


def rms(x):
    return x.pow(2).mean(-1).sqrt()


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_shapes_and_one_norm_per_role_shared_by_the_heads(norm, n_kv_heads):
    attn = tl.MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, qk_norm=norm)
    assert attn.q_norm.normalized_shape == attn.k_norm.normalized_shape == (8,)
    x = torch.randn(3, 5, 32)
    assert attn(x, x, x).shape == (3, 5, 32)
    plain = tl.MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads)
    assert plain.q_norm is None and plain.k_norm is None
    extra = tl.count_parameters(attn) - tl.count_parameters(plain)
    assert extra == 2 * (16 if norm == "layer" else 8)  # a gain (and a bias) of d_k per role, not per head


@settings(max_examples=40)
@given(scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16), norm=st.sampled_from(["layer", "rms"]),
       rotary=st.booleans())
def test_every_query_and_key_entering_the_product_has_rms_one_times_the_gain(scale, seed, norm, rotary):
    torch.manual_seed(seed)
    rec = Recorder()
    attn = tl.MultiHeadAttention(16, 2, bias=False, attention_fn=rec, qk_norm=norm,
                                 rotary=RotaryEmbedding(8) if rotary else None).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64) * scale
    attn(x, x, x)
    # the initial gain is 1: every vector has RMS 1, up to the eps inside the root, which the
    # formula below includes (LayerNorm divides the centred vector by its standard deviation)
    for raw, seen in ((attn.split_heads(attn.w_q(x)), rec.q), (attn.split_heads(attn.w_k(x)), rec.k)):
        spread = raw.pow(2).mean(-1) if norm == "rms" else raw.var(-1, unbiased=False)
        torch.testing.assert_close(rms(seen), (spread / (spread + 1e-5)).sqrt())
        assert (rms(seen) <= 1 + 1e-12).all()
        if scale >= 1:
            assert (rms(seen) > 0.999).all()
    # with other gains, the RMS is that of the gain times a unit-RMS vector (the rotation keeps it)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(-3, 3)
        attn.k_norm.weight.uniform_(-3, 3)
    attn(x, x, x)
    g_q, g_k = attn.q_norm.weight.abs().max(), attn.k_norm.weight.abs().max()
    assert (rms(rec.q) <= g_q * (1 + 1e-9)).all() and (rms(rec.k) <= g_k * (1 + 1e-9)).all()
    if norm == "rms":  # no bias: every score is bounded by max|g_q| max|g_k| sqrt(d_k)
        logits = rec.q @ rec.k.transpose(-2, -1) / math.sqrt(8)
        assert logits.abs().max() <= g_q * g_k * math.sqrt(8) * (1 + 1e-9)


def test_the_norm_comes_before_the_rotation():
    torch.manual_seed(0)
    rec = Recorder()
    rotary = RotaryEmbedding(8)
    attn = tl.MultiHeadAttention(16, 2, bias=False, attention_fn=rec, qk_norm="rms", rotary=rotary)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 2)
    x = torch.randn(1, 5, 16)
    attn(x, x, x)
    q = attn.split_heads(attn.w_q(x))
    expected = rotary(attn.q_norm(q), 0)  # norm, then rotate (rotating first would change the norm's gain map)
    torch.testing.assert_close(rec.q, expected)
    assert not torch.allclose(rec.q, attn.q_norm(rotary(q, 0)))


MODERN = dict(norm="rms", positions="rope", ffn="swiglu", n_kv_heads=2, bias=False)


@pytest.mark.parametrize("options", [dict(), MODERN])
def test_generation_with_a_cache_equals_the_full_forward(options):
    torch.manual_seed(0)
    model = lm.CausalLM(dataclasses.replace(BASE, **options)).double().eval()
    with torch.no_grad():  # gains away from 1, so a norm skipped on the cache path would show
        for m in tl.attention.attention_modules(model).values():
            m.q_norm.weight.uniform_(0.5, 2)
            m.k_norm.weight.uniform_(0.5, 2)
    ids = torch.randint(0, 30, (2, 12))
    full = model(ids)
    cache = model.new_cache(2)
    steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    prompt = ids[:, :4]
    assert torch.equal(lm.generate(model, prompt, 10), lm.generate(model, prompt, 10, use_cache=False))


def test_qk_norm_changes_the_model_and_is_off_by_default():
    assert lm.CausalLMConfig(vocab_size=10).qk_norm is False
    torch.manual_seed(0)
    plain = lm.CausalLM(dataclasses.replace(BASE, qk_norm=False))
    torch.manual_seed(0)
    normed = lm.CausalLM(BASE)
    ids = torch.randint(0, 30, (1, 8))
    assert not torch.allclose(plain(ids), normed(ids))


@pytest.mark.parametrize("bad", ["batch", "", 1, True])
def test_a_bad_norm_name_for_the_attention_names_the_argument(bad):
    with pytest.raises(ValueError, match="qk_norm"):
        tl.MultiHeadAttention(16, 2, qk_norm=bad)


@pytest.mark.parametrize("bad", ["rms", 1, None])
def test_a_non_bool_for_the_layer_and_the_config_names_the_argument(bad):
    with pytest.raises((TypeError, ValueError), match="qk_norm"):
        tl.EncoderLayer(16, 2, 32, qk_norm=bad)
    with pytest.raises((TypeError, ValueError), match="qk_norm"):
        lm.CausalLMConfig(vocab_size=10, qk_norm=bad)


def test_state_dict_keys():
    for norm, bias, suffixes in (("layer", True, {"weight", "bias"}), ("rms", False, {"weight"})):
        model = lm.CausalLM(dataclasses.replace(BASE, norm=norm, bias=bias))
        keys = set(model.state_dict())
        for i in range(BASE.n_layers):
            for role in ("q_norm", "k_norm"):
                assert {f"layers.{i}.self_attn.{role}.{s}" for s in suffixes} <= keys
        plain = set(lm.CausalLM(dataclasses.replace(BASE, norm=norm, bias=bias, qk_norm=False)).state_dict())
        assert {k for k in keys - plain} == {k for k in keys if "q_norm" in k or "k_norm" in k}
        assert plain <= keys
