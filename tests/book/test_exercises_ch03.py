"""Chapter 3's exercise checks (transformer_lib/book/exercises/ch03.py).

Exercise 1, self-attention over a padded batch: the reference and other right answers pass
(float32, a loop over the sentences); the slips fail with a message that says what is wrong
(the review's: the unmasked copy of the chapter's function, the softmax over axis -2, the
scores divided by sqrt(d) or by d, `X.T` on a batch). Exercise 2, a first word that prefers the
second: the solution and other right answers pass (a list, float32); equal, orthogonal and
opposite vectors, three words, and the review's infinite and NaN inputs fail."""
import math

import pytest
import torch

from transformer_lib.book.exercises import ch03


def solution(X, lengths):
    real = torch.arange(X.shape[1]) < lengths[:, None]             # (B, T)
    scores = (X @ X.transpose(-2, -1)).masked_fill(~real[:, None, :], float("-inf"))
    Y = scores.softmax(dim=-1) @ X                                 # (B, T, d)
    return Y.masked_fill(~real[:, :, None], 0.0)


def in_float32(X, lengths):
    return solution(X.float(), lengths)


def loop_over_sentences(X, lengths):
    Y = torch.zeros_like(X)
    for b, n in enumerate(lengths.tolist()):
        x = X[b, :n]
        Y[b, :n] = (x @ x.T).softmax(dim=-1) @ x
    return Y


def unmasked(X, lengths):  # the chapter's own function, copied
    return (X @ X.transpose(-2, -1)).softmax(dim=-1) @ X


def padded_rows_kept(X, lengths):
    real = torch.arange(X.shape[1]) < lengths[:, None]
    scores = (X @ X.transpose(-2, -1)).masked_fill(~real[:, None, :], float("-inf"))
    return scores.softmax(dim=-1) @ X


def softmax_over_queries(X, lengths):
    real = torch.arange(X.shape[1]) < lengths[:, None]
    scores = (X @ X.transpose(-2, -1)).masked_fill(~real[:, None, :], float("-inf"))
    return (scores.softmax(dim=-2).nan_to_num(0.0) @ X).masked_fill(~real[:, :, None], 0.0)


def scaled_by(scale):
    def answer(X, lengths):
        real = torch.arange(X.shape[1]) < lengths[:, None]
        d = X.shape[-1]
        scores = (X @ X.transpose(-2, -1)) / scale(d)
        scores = scores.masked_fill(~real[:, None, :], float("-inf"))
        return (scores.softmax(dim=-1) @ X).masked_fill(~real[:, :, None], 0.0)
    return answer


def masked_with_zero(X, lengths):  # a score of 0, not -inf, still gets weight
    real = torch.arange(X.shape[1]) < lengths[:, None]
    scores = (X @ X.transpose(-2, -1)).masked_fill(~real[:, None, :], 0.0)
    return (scores.softmax(dim=-1) @ X).masked_fill(~real[:, :, None], 0.0)


def whole_matrix_transposed(X, lengths):
    return (X @ X.T).softmax(dim=-1) @ X


def returns_the_weights_too(X, lengths):
    return solution(X, lengths), None


@pytest.mark.parametrize("answer", [solution, in_float32, loop_over_sentences])
def test_padded_self_attention_right_answers_pass(answer):
    verdict = ch03.check_padded_self_attention(answer)
    assert verdict.startswith("Correct") and "\n" not in verdict and len(verdict) <= 88


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("answer, message", [
    (unmasked, "also attend to the padding"),
    (padded_rows_kept, "rows of the padded positions must be zero"),
    (softmax_over_queries, "down the columns"),
    (scaled_by(math.sqrt), r"divided the scores by sqrt\(d\)"),
    (scaled_by(lambda d: d), "divided the scores by d;"),
    (masked_with_zero, r"differ from softmax\(X X\^T\) X"),
    (whole_matrix_transposed, "your function raised"),
    (returns_the_weights_too, "return a tensor"),
])
def test_padded_self_attention_wrong_answers_fail_and_say_why(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch03.check_padded_self_attention(answer)


def test_the_reference_is_the_chapters_operation_per_sentence():
    X = torch.randn(2, 4, 3, dtype=torch.float64)
    Y = ch03.padded_self_attention(X, torch.tensor([4, 2]))
    for b, n in enumerate((4, 2)):
        x = X[b, :n]
        torch.testing.assert_close(Y[b, :n], (x @ x.T).softmax(-1) @ x)
    assert torch.equal(Y[1, 2:], torch.zeros(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("answer", [
    lambda: torch.tensor([[1.0, 0.0], [2.0, 0.0]]),        # the solution
    lambda: [[1, 1, 0], [2, 1, 0]],                         # a list of ints
    lambda: torch.tensor([[0.5], [3.0]], dtype=torch.float32),
])
def test_not_self_first_right_answers_pass(answer):
    verdict = ch03.check_not_self_first(answer)
    assert verdict.startswith("Correct") and "\n" not in verdict and len(verdict) <= 88


@pytest.mark.parametrize("answer, message", [
    (lambda: [[1.0, 0.0], [1.0, 0.0]], "as much"),                   # equal vectors
    (lambda: [[1.0, 0.0], [0.0, 1.0]], "less"),                      # orthogonal
    (lambda: [[1.0, 0.0], [-2.0, 0.0]], "less"),                     # opposite
    (lambda: [[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], r"shape \(2, d\)"),
    (lambda: [1.0, 2.0], r"shape \(2, d\)"),
    (lambda: [[1.0, 0.0], [float("inf"), 0.0]], "finite"),
    (lambda: [[1.0, 0.0], [float("nan"), 0.0]], "finite"),
    (lambda: [[1.0, 0.0], [2.0]], "return a tensor"),
])
def test_not_self_first_wrong_answers_fail_and_say_why(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch03.check_not_self_first(answer)


def test_an_unanswered_exercise_reaches_the_notebook_as_not_implemented():
    def stub(*args):
        raise NotImplementedError("replace this line with your answer")

    for check in (ch03.check_padded_self_attention, ch03.check_not_self_first):
        with pytest.raises(NotImplementedError):
            check(stub)
