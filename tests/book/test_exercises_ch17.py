"""Chapter 17's exercise checks: the shard weights (exercise 1) and the ring all-reduce
simulated in one process (exercise 2). The solutions and other right answers pass; plausible
wrong answers, among them every one the review names, fail with a message that says what is
wrong."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from transformer_lib.book.exercises import ch17

# --- exercise 1: weigh the shards --------------------------------------------------------


def test_the_shard_solution_passes():
    assert ch17.check_shard_loss_scale(ch17.shard_loss_scale_solution).startswith("Correct")


@pytest.mark.parametrize("right", [
    lambda n, N, P: P * n / N,
    lambda n, N, P: torch.tensor(P * n / N, dtype=torch.float32),  # float32, a tensor
    lambda n, N, P: n / (N / P),                                   # the same, another way
    lambda n, N, P: np.float32(P * n / N),                         # a NumPy float32
    lambda n, N, P: Fraction(P * n, N),                            # an exact fraction
])
def test_other_right_shard_factors_pass(right):
    assert ch17.check_shard_loss_scale(right).startswith("Correct")


@pytest.mark.parametrize("wrong, says", [
    (lambda n, N, P: n / N, "P times too small"),
    (lambda n, N, P: 1, "only when every shard"),
    (lambda n, N, P: P * n // N, "share of the tokens"),     # integer division
    (lambda n, N, P: N / (P * n), "share of the tokens"),     # upside down
    (lambda n, N, P: round(P * n / N, 2), "share of the tokens"),
])
def test_wrong_shard_factors_fail_and_say_why(wrong, says):
    with pytest.raises(AssertionError, match=says):
        ch17.check_shard_loss_scale(wrong)


def test_a_shard_factor_that_is_not_a_number_is_named():
    with pytest.raises(AssertionError, match="should be a number"):
        ch17.check_shard_loss_scale(lambda n, N, P: "1")


# --- exercise 2: a ring all-reduce in one process ----------------------------------------


def test_the_ring_solution_passes():
    assert ch17.check_ring_all_reduce(ch17.ring_all_reduce_solution).startswith("Correct")


def ring_with_lists(tensors):
    """Another right answer: Python lists of chunks, chunks float32, messages gathered as
    (destination, chunk, values) and counted when they arrive."""
    P = len(tensors)
    held = [[c.float().tolist() for c in t.chunk(P)] for t in tensors]
    sent = [0] * P
    for phase in ("reduce", "gather"):
        for step in range(P - 1):
            moves = []
            for r in range(P):
                c = (r - step) % P if phase == "reduce" else (r + 1 - step) % P
                moves.append(((r + 1) % P, c, list(held[r][c])))
                sent[r] += len(held[r][c])
            for dst, c, values in moves:
                held[dst][c] = ([a + b for a, b in zip(held[dst][c], values)]
                                if phase == "reduce" else values)
    return [torch.tensor(sum(h, [])) for h in held], sent


def test_another_right_ring_passes():
    assert ch17.check_ring_all_reduce(ring_with_lists).startswith("Correct")


def everyone_sends_everything(tensors):
    P = len(tensors)
    return [sum(tensors) for _ in range(P)], [(P - 1) * t.numel() for t in tensors]


def whole_tensor_around_the_ring(tensors):
    P = len(tensors)
    return [sum(tensors) for _ in range(P)], [2 * (P - 1) * t.numel() for t in tensors]


def reduce_scatter_only(tensors):
    P = len(tensors)
    total = sum(tensors).chunk(P)
    results = []
    for r in range(P):  # process r knows only chunk (r + 1) % P of the sum
        mine = [c.clone() if i == (r + 1) % P else tensors[r].chunk(P)[i].clone()
                for i, c in enumerate(total)]
        results.append(torch.cat(mine))
    return results, [(P - 1) * t.numel() // P for t in tensors]


def mean_not_sum(tensors):
    results, sent = ch17.ring_all_reduce_solution(tensors)
    return [r / len(tensors) for r in results], sent


def one_pass_counted(tensors):
    results, sent = ch17.ring_all_reduce_solution(tensors)
    return results, [s // 2 for s in sent]


def in_place(tensors):
    total = sum(t.clone() for t in tensors)
    for t in tensors:
        t.copy_(total)
    P = len(tensors)
    return [t.clone() for t in tensors], [2 * (P - 1) * t.numel() // P for t in tensors]


@pytest.mark.parametrize("wrong, says", [
    (everyone_sends_everything, "every process sending its whole tensor"),
    (whole_tensor_around_the_ring, "not the whole tensor"),
    (reduce_scatter_only, "all-gather must hand every finished chunk"),
    (mean_not_sum, "the mean, not the sum"),
    (one_pass_counted, "only one of the two passes"),
    (in_place, "changed the tensors it was given"),
    (lambda tensors: sum(tensors), "two things"),
])
def test_wrong_rings_fail_and_say_why(wrong, says):
    with pytest.raises(AssertionError, match=says):
        ch17.check_ring_all_reduce(wrong)


def test_the_checks_refuse_what_is_not_a_function():
    with pytest.raises(TypeError, match="must be a function"):
        ch17.check_ring_all_reduce([1, 2])
    with pytest.raises(TypeError, match="must be a function"):
        ch17.check_shard_loss_scale(2.0)
