"""The decoder-only language model, its key/value cache and generation (transformer_lib.lm)."""
from __future__ import annotations

import pytest
import torch

from transformer_lib import lm


def make_model(dtype=torch.float32, norm_first=True, seed=0, **sizes):
    torch.manual_seed(seed)
    options = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=64, norm_first=norm_first)
    options.update(sizes)
    return lm.CausalLM(lm.CausalLMConfig(20, **options)).to(dtype).eval()


def random_ids(batch, length, vocab=20, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_forward_shape_and_tied_output():
    model = make_model()
    assert model(random_ids(3, 7)).shape == (3, 7, 20)
    assert model.out.weight is model.embed.weight


@pytest.mark.parametrize("norm_first", [True, False])
def test_changing_a_future_token_changes_no_earlier_logit(norm_first):
    model = make_model(norm_first=norm_first)
    ids = random_ids(2, 12)
    changed = ids.clone()
    changed[:, 8] = (changed[:, 8] + 1) % 20
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])  # the changed position and later ones do change


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_logits_equal_full_forward(dtype, tol, norm_first):
    model = make_model(dtype, norm_first)
    ids = random_ids(2, 20)
    cache = model.new_cache(2)
    with torch.no_grad():
        full = model(ids)
        pieces = [model(ids[:, :5], cache=cache)]  # a prompt of 5, then 1, then 3, then one at a time
        pieces.append(model(ids[:, 5:6], cache=cache))
        pieces.append(model(ids[:, 6:9], cache=cache))
        pieces += [model(ids[:, t:t + 1], cache=cache) for t in range(9, 20)]
    stepped = torch.cat(pieces, dim=1)
    assert [c.length for c in cache] == [20, 20]
    assert cache[0].keys.shape == (2, 4, 64, 8)  # allocated once, for max_len positions
    assert sum(c.nbytes() for c in cache) == 2 * 2 * 2 * 20 * 32 * full.element_size()
    torch.testing.assert_close(stepped, full, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cached_greedy_equals_uncached_greedy(dtype):
    model = make_model(dtype)
    prompt = random_ids(3, 4)
    cached = lm.generate(model, prompt, 40, use_cache=True)
    uncached = lm.generate(model, prompt, 40, use_cache=False)
    assert cached.shape == (3, 44)
    assert torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, uncached)


def test_cached_sampling_equals_uncached_sampling_with_the_same_generator():
    model = make_model(torch.float64)
    prompt = random_ids(2, 3)
    draws = [lm.generate(model, prompt, 30, sample=True, temperature=1.5, top_k=5, use_cache=c,
                         generator=torch.Generator().manual_seed(7)) for c in (True, False)]
    assert torch.equal(*draws)


def test_top_k_one_sampling_equals_greedy():
    model = make_model()
    prompt = random_ids(2, 3)
    greedy = lm.generate(model, prompt, 25)
    sampled = lm.generate(model, prompt, 25, sample=True, top_k=1, temperature=2.0,
                          generator=torch.Generator().manual_seed(3))
    assert torch.equal(greedy, sampled)


def test_sampling_depends_on_the_generator_and_temperature_sharpens():
    model = make_model()
    prompt = random_ids(1, 3)
    a, b = (lm.generate(model, prompt, 30, sample=True, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    assert not torch.equal(a, b)
    cold = lm.generate(model, prompt, 30, sample=True, temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold, lm.generate(model, prompt, 30))  # a temperature near 0 is greedy


def test_top_k_filter_keeps_exactly_k():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5], [0.0, -1.0, 5.0, 4.0]])
    kept = lm.top_k_filter(logits, 2)
    assert torch.equal(torch.isfinite(kept), torch.tensor([[False, True, True, False], [False, False, True, True]]))
    assert torch.equal(kept[torch.isfinite(kept)], torch.tensor([3.0, 2.0, 5.0, 4.0]))
    probs = lm.top_k_filter(logits, 2).softmax(-1)
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_temperature_scales_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.cat([lm.next_token(logits, sample=True, temperature=0.25, generator=g)
                                       for _ in range(400)]).flatten(), minlength=3)
    assert counts[0] > 350  # softmax([8, 4, 0]) puts 0.98 on the first token


def test_bad_inputs_raise_clear_errors():
    model = make_model()
    prompt = random_ids(1, 3)
    with pytest.raises(TypeError, match="model"):
        lm.generate(torch.nn.Linear(2, 2), prompt, 3)
    with pytest.raises(TypeError, match="prompt"):
        lm.generate(model, prompt.float(), 3)
    with pytest.raises(ValueError, match="prompt"):
        lm.generate(model, torch.full((1, 3), 20), 3)  # id 20 is outside a vocabulary of 20
    with pytest.raises(ValueError, match="max_len"):
        lm.generate(model, prompt, 62)
    with pytest.raises(ValueError, match="max_new_tokens"):
        lm.generate(model, prompt, -1)
    with pytest.raises(ValueError, match="temperature"):
        lm.generate(model, prompt, 3, sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_k"):
        lm.generate(model, prompt, 3, sample=True, top_k=0)
    with pytest.raises(ValueError, match="top_k"):
        lm.top_k_filter(torch.zeros(1, 4), 5)
    with pytest.raises(ValueError, match="max_len"):
        model(random_ids(1, 65))
    with pytest.raises(TypeError, match="cache"):
        model(prompt, cache=[None, None])
    cache = model.new_cache(2)
    model(random_ids(2, 3), cache=cache)
    with pytest.raises(ValueError, match="cache holds 2 sequences"):
        model(prompt, cache=cache)
    with pytest.raises(ValueError, match="vocab_size"):
        lm.CausalLMConfig(0)
    with pytest.raises(ValueError, match="d_model"):
        lm.CausalLMConfig(10, d_model=30, n_heads=4)


def test_generate_restores_training_mode():
    model = make_model().train()
    lm.generate(model, random_ids(1, 2), 3)
    assert model.training


def test_cached_generation_projects_each_position_once_and_attends_over_the_cache(monkeypatch):
    """With the cache, every position goes through each layer's key and value projections
    exactly once (the prompt in one call, then one new token per step), the attention at step
    t reads all t positions back from the cache, and what the cache holds is exactly the keys
    and values a full pass over the same tokens computes. Without it, every step re-projects
    the whole prefix."""
    model = make_model(torch.float64, n_layers=2, n_heads=4)
    prompt, new = random_ids(2, 5), 6
    rows = {i: [] for i in range(len(model.layers))}
    hooks = [layer.self_attn.w_k.register_forward_hook(
        lambda module, args, out, i=i: rows[i].append(args[0].shape[1]))
        for i, layer in enumerate(model.layers)]
    read = []
    append = lm.KVCache.append
    monkeypatch.setattr(lm.KVCache, "append", lambda self, k, v: read.append(append(self, k, v)) or read[-1])
    caches = []
    new_cache = lm.CausalLM.new_cache
    monkeypatch.setattr(lm.CausalLM, "new_cache",
                        lambda self, *a, **kw: caches.append(new_cache(self, *a, **kw)) or caches[-1])

    out = lm.generate(model, prompt, new)
    assert all(r == [5, 1, 1, 1, 1, 1] for r in rows.values()), rows  # 5 + 6 - 1 positions, once each
    assert [k.shape[2] for k, _ in read[:: len(model.layers)]] == [5, 6, 7, 8, 9, 10]
    (cache,) = caches
    full = {}
    hooks += [layer.self_attn.w_k.register_forward_hook(
        lambda module, args, out, i=i: full.__setitem__(("k", i), out)) for i, layer in enumerate(model.layers)]
    hooks += [layer.self_attn.w_v.register_forward_hook(
        lambda module, args, out, i=i: full.__setitem__(("v", i), out)) for i, layer in enumerate(model.layers)]
    with torch.no_grad():
        model(out[:, :-1])  # every token the cached run fed in, at once (its last token was never fed)
    for i, (layer, layer_cache) in enumerate(zip(model.layers, cache)):
        attn = layer.self_attn
        assert layer_cache.length == 10
        for name, stored in (("k", layer_cache.keys), ("v", layer_cache.values)):
            expected = attn.split_heads(full[name, i], attn.n_kv_heads)  # (B, h_kv, 10, d_k)
            torch.testing.assert_close(stored[:, :, :10], expected, rtol=1e-12, atol=1e-12)

    for r in rows.values():
        r.clear()
    assert torch.equal(lm.generate(model, prompt, new, use_cache=False), out)
    assert all(r == [5, 6, 7, 8, 9, 10] for r in rows.values()), rows  # the whole prefix every step
    for hook in hooks:
        hook.remove()
