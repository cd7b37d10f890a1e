"""Chapter 2's exercise check (transformer_lib/book/exercises/ch02.py): plain dot-product
attention with a padding mask.

The reference solution and other right answers pass (a mask of -1e9, the weights masked after
the softmax and renormalised, a list); the slips fail, each with a message that says what is
wrong (among them the four the chapter's review tried: no mask, the weights masked after the
softmax without renormalising, the scores scaled by sqrt(d), a context that ignores the
weights)."""
import math

import pytest
import torch

from transformer_lib.book.exercises import ch02


def solution(s, a, mask):
    scores = (a @ s[:, :, None]).squeeze(-1)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (weights[:, :, None] * a).sum(dim=1), weights


def large_negative_mask(s, a, mask):
    scores = torch.einsum("bd,btd->bt", s, a).masked_fill(~mask, -1e9)
    weights = scores.softmax(dim=-1)
    return torch.bmm(weights[:, None], a)[:, 0], weights


def renormalised_after_softmax(s, a, mask):
    weights = (a @ s[:, :, None]).squeeze(-1).softmax(dim=-1) * mask
    weights = weights / weights.sum(-1, keepdim=True)
    return [(weights[:, :, None] * a).sum(dim=1), weights]


def no_mask(s, a, mask):
    weights = (a @ s[:, :, None]).squeeze(-1).softmax(dim=-1)
    return (weights[:, :, None] * a).sum(dim=1), weights


def masked_after_softmax(s, a, mask):
    weights = (a @ s[:, :, None]).squeeze(-1).softmax(dim=-1) * mask
    return (weights[:, :, None] * a).sum(dim=1), weights


def scaled(s, a, mask):
    scores = (a @ s[:, :, None]).squeeze(-1) / math.sqrt(s.shape[-1])
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (weights[:, :, None] * a).sum(dim=1), weights


def context_ignores_weights(s, a, mask):
    _, weights = solution(s, a, mask)
    return (a * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True), weights


def softmax_over_the_batch(s, a, mask):
    scores = (a @ s[:, :, None]).squeeze(-1)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=0)
    return (weights[:, :, None] * a).sum(dim=1), weights


def pair_reversed(s, a, mask):
    context, weights = solution(s, a, mask)
    return weights, context


def scored_with_a_sum(s, a, mask):  # the scores are not dot products
    scores = (a + s[:, None, :]).sum(-1)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (weights[:, :, None] * a).sum(dim=1), weights


@pytest.mark.parametrize("answer", [solution, large_negative_mask, renormalised_after_softmax])
def test_right_answers_pass(answer):
    verdict = ch02.check_dot_attention(answer)
    assert verdict.startswith("Correct") and "\n" not in verdict and len(verdict) <= 88


@pytest.mark.parametrize("answer, message", [
    (no_mask, "padded positions must get weight exactly 0"),
    (masked_after_softmax, "must sum to 1 over the real positions, yours sum to"),
    (scaled, "divide the scores by sqrt"),
    (context_ignores_weights, "the context is not their weighted sum"),
    (softmax_over_the_batch, "must sum to 1"),
    (pair_reversed, r"you returned \(weights, context\)"),
    (scored_with_a_sum, r"differ from softmax\(s \. a_t'\)"),
])
def test_wrong_answers_fail_and_say_why(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch02.check_dot_attention(answer)


def test_an_unanswered_exercise_reaches_the_notebook_as_not_implemented():
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        ch02.check_dot_attention(stub)
