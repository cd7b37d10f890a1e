"""Chapter 18's exercise check: the prefix-matching score (`exercises.ch18`)."""
import pytest
import torch

from transformer_lib.book import induction
from transformer_lib.book.exercises import ch18


def reference(weights, period):
    w = weights.mean(0)
    rows = torch.arange(period, 2 * period)
    return w[:, rows, rows - period + 1].mean(-1)


def test_the_reference_passes():
    assert ch18.check_induction_score(reference).startswith("Correct")


def test_other_right_answers_pass():
    def with_a_loop(weights, period):  # float32, a list, explicit loops
        w = weights.float().mean(0)
        return [sum(float(w[h, i, i - period + 1]) for i in range(period, 2 * period)) / period
                for h in range(w.shape[0])]

    assert ch18.check_induction_score(with_a_loop).startswith("Correct")
    assert ch18.check_induction_score(induction.induction_score).startswith("Correct")  # the library's


@pytest.mark.parametrize("wrong, message", [
    (lambda w, p: w.mean(0)[:, torch.arange(p, 2 * p), torch.arange(0, p)].mean(-1), "duplicate-token"),
    (lambda w, p: w.mean(0)[:, torch.arange(p, 2 * p), torch.arange(p - 1, 2 * p - 1)].mean(-1), "previous-token"),
    (lambda w, p: w.mean(0).diagonal(1 - p, -2, -1).mean(-1), "whole diagonal"),
    (lambda w, p: reference(w[:1], p), "one example's score"),
    (lambda w, p: reference(w, p)[:-1], "one number per head"),
    (lambda w, p: reference(w, p) * 0.5, "should be"),
])
def test_wrong_answers_fail_with_what_is_wrong(wrong, message):
    with pytest.raises(AssertionError, match=message):
        ch18.check_induction_score(wrong)


def test_a_half_precision_answer_passes():
    def in_half(weights, period):
        return reference(weights.half(), period)

    assert ch18.check_induction_score(in_half).startswith("Correct")


def test_an_answer_that_changes_its_input_cannot_pass():
    def cheat(weights, period):  # zeroes what it was given, then returns zeros
        weights.zero_()
        return torch.zeros(weights.shape[1])

    with pytest.raises(AssertionError, match="should be"):
        ch18.check_induction_score(cheat)
