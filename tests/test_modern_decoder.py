"""Chapter 16's claims that the library must keep: the parameter matching of the variants
(`lm.layer_parameters`, `lm.match_d_ff`), grouped-query attention as PyTorch computes it and
with the grouping the chapter's exercise asks for, the cache's bytes per token, and rotary
positions that see offsets only (so a sliding window makes a far position look like a near one).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm

BASE = lm.CausalLMConfig(vocab_size=30, d_model=48, n_heads=4, d_ff=192, n_layers=2, max_len=64)


def build(config, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return lm.CausalLM(config).to(dtype).eval()


def test_layer_parameters_leave_out_embedding_positions_and_output():
    for options in ({}, {"tie_output": False}, {"positions": "learned"}, {"bias": False, "norm": "rms"}):
        model = build(dataclasses.replace(BASE, **options))
        outside = {id(p) for part in (model.embed, model.out) for p in part.parameters()}
        inside = sum(p.numel() for p in model.parameters() if id(p) not in outside)
        assert lm.layer_parameters(model) == inside
    tied, untied = build(BASE), build(dataclasses.replace(BASE, tie_output=False))
    assert lm.layer_parameters(tied) == lm.layer_parameters(untied)
    with pytest.raises(TypeError, match="CausalLM"):
        lm.layer_parameters(torch.nn.Linear(2, 2))


def test_match_d_ff_gives_swiglu_two_thirds_of_the_relu_width():
    plain = dataclasses.replace(BASE, bias=False)
    target = lm.layer_parameters(build(plain))
    matched = lm.match_d_ff(dataclasses.replace(plain, ffn="swiglu"), target)
    assert matched.d_ff == 128  # 3 x 48 x 128 = 2 x 48 x 192: Shazeer's 2/3
    assert lm.layer_parameters(build(matched)) == target
    assert dataclasses.replace(matched, d_ff=192) == dataclasses.replace(plain, ffn="swiglu")


@pytest.mark.parametrize("options", [{"ffn": "swiglu"}, {"n_kv_heads": 2}, {"n_kv_heads": 1}, {"bias": False},
                                     {"norm": "rms"}, {"norm": "rms", "positions": "rope", "ffn": "swiglu",
                                                       "n_kv_heads": 2, "bias": False}])
def test_match_d_ff_picks_the_nearest_width(options):
    target = lm.layer_parameters(build(BASE))
    config = lm.match_d_ff(dataclasses.replace(BASE, **options), target)
    miss = {d: abs(lm.layer_parameters(build(dataclasses.replace(config, d_ff=d))) - target)
            for d in (config.d_ff - 1, config.d_ff, config.d_ff + 1)}
    assert miss[config.d_ff] <= min(miss.values())
    assert miss[config.d_ff] < 0.005 * target  # the chapter's "within 0.5%"


def test_match_d_ff_refuses_bad_arguments():
    with pytest.raises(ValueError, match="n_parameters"):
        lm.match_d_ff(BASE, 0)
    with pytest.raises(TypeError):
        lm.match_d_ff({"d_ff": 4}, 100)


@settings(max_examples=15, deadline=None)
@given(h_kv=st.sampled_from([1, 2, 3, 6]), d_k=st.sampled_from([2, 4]), T=st.integers(1, 6),
       causal=st.booleans(), seed=st.integers(0, 1000))
def test_grouped_query_attention_equals_pytorchs(h_kv, d_k, T, causal, seed):
    torch.manual_seed(seed)
    attn = tl.MultiHeadAttention(6 * d_k, 6, n_kv_heads=h_kv).double().eval()
    x = torch.randn(2, T, 6 * d_k, dtype=torch.float64)
    mask = tl.causal_mask(T) if causal else None
    q = attn.split_heads(attn.w_q(x))
    k, v = (attn.split_heads(w(x), h_kv) for w in (attn.w_k, attn.w_v))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(attn(x, x, x, mask), attn.w_o(attn.merge_heads(theirs)))


def test_query_heads_of_a_group_are_consecutive_and_tiling_is_another_model():
    # The chapter's exercise: query head i reads key/value head i // (h / h_kv). Tiling the heads
    # (kv.repeat) has the right shape but another grouping, and gives another output.
    torch.manual_seed(0)
    attn = tl.MultiHeadAttention(24, 6, n_kv_heads=2).double().eval()
    kv = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    shared = attn.share_kv(kv)
    assert [int(torch.nonzero((shared[0, i] == kv[0]).all(-1).all(-1))) for i in range(6)] == [0, 0, 0, 1, 1, 1]
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    q = attn.split_heads(attn.w_q(x))
    k, v = (attn.split_heads(w(x), 2) for w in (attn.w_k, attn.w_v))
    tiled = attn.w_o(attn.merge_heads(F.scaled_dot_product_attention(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))))
    assert not torch.allclose(tiled, attn(x, x, x))


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cache_bytes_per_token_are_two_layers_heads_and_d_k(n_kv_heads):
    model = build(dataclasses.replace(BASE, positions="rope", n_kv_heads=n_kv_heads), dtype=torch.float32)
    cache = model.new_cache(3)
    with torch.no_grad():
        model(torch.randint(0, 30, (3, 20)), cache=cache)
    per_token = sum(c.nbytes() for c in cache) // (3 * 20)
    assert per_token == 2 * BASE.n_layers * n_kv_heads * (48 // 4) * 4


def windowed_logits(model, ids, window):
    """The chapter's sliding-window forward pass: each position attends to the last `window`."""
    i = torch.arange(ids.shape[1])
    band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    h = model.embed(ids)
    for layer in model.layers:
        h = layer(h, band)
    return model.out(model.norm(h))


def test_with_a_window_a_rotary_model_computes_a_far_position_as_a_near_one():
    # RoPE sees offsets only: with a window of W and L layers, the output at position p depends
    # on tokens p - L (W - 1) .. p alone, wherever p is. Sinusoidal positions do not have this.
    W, L = 4, BASE.n_layers
    reach = L * (W - 1)
    ids = torch.randint(0, 30, (2, 40), generator=torch.Generator().manual_seed(3))
    for positions, far_equals_near in (("rope", True), ("sinusoidal", False)):
        model = build(dataclasses.replace(BASE, positions=positions))
        with torch.no_grad():
            full = windowed_logits(model, ids, W)
            torch.testing.assert_close(windowed_logits(model, ids, 40), model(ids))
            for p in (20, 39):
                near = windowed_logits(model, ids[:, p - reach: p + 1], W)[:, -1]
                assert torch.allclose(full[:, p], near, atol=1e-10) == far_equals_near, (positions, p)
