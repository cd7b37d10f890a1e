"""Chapter 5's exercise checks: the reference answers pass, other right answers pass, and the
plausible wrong answers (those the reviews name among them) fail with a message that says
what is wrong."""
from __future__ import annotations

import math
import re

import pytest
import torch

from transformer_lib.book.exercises import ch05


# --- exercise 1: split and merge ------------------------------------------------------------

def split(x, n_heads):
    B, T, d_model = x.shape
    return x.view(B, T, n_heads, d_model // n_heads).transpose(1, 2)


def merge(x):
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)


def test_the_reference_split_and_merge_pass():
    assert ch05.check_heads(split, merge).startswith("Correct")


@pytest.mark.parametrize("other_split, other_merge", [
    (lambda x, h: x.unflatten(-1, (h, x.shape[-1] // h)).permute(0, 2, 1, 3),
     lambda x: x.permute(0, 2, 1, 3).contiguous().view(x.shape[0], x.shape[2], -1)),
    (split, lambda x: torch.cat(x.unbind(1), dim=-1)),
])
def test_other_right_answers_pass(other_split, other_merge):
    assert ch05.check_heads(other_split, other_merge).startswith("Correct")


def merge_with_view(x):  # the review's finding: passes on split's output, fails on real heads
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).view(B, T, h * d_k)


@pytest.mark.parametrize("wrong_split, wrong_merge, message", [
    (split, merge_with_view, "merge with reshape (or .contiguous().view), not view"),
    (lambda x, h: x.view(x.shape[0], h, x.shape[1], -1), merge, "a view straight to (B, h, T, d_k)"),
    (split, lambda x: x.reshape(x.shape[0], x.shape[2], -1), "move the head axis back behind the tokens"),
    (lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), merge,
     "head i must hold features 4i .. 4i+3"),
    (lambda x, h: x, merge, "should give (B, h, T, d_k) = (2, 3, 5, 4)"),
])
def test_wrong_answers_fail_and_say_why(wrong_split, wrong_merge, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch05.check_heads(wrong_split, wrong_merge)


def test_not_implemented_reaches_the_notebook():
    def todo(*args):
        raise NotImplementedError
    with pytest.raises(NotImplementedError):
        ch05.check_heads(todo, todo)


# --- exercise 2: multi-query attention ------------------------------------------------------

def multi_query(x, W_Q, W_K, W_V, W_O, n_heads, mistake=None):
    Q = split(x @ W_Q, n_heads)
    K, V = (x @ W_K)[:, None], (x @ W_V)[:, None]
    scale = math.sqrt(x.shape[-1] if mistake == "sqrt(d_model)" else Q.shape[-1])
    weights = (Q @ K.transpose(-2, -1) / scale).softmax(dim=-1)
    out = merge(weights @ V)
    if mistake != "no W_O":
        out = out @ W_O
    if mistake == "mean of the heads":
        weights = weights.mean(1)
    return out, weights


def test_the_reference_multi_query_passes():
    assert ch05.check_multi_query(multi_query).startswith("Correct")


def multi_query_expanded_float64(x, W_Q, W_K, W_V, W_O, n_heads):
    """Another right answer: keys and values expanded to every head, in float64, as a list."""
    x, W_Q, W_K, W_V, W_O = (t.double() for t in (x, W_Q, W_K, W_V, W_O))
    B, T, _ = x.shape
    Q = split(x @ W_Q, n_heads)
    K = (x @ W_K)[:, None].expand(B, n_heads, T, -1)
    V = (x @ W_V)[:, None].expand(B, n_heads, T, -1)
    weights = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).softmax(-1)
    return [merge(weights @ V) @ W_O, weights]


def test_an_expanded_float64_answer_passes():
    assert ch05.check_multi_query(multi_query_expanded_float64).startswith("Correct")


@pytest.mark.parametrize("mistake, message", [
    ("sqrt(d_model)", "not by sqrt(d_model)"),
    ("no W_O", "multiply the concatenated heads by W_O"),
    ("mean of the heads", "not their mean"),
])
def test_wrong_multi_query_answers_fail_and_say_why(mistake, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch05.check_multi_query(lambda *args: multi_query(*args, mistake=mistake))


def test_keys_split_into_heads_fail_with_the_input_named():
    def split_keys(x, W_Q, W_K, W_V, W_O, n_heads):
        Q, K, V = split(x @ W_Q, n_heads), split(x @ W_K, n_heads), split(x @ W_V, n_heads)
        weights = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).softmax(-1)
        return merge(weights @ V) @ W_O, weights
    with pytest.raises(AssertionError, match=r"Not yet: (multi_query_attention with 4 heads raised|with 4 heads)"):
        ch05.check_multi_query(split_keys)
