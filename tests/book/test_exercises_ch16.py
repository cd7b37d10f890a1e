"""Chapter 16's exercise checks (grouped-query attention): the solutions and other right answers
pass; plausible wrong answers, and every one the review names, fail with a message that says
what is wrong."""
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.book.exercises import ch16


# share_kv ---------------------------------------------------------------------------------

def solution(kv, n_heads):
    return kv.repeat_interleave(n_heads // kv.shape[1], dim=1)


def expand_after_heads(kv, n_heads):
    """Right: a new axis after the heads, expanded, then merged (Llama's repeat_kv)."""
    B, h_kv, T, d = kv.shape
    return kv[:, :, None].expand(B, h_kv, n_heads // h_kv, T, d).reshape(B, n_heads, T, d)


def index_by_formula(kv, n_heads):
    """Right: index the heads with i * h_kv // n_heads, as a list of float64 tensors stacked."""
    h_kv = kv.shape[1]
    return torch.stack([kv[:, i * h_kv // n_heads].double() for i in range(n_heads)], dim=1)


def tiled(kv, n_heads):
    """Wrong (named by the review): tiles the heads 0, 1, 0, 1."""
    return kv.repeat(1, n_heads // kv.shape[1], 1, 1)


def modulo(kv, n_heads):
    """Wrong: query head i reads i % h_kv (the same tiling, written as an index)."""
    return kv[:, [i % kv.shape[1] for i in range(n_heads)]]


def expand_before_heads(kv, n_heads):
    """Wrong (named by the review): the new axis before the heads, which tiles them."""
    B, h_kv, T, d = kv.shape
    return kv[:, None].expand(B, n_heads // h_kv, h_kv, T, d).reshape(B, n_heads, T, d)


def fixed_group_of_two(kv, n_heads):
    """Wrong (named by the review): a hard-coded group size."""
    return kv.repeat_interleave(2, dim=1)


def no_sharing(kv, n_heads):
    """Wrong: returns the key/value heads unchanged."""
    return kv


@pytest.mark.parametrize("fn", [solution, expand_after_heads, index_by_formula])
def test_right_answers_pass(fn):
    assert ch16.check_share_kv(fn).startswith("Correct")


@pytest.mark.parametrize("fn, message", [
    (tiled, "tiled 0, 1, 0, 1"),
    (modulo, "tiled 0, 1, 0, 1"),
    (expand_before_heads, "tiled 0, 1, 0, 1"),
    (fixed_group_of_two, "should return shape"),
    (no_sharing, "should return shape"),
])
def test_wrong_answers_fail_with_what_is_wrong(fn, message):
    with pytest.raises(AssertionError, match=message):
        ch16.check_share_kv(fn)


def test_a_head_that_is_no_head_is_named():
    def noisy(kv, n_heads):
        return solution(kv, n_heads) + 1.0
    with pytest.raises(AssertionError, match="none of the key/value heads"):
        ch16.check_share_kv(noisy)


# grouped attention without copies ---------------------------------------------------------

def folded(q, k, v, mask=None):
    """The chapter's copy-free version: each group's queries stacked as rows."""
    B, h, T, d_k = q.shape
    h_kv = k.shape[1]
    g = h // h_kv
    scores = (q.reshape(B, h_kv, g * T, d_k) @ k.transpose(-2, -1) / math.sqrt(d_k))
    scores = scores.view(B, h_kv, g, T, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1).view(B, h_kv, g * T, -1) @ v).view(B, h, T, d_k)


def pytorch_gqa(q, k, v, mask=None):
    """Right: PyTorch's own grouped attention."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def broadcast_5d(q, k, v, mask=None):
    """Wrong (the review's finding 1): right values, but the broadcast matmul copies K and V."""
    B, h, T, d_k = q.shape
    h_kv = k.shape[1]
    scores = q.view(B, h_kv, h // h_kv, T, d_k) @ k[:, :, None].transpose(-2, -1)
    scores = scores / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v[:, :, None]).reshape(B, h, T, d_k)


def repeated(q, k, v, mask=None):
    """Wrong: right values, through a full copy of every shared head."""
    g = q.shape[1] // k.shape[1]
    return pytorch_gqa(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), mask)


def copied_per_head(q, k, v, mask=None):
    """Wrong (the independent read's finding): the same g-fold copy, made in pieces, one
    key/value head at a time, so that no single tensor is as large as the whole copy."""
    B, h, T, d_k = q.shape
    h_kv = k.shape[1]
    g = h // h_kv
    ks = [k[:, j : j + 1].expand(B, g, -1, d_k).contiguous() for j in range(h_kv)]
    vs = [v[:, j : j + 1].expand(B, g, -1, d_k).contiguous() for j in range(h_kv)]
    outs = [F.scaled_dot_product_attention(q[:, j * g : (j + 1) * g], ks[j], vs[j], attn_mask=mask)
            for j in range(h_kv)]
    return torch.cat(outs, 1)


def folded_tiled(q, k, v, mask=None):
    """Wrong: query heads grouped by i % h_kv."""
    B, h, T, d_k = q.shape
    h_kv = k.shape[1]
    order = torch.cat([torch.arange(j, h, h_kv) for j in range(h_kv)])
    out = folded(q[:, order], k, v, mask)
    return out[:, torch.argsort(order)]


def no_mask(q, k, v, mask=None):
    """Wrong: forgets the mask."""
    return folded(q, k, v)


def no_scale(q, k, v, mask=None):
    """Wrong: no 1/sqrt(d_k)."""
    return folded(q * math.sqrt(q.shape[-1]), k, v, mask)


def test_copy_free_answer_passes():
    assert ch16.check_grouped_attention(folded).startswith("Correct")


def test_pytorch_gqa_is_judged_by_what_it_creates():
    # PyTorch's own grouped attention copies nothing in today's releases (2.13), but older ones
    # (2.5) repeat the keys for every query head inside it: the check must follow the storage
    largest, full = ch16.gqa_copy_report(pytorch_gqa)
    if largest < full and ch16.total_new_storage(pytorch_gqa, *ch16._decoding_step()) < full // 2:
        assert ch16.check_grouped_attention(pytorch_gqa).startswith("Correct")
    else:
        with pytest.raises(AssertionError, match="materialises|in pieces"):
            ch16.check_grouped_attention(pytorch_gqa)


def test_float32_answer_passes():
    def in_float32(q, k, v, mask=None):
        return folded(q.float(), k.float(), v.float(), mask)
    assert ch16.check_grouped_attention(in_float32).startswith("Correct")


@pytest.mark.parametrize("fn, message", [
    (broadcast_5d, "materialises"),
    (repeated, "materialises"),
    (copied_per_head, "copies the keys in pieces"),
    (folded_tiled, "differs from"),
    (no_mask, "mask is not applied"),
    (no_scale, "differs from"),
])
def test_wrong_grouped_attention_fails(fn, message):
    with pytest.raises(AssertionError, match=message):
        ch16.check_grouped_attention(fn)


def test_the_copy_report_tells_the_two_apart():
    copy_free, full = ch16.gqa_copy_report(folded)
    copied, _ = ch16.gqa_copy_report(broadcast_5d)
    assert copy_free * 8 <= full <= copied


def test_views_count_for_nothing():
    x = torch.randn(4, 8)
    assert ch16.largest_new_storage(lambda t: t.view(8, 4).T[:, None].expand(4, 3, 8), x) == 0
    assert ch16.largest_new_storage(lambda t: t.clone(), x) == x.numel() * 4
