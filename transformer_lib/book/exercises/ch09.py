"""Chapter 9's exercises: cross-attention weights by hand, and a cache of the memory's keys and
values.

Each check returns a one-line verdict when the answer is right and raises an AssertionError
saying what is wrong otherwise. The reference solutions are `cross_attention_weights`,
`cache_memory` and `cross_attention_from_cache`.
"""
from __future__ import annotations

import math

import torch

import transformer_lib as tl

__all__ = ["check_cross_attention_weights", "check_memory_cache", "cross_attention_weights",
           "cache_memory", "cross_attention_from_cache"]


# --------------------------------------------------------------------------------------------
# Exercise 1: the cross-attention weights
# --------------------------------------------------------------------------------------------

def cross_attention_weights(attn, queries_from, memory, memory_mask):
    """The reference solution: (B, h, T, S) weights of the decoder positions over the memory."""
    q = attn.split_heads(attn.w_q(queries_from))  # (B, h, T, d_k)
    k = attn.split_heads(attn.w_k(memory))  # (B, h, S, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)  # (B, h, T, S)
    return scores.masked_fill(~memory_mask, float("-inf")).softmax(-1)


def _close(a, b, atol=1e-6) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b, atol=atol)


def check_cross_attention_weights(fn) -> str:
    """Check `fn(attn, queries_from, memory, memory_mask)` against the weights the module
    records; name the usual slips (no scaling, no mask, queries and memory swapped)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        attn = tl.MultiHeadAttention(16, 4).eval()
        queries_from, mem = torch.randn(2, 3, 16), torch.randn(2, 6, 16)  # T = 3, S = 6
    mask = tl.padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]), pad_id=0)  # (B, 1, 1, S)
    with torch.no_grad():
        attn.record_weights = True
        attn(queries_from, mem, mem, mask)
        expected = attn.last_weights  # (B, h, T, S)
        attn.record_weights = False
        try:
            got = fn(attn, queries_from, mem, mask)
        except NotImplementedError:  # the exercise's stub: the notebook says what to do
            raise
        except RuntimeError as error:
            raise AssertionError(
                "Not yet: your function raised RuntimeError "
                f"({str(error).splitlines()[0][:100]}). The mask has one column per memory "
                "position, so the keys must come from the memory and the queries from the "
                "decoder stream: which input gives the queries?") from None
        assert isinstance(got, torch.Tensor), (
            f"Not yet: return the weights as a tensor, got {type(got).__name__}")
        B, h, T, S = expected.shape
        assert tuple(got.shape) != (B, h, S, T), (
            f"Not yet: the weights are {tuple(got.shape)} = (B, h, S, T): the queries came "
            "from the memory. Queries come from the decoder stream, keys from the memory")
        assert got.shape == expected.shape, (
            f"Not yet: expected shape {tuple(expected.shape)} = (B, h, T, S), got "
            f"{tuple(got.shape)}")
        if _close(got, expected):
            return "Correct: queries from the decoder, keys from the memory."
        q = attn.split_heads(attn.w_q(queries_from))
        k = attn.split_heads(attn.w_k(mem))
        scores = q @ k.transpose(-2, -1)
        assert not _close(got, scores.masked_fill(~mask, float("-inf")).softmax(-1)), (
            "Not yet: divide the scores by sqrt(d_k) before the softmax")
        assert not _close(got, (scores / math.sqrt(attn.d_k)).softmax(-1)), (
            "Not yet: the padding columns of the second sentence get weight; apply "
            "memory_mask (masked_fill with -inf where it is False) before the softmax")
    raise AssertionError("Not yet: the shape is right but the weights differ from the "
                         "module's (which projections did you use? W^Q on the decoder "
                         "stream, W^K on the memory)")


# --------------------------------------------------------------------------------------------
# Exercise 2: cache the memory's keys and values
# --------------------------------------------------------------------------------------------

def cache_memory(decoder, memory):
    """The reference solution: [(K, V) for each decoder layer], each (B, h, S, d_k)."""
    cache = []
    for layer in decoder.layers:
        attn = layer.cross_attn
        cache.append((attn.split_heads(attn.w_k(memory)), attn.split_heads(attn.w_v(memory))))
    return cache


def cross_attention_from_cache(attn, x, K, V, memory_mask):
    """The reference solution: attn's cross-attention output (B, T, d_model) from a cached K, V."""
    q = attn.split_heads(attn.w_q(x))  # (B, h, T, d_k)
    scores = q @ K.transpose(-2, -1) / math.sqrt(attn.d_k)  # (B, h, T, S)
    weights = scores.masked_fill(~memory_mask, float("-inf")).softmax(-1)
    return attn.w_o(attn.merge_heads(weights @ V))  # (B, T, d_model)


def check_memory_cache(cache_fn, attend_fn) -> str:
    """Play three decoding steps of a 3-layer decoder: every layer's result from the cache must
    equal the layer's own cross-attention on the whole memory, and the key and value
    projections must run exactly once per layer each, all of them in `cache_fn`."""
    n_layers, steps = 3, (1, 2, 3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        dec = tl.Decoder(16, 4, d_ff=32, n_layers=n_layers, dropout=0.0).eval()
        mem = torch.randn(2, 6, 16)  # the encoder's output, S = 6
        stream = [torch.randn(2, t, 16) for t in steps]  # the decoder stream at three steps
    mem_mask = tl.padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]), pad_id=0)
    layers = [layer.cross_attn for layer in dec.layers]
    projections = []  # one entry per call of a cross-attention's w_k or w_v
    with torch.no_grad():
        expected = [[attn(x, mem, mem, mem_mask) for attn in layers] for x in stream]
        hooks = [lin.register_forward_hook(lambda *args: projections.append(1))
                 for attn in layers for lin in (attn.w_k, attn.w_v)]
        try:
            cache = list(cache_fn(dec, mem))
            made = len(projections)
            assert len(cache) == n_layers, (
                f"Not yet: one (K, V) pair per layer, {n_layers} in all; got {len(cache)}")
            shapes = {tuple(t.shape) for pair in cache for t in pair}
            assert shapes == {(2, 4, 6, 4)}, (
                f"Not yet: K and V must be (B, h, S, d_k) = (2, 4, 6, 4); got {sorted(shapes)}")
            got = [[attend_fn(attn, x, K, V, mem_mask) for attn, (K, V) in zip(layers, cache)]
                   for x in stream]
        finally:
            for hook in hooks:
                hook.remove()
    assert made == 2 * n_layers, (
        f"Not yet: cache_memory ran the key and value projections {made} times for "
        f"{n_layers} layers; once per layer each makes {2 * n_layers}")
    for step, (outs, refs) in enumerate(zip(got, expected), 1):
        for i, (out, ref) in enumerate(zip(outs, refs)):
            if _close(out, ref, atol=1e-5):
                continue
            attn, (K, V) = layers[i], cache[i]
            with torch.no_grad():
                first = layers[0]
                K0, V0 = first.split_heads(first.w_k(mem)), first.split_heads(first.w_v(mem))
                from_first = cross_attention_from_cache(attn, stream[step - 1], K0, V0, mem_mask)
            assert not (i > 0 and _close(out, from_first, atol=1e-5)), (
                f"Not yet: layer {i} reads layer 0's keys and values; every layer projects the "
                "memory with its own W^K and W^V")
            with torch.no_grad():
                q = attn.split_heads(attn.w_q(stream[step - 1]))
                scores = q @ K.transpose(-2, -1) / math.sqrt(attn.d_k)
                merged = attn.merge_heads(scores.masked_fill(~mem_mask, float("-inf"))
                                          .softmax(-1) @ V)
                unmasked = attn.w_o(attn.merge_heads(scores.softmax(-1) @ V))
            assert not _close(out, merged, atol=1e-5), (
                "Not yet: the heads are merged but W^O is missing: end with attn.w_o(...)")
            assert not _close(out, unmasked, atol=1e-5), (
                "Not yet: the memory's padding gets weight; apply memory_mask before the "
                "softmax")
            raise AssertionError(
                f"Not yet: step {step}, layer {i} differs from the layer's own cross-attention "
                "(whose W^Q? whose K and V? the mask? W^O?)")
    assert len(projections) == made, (
        f"Not yet: the decoding steps ran the key and value projections "
        f"{len(projections) - made} more times; use the cached K and V")
    return (f"Correct: the key and value projections ran {made} times (once per layer "
            f"each), not {2 * n_layers * len(steps)}.")
