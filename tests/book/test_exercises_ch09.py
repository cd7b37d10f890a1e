"""Chapter 9's exercise checks: the reference solutions pass, the usual slips fail with a message
that says what is wrong, and other right answers pass."""
import math

import pytest
import torch

from transformer_lib.book.exercises import ch09


# ---- exercise 1: cross_attention_weights -----------------------------------------------------

def unscaled(attn, queries_from, memory, memory_mask):
    q = attn.split_heads(attn.w_q(queries_from))
    k = attn.split_heads(attn.w_k(memory))
    return (q @ k.transpose(-2, -1)).masked_fill(~memory_mask, float("-inf")).softmax(-1)


def unmasked(attn, queries_from, memory, memory_mask):
    q = attn.split_heads(attn.w_q(queries_from))
    k = attn.split_heads(attn.w_k(memory))
    return (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).softmax(-1)


def swapped(attn, queries_from, memory, memory_mask):
    """Queries from the memory, keys from the decoder: the mask cannot broadcast."""
    return ch09.cross_attention_weights(attn, memory, queries_from, memory_mask)


def swapped_without_mask(attn, queries_from, memory, memory_mask):
    q = attn.split_heads(attn.w_q(memory))
    k = attn.split_heads(attn.w_k(queries_from))
    return (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).softmax(-1)


def value_projection_for_keys(attn, queries_from, memory, memory_mask):
    q = attn.split_heads(attn.w_q(queries_from))
    k = attn.split_heads(attn.w_v(memory))
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)
    return scores.masked_fill(~memory_mask, float("-inf")).softmax(-1)


def finite_fill(attn, queries_from, memory, memory_mask):
    """A right answer: a large negative finite fill, as the library does, in float64."""
    q = attn.split_heads(attn.w_q(queries_from)).double()
    k = attn.split_heads(attn.w_k(memory)).double()
    scores = q @ k.transpose(-2, -1) / attn.d_k ** 0.5
    return scores.masked_fill(~memory_mask, torch.finfo(torch.float64).min).softmax(-1)


@pytest.mark.parametrize("answer", [ch09.cross_attention_weights, finite_fill])
def test_cross_attention_right_answers_pass(answer):
    assert ch09.check_cross_attention_weights(answer).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (unscaled, r"divide the scores by sqrt\(d_k\)"),
    (unmasked, "apply memory_mask"),
    (swapped, "raised RuntimeError .* which input gives the queries"),
    (swapped_without_mask, r"\(B, h, S, T\): the queries came from the memory"),
    (value_projection_for_keys, "which projections did you use"),
])
def test_cross_attention_slips_fail_with_their_message(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch09.check_cross_attention_weights(answer)


# ---- exercise 2: the memory cache ------------------------------------------------------------

def projects_twice(decoder, memory):
    ch09.cache_memory(decoder, memory)
    return ch09.cache_memory(decoder, memory)


def layer_0_everywhere(decoder, memory):
    cache = []
    for layer in decoder.layers:
        attn = decoder.layers[0].cross_attn  # the slip: layer 0's projections every time
        cache.append((attn.split_heads(attn.w_k(memory)), attn.split_heads(attn.w_v(memory))))
    return cache


def layer_0_once(decoder, memory):
    attn = decoder.layers[0].cross_attn
    pair = (attn.split_heads(attn.w_k(memory)), attn.split_heads(attn.w_v(memory)))
    return [pair for _ in decoder.layers]


def no_output_projection(attn, x, K, V, memory_mask):
    q = attn.split_heads(attn.w_q(x))
    scores = q @ K.transpose(-2, -1) / math.sqrt(attn.d_k)
    return attn.merge_heads(scores.masked_fill(~memory_mask, float("-inf")).softmax(-1) @ V)


def no_mask(attn, x, K, V, memory_mask):
    q = attn.split_heads(attn.w_q(x))
    return attn.w_o(attn.merge_heads((q @ K.transpose(-2, -1) / math.sqrt(attn.d_k)).softmax(-1) @ V))


def reprojects(attn, x, K, V, memory_mask):
    attn.w_k(torch.zeros(1, 1, K.shape[1] * K.shape[3]))  # a wasted projection per step
    return ch09.cross_attention_from_cache(attn, x, K, V, memory_mask)


def cache_as_tuple(decoder, memory):
    """A right answer: a tuple of pairs, built with a comprehension."""
    return tuple((layer.cross_attn.split_heads(layer.cross_attn.w_k(memory)),
                  layer.cross_attn.split_heads(layer.cross_attn.w_v(memory)))
                 for layer in decoder.layers)


def attend_with_sdpa(attn, x, K, V, memory_mask):
    """A right answer through the fused function (True = may attend)."""
    q = attn.split_heads(attn.w_q(x))
    out = torch.nn.functional.scaled_dot_product_attention(q, K, V, attn_mask=memory_mask)
    return attn.w_o(attn.merge_heads(out))


@pytest.mark.parametrize("cache_fn, attend_fn", [
    (ch09.cache_memory, ch09.cross_attention_from_cache),
    (cache_as_tuple, attend_with_sdpa),
])
def test_memory_cache_right_answers_pass(cache_fn, attend_fn):
    verdict = ch09.check_memory_cache(cache_fn, attend_fn)
    assert verdict.startswith("Correct") and "ran 6 times" in verdict and len(verdict) <= 88


@pytest.mark.parametrize("cache_fn, attend_fn, message", [
    (projects_twice, ch09.cross_attention_from_cache, "ran the key and value projections 12 times"),
    (layer_0_everywhere, ch09.cross_attention_from_cache, "reads layer 0's keys and values"),
    (layer_0_once, ch09.cross_attention_from_cache, "ran the key and value projections 2 times"),
    (ch09.cache_memory, no_output_projection, "W\\^O is missing"),
    (ch09.cache_memory, no_mask, "apply memory_mask"),
    (ch09.cache_memory, reprojects, "9 more times; use the cached K and V"),
])
def test_memory_cache_slips_fail_with_their_message(cache_fn, attend_fn, message):
    with pytest.raises(AssertionError, match=message):
        ch09.check_memory_cache(cache_fn, attend_fn)


def test_the_stub_is_not_mistaken_for_a_slip():
    """NotImplementedError (a RuntimeError) reaches the notebook, which says what to do."""
    def stub(attn, queries_from, memory, memory_mask):
        raise NotImplementedError("replace this line with your answer")
    with pytest.raises(NotImplementedError):
        ch09.check_cross_attention_weights(stub)
