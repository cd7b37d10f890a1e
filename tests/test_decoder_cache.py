"""The encoder-decoder's key/value cache (`DecoderCache`): the decoder's self-attention keys and
values appended step by step, the memory's cross-attention keys and values computed once, through
the same `KVCache` and `MultiHeadAttention`; greedy decoding and beam search use it, and give the
tokens and scores they give without it."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import decoding
from transformer_lib.kv_cache import DecoderCache
from transformer_lib.special_tokens import BOS_ID, PAD_ID


def model_with(seed=0, n_layers=2, norm_first=False, d_model=16, n_heads=4, vocab=13, max_len=24):
    torch.manual_seed(seed)
    config = tl.TransformerConfig(vocab, vocab, d_model=d_model, n_heads=n_heads, d_ff=24, n_layers=n_layers,
                                  dropout=0.0, norm_first=norm_first, max_len=max_len)
    return tl.Transformer(config).double().eval()


def sources(batch, length, seed, vocab=13, padded=True):
    src = torch.randint(4, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    if padded and batch > 1 and length > 1:
        src[-1, length // 2 + 1:] = PAD_ID  # the last source is shorter
    return src


def test_decoding_with_the_cache_gives_the_logits_of_the_whole_prefix():
    model = model_with()
    src, tgt = sources(3, 7, seed=1), torch.randint(3, 13, (3, 6))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        mask = tl.padding_mask(src, PAD_ID)
        memory = model.encode(src, mask)
        full = model.decode(tgt, memory, mask, tl.causal_mask(6))  # the causal mask alone, as decoding feeds it
        cache = model.new_cache(3, src.shape[1], max_len=10)
        steps = [model.decode(tgt[:, :2], memory, mask, cache=cache)]  # two positions at once, then one by one
        steps += [model.decode(tgt[:, t:t + 1], memory, mask, cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=0)
    assert all(isinstance(c, DecoderCache) and c.length == 6 for c in cache)
    assert all(c.cross_attn.fixed and c.cross_attn.length == 7 for c in cache)


def test_the_memorys_keys_and_values_are_computed_once():
    model = model_with()
    src = sources(2, 5, seed=2)
    projections = {"w_k": 0, "w_v": 0}
    for layer in model.decoder.layers:
        for name in projections:
            getattr(layer.cross_attn, name).register_forward_hook(
                lambda *_, name=name: projections.__setitem__(name, projections[name] + 1))
    steps = decoding.greedy_decode(model, src, max_len=9).tokens.shape[1]
    assert steps >= 3 and projections == {"w_k": 2, "w_v": 2}  # one per layer, not one per step
    decoding.greedy_decode(model, src, max_len=9, use_cache=False)
    assert projections["w_k"] == 2 + 2 * steps  # without the cache: every layer, every step


def test_beam_search_reorders_the_cache_with_its_beams():
    model = model_with(seed=3)
    cache = model.new_cache(4, 5, max_len=6)
    x = torch.randn(4, 5, 16, dtype=torch.float64)
    ids = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 10], [BOS_ID, 11, 12]])
    with torch.no_grad():
        model.decode(ids, x, cache=cache)
    before = [[t.clone() for t in c.self_attn.cached()] for c in cache]  # cached() gives views
    rows = torch.tensor([1, 1, 3, 0])
    for c in cache:
        c.reorder(rows)
    for (k0, v0), c in zip(before, cache):
        k1, v1 = c.self_attn.cached()
        assert torch.equal(k1, k0[rows]) and torch.equal(v1, v0[rows])
    with pytest.raises(ValueError, match="one source row per sequence"):
        cache[0].reorder(torch.tensor([0, 1]))


def test_the_cache_refuses_what_does_not_fit():
    model = model_with()
    memory = torch.randn(2, 5, 16, dtype=torch.float64)
    cache = model.new_cache(2, 5, max_len=3)
    tgt = torch.full((2, 1), BOS_ID)
    with pytest.raises(ValueError, match="cache holds 2 sequences but the target has 3"):
        model.decode(torch.full((3, 1), BOS_ID), torch.randn(3, 5, 16, dtype=torch.float64), cache=cache)
    with pytest.raises(ValueError, match="room for 3 positions; 0 are cached and the target adds 4"):
        model.decode(torch.full((2, 4), BOS_ID), memory, cache=cache)
    with torch.no_grad():
        model.decode(tgt, memory, cache=cache)
    with pytest.raises(ValueError, match="keys of a memory of 5 positions, but memory has 6"):
        model.decode(tgt, torch.randn(2, 6, 16, dtype=torch.float64), cache=cache)
    with pytest.raises(TypeError, match="new_cache.*a list of 2 DecoderCaches"):
        model.decode(tgt, memory, cache=cache[:1])
    with pytest.raises(ValueError, match="fixed"):
        cache[0].cross_attn.append(*cache[0].cross_attn.cached())
    with pytest.raises(ValueError, match="max_len=30 is longer than the model's max_len=24"):
        model.new_cache(2, 5, max_len=30)


@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 4), src_len=st.integers(1, 7),
       max_len=st.integers(1, 10), n_layers=st.integers(1, 2), norm_first=st.booleans(),
       beam_size=st.integers(1, 4), alpha=st.sampled_from([0.0, 0.6]))
def test_cached_and_uncached_decoding_give_the_same_tokens_and_scores(seed, batch, src_len, max_len, n_layers,
                                                                     norm_first, beam_size, alpha):
    model = model_with(seed % 97, n_layers=n_layers, norm_first=norm_first)
    src = sources(batch, src_len, seed)
    for search in (lambda **kw: decoding.greedy_decode(model, src, max_len, **kw),
                   lambda **kw: decoding.beam_search(model, src, max_len, beam_size=beam_size, alpha=alpha, **kw)):
        cached, uncached = search(use_cache=True), search(use_cache=False)
        assert torch.equal(cached.tokens, uncached.tokens)
        torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-10, rtol=0)
