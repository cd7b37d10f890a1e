"""The key/value cache lives in the tested attention: `MultiHeadAttention(..., cache=KVCache)`.

The decoder-only model runs the same layers cached and uncached; the cache is allocated once
and written in place; attention recording works on both paths; with grouped-query attention
it stores n_kv_heads / n_heads of the full cache.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm


def model_with(seed=0, dtype=torch.float64, **options):
    torch.manual_seed(seed)
    config = lm.CausalLMConfig(**(dict(vocab_size=17, d_model=16, n_heads=4, d_ff=24, n_layers=2, max_len=40)
                                  | options))
    return lm.CausalLM(config).to(dtype).eval()


def ids_of(batch, length, seed=1, vocab=17):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_attention_with_a_cache_equals_causal_attention_over_the_whole_sequence():
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(16, 4).double().eval()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    full = mha(x, x, x, tl.causal_mask(9))
    cache = mha.new_cache(2, 12)
    out = [mha(x[:, :4], x[:, :4], x[:, :4], tl.causal_mask(4), cache)]
    for t in range(4, 9):
        out.append(mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], None, cache))
    torch.testing.assert_close(torch.cat(out, 1), full, atol=1e-12, rtol=0)
    assert cache.length == 9 and cache.max_len == 12


def test_the_cache_is_allocated_once_and_written_in_place():
    model = model_with()
    cache = model.new_cache(2)
    pointers = [(c.keys.data_ptr(), c.values.data_ptr()) for c in cache]
    with torch.no_grad():
        model(ids_of(2, 5), cache=cache)
        for t in range(6):
            model(ids_of(2, 1, seed=t), cache=cache)
    assert [(c.keys.data_ptr(), c.values.data_ptr()) for c in cache] == pointers
    k, v = cache[0].append(torch.zeros(2, 4, 1, 4, dtype=torch.float64), torch.zeros(2, 4, 1, 4, dtype=torch.float64))
    assert k.data_ptr() == cache[0].keys.data_ptr()  # a view of the storage, not a copy
    assert k.shape == (2, 4, 12, 4)


def test_cache_errors_name_what_does_not_fit():
    model = model_with(max_len=10)
    cache = model.new_cache(1, max_len=6)
    with torch.no_grad():
        model(ids_of(1, 6), cache=cache)
        with pytest.raises(ValueError, match="room for 6 positions"):
            model(ids_of(1, 1), cache=cache)
    with pytest.raises(ValueError, match="max_len=11"):
        model.new_cache(1, max_len=11)
    layer_cache = tl.KVCache(1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"k must have shape \(batch, n_kv_heads, n, d_k\)"):
        layer_cache.append(torch.zeros(1, 4, 1, 3), torch.zeros(1, 4, 1, 3))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        tl.MultiHeadAttention(8, 2)(torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), cache=[])


def test_record_attention_sees_the_cached_path_too():
    model = model_with()
    ids = ids_of(1, 7)
    with torch.no_grad(), tl.record_attention(model) as full:
        model(ids)
    cache = model.new_cache(1)
    with torch.no_grad():
        model(ids[:, :6], cache=cache)
        with tl.record_attention(model) as last:
            model(ids[:, 6:], cache=cache)
    assert set(last) == set(full) == {"layers.0.self_attn", "layers.1.self_attn"}
    for name, w in last.items():
        assert w.shape == (1, 4, 1, 7)  # one new query against the 7 cached keys
        torch.testing.assert_close(w[:, :, 0], full[name][:, :, 6], atol=1e-12, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_grouped_query_attention_stores_n_kv_heads_of_n_heads_of_the_cache(n_kv_heads):
    model = model_with(n_kv_heads=n_kv_heads)
    cache = model.new_cache(3)
    with torch.no_grad():
        model(ids_of(3, 10), cache=cache)
    full_heads = 2 * 2 * 3 * 10 * 16 * 8  # K and V, 2 layers, batch 3, 10 positions, d_model 16, 8 bytes
    assert sum(c.nbytes() for c in cache) * 4 == full_heads * n_kv_heads


def test_grouped_query_attention_is_multi_head_attention_with_shared_key_value_heads():
    torch.manual_seed(0)
    gqa = tl.MultiHeadAttention(16, 4, n_kv_heads=2).double()
    mha = tl.MultiHeadAttention(16, 4).double()
    with torch.no_grad():
        for name in ("w_q", "w_o"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("w_k", "w_v"):  # key/value head j serves query heads 2j and 2j + 1
            w, b = getattr(gqa, name).weight.view(2, 4, 16), getattr(gqa, name).bias.view(2, 4)
            getattr(mha, name).weight.copy_(w.repeat_interleave(2, 0).reshape(16, 16))
            getattr(mha, name).bias.copy_(b.repeat_interleave(2, 0).reshape(16))
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    torch.testing.assert_close(gqa(x, x, x, tl.causal_mask(5)), mha(x, x, x, tl.causal_mask(5)))
    same = tl.MultiHeadAttention(16, 4, n_kv_heads=4)
    assert [p.shape for p in same.parameters()] == [p.shape for p in tl.MultiHeadAttention(16, 4).parameters()]


@settings(max_examples=12, deadline=None)
@given(options=st.fixed_dictionaries({
    "positions": st.sampled_from(["sinusoidal", "learned", "rope", "none"]),
    "norm": st.sampled_from(["layer", "rms"]), "ffn": st.sampled_from(["relu", "swiglu", "none"]),
    "n_kv_heads": st.sampled_from([None, 1, 2]), "bias": st.booleans(), "norm_first": st.booleans(),
    "tie_output": st.booleans()}),
    batch=st.integers(1, 3), prompt=st.integers(1, 6), new=st.integers(0, 12), seed=st.integers(0, 1000))
def test_cached_generation_equals_uncached_generation(options, batch, prompt, new, seed):
    model = model_with(seed=seed, **options)
    start = ids_of(batch, prompt, seed=seed)
    cached = lm.generate(model, start, new)
    assert torch.equal(cached, lm.generate(model, start, new, use_cache=False))
    draws = [lm.generate(model, start, new, sample=True, top_k=5, use_cache=c,
                         generator=torch.Generator().manual_seed(seed)) for c in (True, False)]
    assert torch.equal(*draws)


def test_generate_goes_through_the_cache(monkeypatch):
    model = model_with()
    lengths = []
    forward = lm.CausalLM.forward
    monkeypatch.setattr(lm.CausalLM, "forward", lambda self, ids, cache=None: (lengths.append(
        (ids.shape[1], cache is not None)), forward(self, ids, cache))[1])
    lm.generate(model, ids_of(1, 5), 4)
    assert lengths == [(5, True), (1, True), (1, True), (1, True)]  # the prompt once, then one token
    lengths.clear()
    lm.generate(model, ids_of(1, 5), 4, use_cache=False)
    assert lengths == [(5, False), (6, False), (7, False), (8, False)]
