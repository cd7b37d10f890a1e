"""Chapter 14's exercise check (nucleus, top-p, filtering): the solution and other right answers
pass; plausible wrong answers, and every one the reviews name, fail with a message that says
what is wrong."""
import math

import pytest
import torch

from transformer_lib.book.exercises import ch14

INF = float("-inf")


def solution(logits, p):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    before = probs.cumsum(-1) - probs
    keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < p)
    return logits.masked_fill(~keep, INF)


def ascending_like_hugging_face(logits, p):
    """Right, the other way round: sort ascending and drop the tail whose mass is <= 1 - p."""
    probs, order = logits.softmax(-1).sort(dim=-1)
    drop_sorted = probs.cumsum(-1) <= 1 - p
    drop_sorted[..., -1] = False  # always keep the most probable token
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, INF)


def row_by_row_in_python(logits, p):
    """Right: a loop over rows and plain Python lists."""
    out = []
    for row in logits.tolist():
        z = max(row)
        e = [math.exp(x - z) for x in row]
        probs = [x / sum(e) for x in e]
        ranked = sorted(range(len(row)), key=lambda i: -probs[i])
        keep, total = set(), 0.0
        for i in ranked:
            keep.add(i)
            total += probs[i]
            if total >= p:
                break
        out.append([x if i in keep else INF for i, x in enumerate(row)])
    return torch.tensor(out, dtype=logits.dtype)


def in_float64(logits, p):
    return solution(logits.double(), p).to(logits.dtype)


def relative_threshold(logits, p):
    """The review's hole (min-p style): keep tokens with prob >= (1 - p) * the largest."""
    probs = logits.softmax(-1)
    return logits.masked_fill(probs < (1 - p) * probs.max(-1, keepdim=True).values, INF)


def cumsum_at_most_p(logits, p):
    """Drops the token that carries the sum to p."""
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probs.cumsum(-1) <= p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, INF)


def cumsum_below_p_first_forced(logits, p):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probs.cumsum(-1) < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, INF)


def sum_before_at_most_p(logits, p):
    """Keeps a token while the sum before it is at most p: one too many where a prefix sums
    exactly to p (found by an independent reader)."""
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probs.cumsum(-1) - probs <= p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, INF)


def keeps_every_tie_at_the_boundary(logits, p):
    """Keeps every token as probable as the last one in the nucleus."""
    probs = logits.softmax(-1)
    sorted_probs, _ = probs.sort(-1, descending=True)
    in_nucleus = sorted_probs.cumsum(-1) - sorted_probs < p
    least = sorted_probs.masked_fill(~in_nucleus, 2.0).amin(-1, keepdim=True)
    return logits.masked_fill(probs < least, INF)


def gathers_back_with_argsort(logits, p):
    """Right: filters the sorted logits, then undoes the sort with argsort and gather."""
    sorted_logits, order = logits.sort(-1, descending=True)
    probs = sorted_logits.softmax(-1)
    sorted_logits = sorted_logits.masked_fill(probs.cumsum(-1) - probs >= p, INF)
    return sorted_logits.gather(-1, order.argsort(-1))


def without_unsorting(logits, p):
    probs, _ = logits.softmax(-1).sort(dim=-1, descending=True)
    keep = (probs.cumsum(-1) - probs) < p  # in sorted order, applied to the original order
    return logits.masked_fill(~keep, INF)


def gather_for_scatter(logits, p):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = (probs.cumsum(-1) - probs) < p
    keep = keep_sorted.gather(-1, order)
    return logits.masked_fill(~keep, INF)


def fixed_top_2(logits, p):
    kth = logits.topk(2, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, INF)


def returns_probabilities(logits, p):
    kept = solution(logits, p)
    return kept.softmax(-1).masked_fill(~torch.isfinite(kept), INF)


def returns_the_mask(logits, p):
    return torch.isfinite(solution(logits, p))


def fills_with_zero(logits, p):
    return solution(logits, p).nan_to_num(neginf=0.0)


def test_the_solution_and_other_right_answers_pass():
    for answer in (solution, ascending_like_hugging_face, row_by_row_in_python, in_float64,
                   gathers_back_with_argsort):
        assert ch14.check_top_p_filter(answer).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (relative_threshold, "too many: stop at the first token"),
    (cumsum_at_most_p, "too few: keep the token whose probability carries the sum to p"),
    (cumsum_below_p_first_forced, "too few"),
    (without_unsorting, "put the decision back in each token's original place"),
    (gather_for_scatter, "original place"),
    (fixed_top_2, "too"),
    (returns_probabilities, "leave the logits you keep unchanged"),
    (returns_the_mask, "not a boolean mask"),
    (fills_with_zero, "too many"),
    (sum_before_at_most_p, "the sum \\*before\\* it is below p \\(not at most p\\)"),
    (keeps_every_tie_at_the_boundary, "exactly p, so the nucleus is 2 tokens; you kept 4"),
])
def test_wrong_answers_fail_and_say_what_is_wrong(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch14.check_top_p_filter(answer)


def test_the_flat_row_tells_the_nucleus_from_the_relative_threshold():
    flat = torch.log(torch.tensor([[0.3, 0.3, 0.2, 0.2]]))
    assert torch.isfinite(solution(flat, 0.5)).sum() == 2
    assert torch.isfinite(relative_threshold(flat, 0.5)).sum() == 4


def test_the_brute_force_nucleus_is_the_definition():
    z = torch.tensor([[2.0, 1.0, 0.0, -1.0], [1.0, 3.0, 2.0, 0.0]])
    assert ch14.nucleus(z, 0.9).int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 0]]
    assert ch14.nucleus(z, 0.5).int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]
    # and the random cases are many and away from the boundary
    assert len(ch14._random_cases()) >= 8


def test_the_check_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="top_p_filter"):
        ch14.check_top_p_filter(None)
