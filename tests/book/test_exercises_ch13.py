"""Chapter 13's exercise check (one step of the online softmax): the solution and other right
answers pass; the wrong answers a reader is likely to write, and every one the reviews name,
fail with a message that says what is wrong."""
import math

import pytest
import torch

from transformer_lib.book.exercises import ch13


def solution(m, ell, o, scores, values):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    correction = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return m_new, ell * correction + p.sum(-1, keepdim=True), o * correction + p @ values


def with_max_values_and_einsum(m, ell, o, scores, values):
    """Right, written another way: .max(...).values, einsum, the correction applied last."""
    m_new = torch.max(m, scores.max(dim=1, keepdim=True).values)
    p = (scores - m_new).exp()
    c = (m - m_new).exp()
    return m_new, c * ell + p.sum(dim=1, keepdim=True), c * o + torch.einsum("qb,bd->qd", p, values)


def in_float64_inside(m, ell, o, scores, values):
    """Right: computes in float64 and returns float64 tensors."""
    return solution(m.double(), ell.double(), o.double(), scores.double(), values.double())


def without_maximum(m, ell, o, scores, values):
    p = torch.exp(scores)  # never subtracts a maximum, never updates m
    return m, ell + p.sum(-1, keepdim=True), o + p @ values


def tracks_maximum_but_never_subtracts_it(m, ell, o, scores, values):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores)  # exact in real arithmetic; overflows in floating point
    return m_new, ell + p.sum(-1, keepdim=True), o + p @ values


def without_rescaling(m, ell, o, scores, values):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores - m_new)  # forgets to rescale the old sums by exp(m - m_new)
    return m_new, ell + p.sum(-1, keepdim=True), o + p @ values


def rescales_ell_only(m, ell, o, scores, values):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    c, p = torch.exp(m - m_new), torch.exp(scores - m_new)
    return m_new, ell * c + p.sum(-1, keepdim=True), o + p @ values


def whole_block_maximum(m, ell, o, scores, values):
    """The review's hole: scores.max() (no dim) broadcasts, and every row shares one shift."""
    m_new = torch.maximum(m, scores.max())
    c, p = torch.exp(m - m_new), torch.exp(scores - m_new)
    return m_new, ell * c + p.sum(-1, keepdim=True), o * c + p @ values


def per_block_maximum(m, ell, o, scores, values):
    m_new = scores.amax(-1, keepdim=True)  # this block's maximum, not the running one
    c, p = torch.exp(m - m_new).nan_to_num(0.0), torch.exp(scores - m_new)
    return m_new, ell * c + p.sum(-1, keepdim=True), o * c + p @ values


def mean_shift(m, ell, o, scores, values):
    m_new = scores.mean(-1, keepdim=True)  # a shift, but not the maximum
    c, p = torch.exp(m - m_new).nan_to_num(0.0), torch.exp(scores - m_new)
    return m_new, ell * c + p.sum(-1, keepdim=True), o * c + p @ values


def normalised_o(m, ell, o, scores, values):
    m_new, ell_new, o_new = solution(m, ell, o * ell, scores, values)
    return m_new, ell_new, o_new / ell_new  # keeps o divided by l: the check divides again


def stale_first_block_maximum(m, ell, o, scores, values):
    m_new = torch.where(torch.isinf(m), scores.amax(-1, keepdim=True), m)  # never updated
    c, p = torch.exp(m - m_new).nan_to_num(0.0), torch.exp(scores - m_new)
    return m_new, ell * c + p.sum(-1, keepdim=True), o * c + p @ values


def per_block_maximum_without_rescaling(m, ell, o, scores, values):
    m_new = scores.amax(-1, keepdim=True)
    p = torch.exp(scores - m_new)
    return m_new, ell + p.sum(-1, keepdim=True), o + p @ values


def clamps_the_scores(m, ell, o, scores, values):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores.clamp(-80, 80))  # keeps exp finite, but changes the weights
    return m_new, ell + p.sum(-1, keepdim=True), o + p @ values


def returns_the_old_maximum(m, ell, o, scores, values):
    _, ell_new, o_new = solution(m, ell, o, scores, values)
    return m, ell_new, o_new


def returns_a_list(m, ell, o, scores, values):
    return list(solution(m, ell, o, scores, values))


def test_the_solution_and_other_right_answers_pass():
    for answer in (solution, with_max_values_and_einsum, in_float64_inside):
        assert ch13.check_online_update(answer).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (without_maximum, "running maximum"),
    (tracks_maximum_but_never_subtracts_it, "not finite: subtract the running maximum"),
    (without_rescaling, "rescale the old sums"),
    (rescales_ell_only, "rescale the old sums"),
    (whole_block_maximum, "same for every query row"),
    (per_block_maximum, "running maximum"),
    (mean_shift, "running maximum"),
    (normalised_o, "return the unnormalised o"),
    (returns_a_list, "tuple"),
    (stale_first_block_maximum, "running maximum"),
    (per_block_maximum_without_rescaling, "running maximum"),
    (clamps_the_scores, "differs from softmax"),
    (returns_the_old_maximum, "running maximum"),
])
def test_wrong_answers_fail_and_say_what_is_wrong(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch13.check_online_update(answer)


def test_the_answer_without_the_maximum_fails_only_where_exp_leaves_the_range():
    # tracked but never subtracted: the first two cases pass (exact in real arithmetic), the
    # third (scores near +800 in float64) is the first to fail
    assert ch13.check_online_update(tracks_maximum_but_never_subtracts_it,
                                    ch13.ONLINE_CASES[:2]).startswith("Correct")
    with pytest.raises(AssertionError, match="near \\+800"):
        ch13.check_online_update(tracks_maximum_but_never_subtracts_it)
    assert 709.7 < math.log(torch.finfo(torch.float64).max) < 709.8


def test_the_whole_block_maximum_gives_nan_on_rows_of_different_scales():
    # what the message warns of: with rows on scales 150 apart, one shared shift empties the
    # lower rows' sums (o / l = 0 / 0), so the case is a real failure, not a pedantic one
    what, dtype, offsets, spread = ch13.ONLINE_CASES[-1]
    scores = torch.tensor(offsets, dtype=dtype)[:, None] + spread * torch.randn(5, 24, dtype=dtype)
    values = torch.randn(24, 3, dtype=dtype)
    m = torch.full((5, 1), -math.inf, dtype=dtype)
    ell, o = torch.zeros(5, 1, dtype=dtype), torch.zeros(5, 3, dtype=dtype)
    m, ell, o = whole_block_maximum(m, ell, o, scores, values)
    assert torch.isnan(o / ell).any()
    m, ell, o = solution(torch.full((5, 1), -math.inf, dtype=dtype), torch.zeros(5, 1, dtype=dtype),
                         torch.zeros(5, 3, dtype=dtype), scores, values)
    torch.testing.assert_close(o / ell, scores.softmax(-1) @ values)


def test_the_overflow_cases_overflow_exp_without_the_maximum():
    # Each late case has a score whose exp overflows (or all exps underflow) in its dtype.
    overflow = {torch.float64: 709.78, torch.float32: 88.72}
    gen = torch.Generator().manual_seed(3)
    outcomes = []
    for _, dtype, offsets, spread in ch13.ONLINE_CASES:
        scores, _, _ = ch13._case(dtype, offsets, spread, gen)
        outcomes.append(bool(scores.max() > overflow[dtype] or scores.max() < -745))
    assert outcomes == [False, False, True, True, True, True]


def test_the_check_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="online_update"):
        ch13.check_online_update("solution")
