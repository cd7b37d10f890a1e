"""Chapter 17's exercise checks: the shard weights (exercise 1) and the ring all-reduce
simulated in one process (exercise 2). The solutions and other right answers pass; plausible
wrong answers, among them every one the review names, fail with a message that says what is
wrong."""
from decimal import Decimal
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
    lambda n, N, P: np.array(P * n / N),                           # a 0-d NumPy array
    lambda n, N, P: Decimal(P * n) / Decimal(N),                   # a Decimal
    lambda n, N, P: torch.tensor([P * n / N]),                     # a one-element tensor
])
def test_other_right_shard_factors_pass(right):
    assert ch17.check_shard_loss_scale(right).startswith("Correct")


@pytest.mark.parametrize("wrong, says", [
    (lambda n, N, P: n / N, "P times too small"),
    (lambda n, N, P: 1, "only when every shard"),
    (lambda n, N, P: P * n // N, "share of the tokens"),     # integer division
    (lambda n, N, P: N / (P * n), "share of the tokens"),     # upside down
    (lambda n, N, P: round(P * n / N, 2), "share of the tokens"),
    (lambda n, N, P: 1 / P, "share of the tokens"),                  # the reader's probes
    (lambda n, N, P: (P * n / N) ** 2, "share of the tokens"),
    (lambda n, N, P: P * n / (N - 1), "share of the tokens"),
    (lambda n, N, P: round(P * n / N), "share of the tokens"),
])
def test_wrong_shard_factors_fail_and_say_why(wrong, says):
    with pytest.raises(AssertionError, match=says):
        ch17.check_shard_loss_scale(wrong)


def test_a_shard_factor_that_is_not_a_number_is_named():
    with pytest.raises(AssertionError, match="should be a number"):
        ch17.check_shard_loss_scale(lambda n, N, P: "1")


# --- exercise 2: a ring all-reduce in one process ----------------------------------------


def test_the_ring_solution_passes():
    verdict = ch17.check_ring_all_reduce(ch17.ring_all_reduce_solution)
    assert verdict.startswith("Correct") and "(32 for P = 5, n = 20)" in verdict


def ring_with_lists(tensors, send):
    """Another right answer: Python lists of chunks, chunks float32, each message sent and
    delivered at once (the standard ring never forwards a chunk in the step it arrives)."""
    P = len(tensors)
    held = [[c.float().tolist() for c in t.chunk(P)] for t in tensors]
    for phase in ("reduce", "gather"):
        for step in range(P - 1):
            for r in range(P):
                c = (r - step) % P if phase == "reduce" else (r + 1 - step) % P
                values = send(r, (r + 1) % P, list(held[r][c]))
                dst = (r + 1) % P
                held[dst][c] = ([a + b for a, b in zip(held[dst][c], values)]
                                if phase == "reduce" else values)
    return [torch.tensor(sum(h, [])) for h in held]


def ring_the_other_way(tensors, send):
    """Another right answer: the ring runs from r to r - 1, results returned stacked."""
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]
    for phase in range(2):
        for step in range(P - 1):
            moves = [(r, (r + step - (1 if phase else 0)) % P) for r in range(P)]
            got = [send(r, (r - 1) % P, chunks[r][c]) for r, c in moves]
            for (r, c), values in zip(moves, got):
                if phase:
                    chunks[(r - 1) % P][c] = values
                else:
                    chunks[(r - 1) % P][c] = chunks[(r - 1) % P][c] + values
    return torch.stack([torch.cat(c) for c in chunks])


def results_as_a_tuple_of_lists(tensors, send):
    """Another right answer (the second reader's): a tuple of lists, which for P = 2 is a pair."""
    return tuple(t.tolist() for t in ch17.ring_all_reduce_solution(tensors, send))


@pytest.mark.parametrize("right", [ring_with_lists, ring_the_other_way, results_as_a_tuple_of_lists])
def test_other_right_rings_pass(right):
    assert ch17.check_ring_all_reduce(right).startswith("Correct")


def everyone_sends_everything(tensors, send):
    P = len(tensors)
    got = [[send(r, d, tensors[r]) for r in range(P) if r != d] for d in range(P)]
    return [tensors[d] + sum(g) for d, g in enumerate(got)]


def whole_tensor_around_the_ring(tensors, send):
    P = len(tensors)
    running = [t.clone() for t in tensors]
    for step in range(P - 1):
        got = [send(r, (r + 1) % P, tensors[(r - step) % P]) for r in range(P)]
        for r in range(P):
            running[(r + 1) % P] += got[r]
    return running


def no_messages(tensors, send):
    """The reader's probe: no ring at all."""
    return [sum(tensors) for _ in tensors]


def messages_for_show(tensors, send):
    """Sends the right number of chunks to the right neighbours, then adds up the inputs
    itself: the messages carry only each process's own chunk."""
    P = len(tensors)
    for _ in range(2 * (P - 1)):
        for r in range(P):
            send(r, (r + 1) % P, tensors[r].chunk(P)[0])
    return [sum(tensors) for _ in tensors]


def forwards_at_once(tensors, send):
    """Delivers each chunk and forwards it in the same step (a 'ring' that takes P - 1
    messages in one round): messages carry what the sender has not yet received."""
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]
    for c in range(P):
        for hop in range(P - 1):               # chunk c travels from c to c - 1 in one round
            r = (c + hop) % P
            chunks[(r + 1) % P][c] = chunks[(r + 1) % P][c] + send(r, (r + 1) % P,
                                                                  chunks[r][c])
    for c in range(P):
        owner = (c - 1) % P
        for hop in range(P - 1):
            r = (owner + hop) % P
            chunks[(r + 1) % P][c] = send(r, (r + 1) % P, chunks[r][c])
    return [torch.cat(c) for c in chunks]


def skips_a_neighbour(tensors, send):
    P = len(tensors)
    for r in range(P):
        send(r, (r + 2) % P, tensors[r].chunk(P)[0])
    return ch17.ring_all_reduce_solution(tensors, send)


def reduce_scatter_only(tensors, send):
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]
    for step in range(P - 1):
        moves = [(r, (r - step) % P) for r in range(P)]
        got = [send(r, (r + 1) % P, chunks[r][c]) for r, c in moves]
        for (r, c), values in zip(moves, got):
            chunks[(r + 1) % P][c] += values
    return [torch.cat(c) for c in chunks]


def one_extra_chunk(tensors, send):
    """The reader's probe: the right ring, and one more chunk sent by every process."""
    results = ch17.ring_all_reduce_solution(tensors, send)
    P = len(tensors)
    for r in range(P):
        send(r, (r + 1) % P, results[r].chunk(P)[0])
    return results


def mean_not_sum(tensors, send):
    return [r / len(tensors) for r in ch17.ring_all_reduce_solution(tensors, send)]


def in_place(tensors, send):
    results = ch17.ring_all_reduce_solution(tensors, send)
    for t, r in zip(tensors, results):
        t.copy_(r)
    return results


def right_messages_results_from_the_inputs(tensors, send):
    """The second reader's probe: the ring's messages, but results read from the inputs."""
    ch17.ring_all_reduce_solution(tensors, send)
    return [sum(tensors) for _ in tensors]


def gather_from_memory(tensors, send):
    """The third reader's probe: a right reduce-scatter, then an all-gather that sends but copies
    the sender's numbers instead of what send handed back."""
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]
    for step in range(P - 1):
        moves = [(r, (r - step) % P) for r in range(P)]
        got = [send(r, (r + 1) % P, chunks[r][c]) for r, c in moves]
        for (r, c), values in zip(moves, got):
            chunks[(r + 1) % P][c] = chunks[(r + 1) % P][c] + values
    for step in range(P - 1):
        moves = [(r, (r + 1 - step) % P) for r in range(P)]
        for r, c in moves:
            send(r, (r + 1) % P, chunks[r][c])
        for r, c in moves:
            chunks[(r + 1) % P][c] = chunks[r][c].clone()
    return [torch.cat(c) for c in chunks]


def everyone_reports_process_0(tensors, send):
    """The third reader's probe: the whole ring, then process 0's result for everyone."""
    results = ch17.ring_all_reduce_solution(tensors, send)
    return [results[0].clone() for _ in results]


def results_and_counts(tensors, send):
    """The exercise's old form: (results, sent)."""
    P, n = len(tensors), tensors[0].numel()
    return ch17.ring_all_reduce_solution(tensors, send), [2 * (P - 1) * n // P] * P


@pytest.mark.parametrize("wrong, says", [
    (everyone_sends_everything, "the whole tensor"),
    (whole_tensor_around_the_ring, "the whole tensor"),
    (no_messages, "never reached it through send"),
    (messages_for_show, "never reached it through send"),
    (forwards_at_once, "had not received by then"),
    (skips_a_neighbour, "skips the ring"),
    (reduce_scatter_only, "all-gather must hand every finished chunk"),
    (one_extra_chunk, "needs 2 \\(P - 1\\)"),
    (mean_not_sum, "the mean, not the sum"),
    (in_place, "changed the tensors it was given"),
    (results_and_counts, "return the results only"),
    (right_messages_results_from_the_inputs, "does not come from the messages"),
    (gather_from_memory, "the same numbers even when every message is changed"),
    (everyone_reports_process_0, "the same numbers even when every message is changed"),
    (lambda tensors, send: 3.0, "a list of P results"),
])
def test_wrong_rings_fail_and_say_why(wrong, says):
    with pytest.raises(AssertionError, match=says):
        ch17.check_ring_all_reduce(wrong)


def test_send_refuses_what_is_not_a_process_or_a_chunk():
    with pytest.raises(AssertionError, match="dst should be a process number from 0 to 1"):
        ch17.check_ring_all_reduce(lambda tensors, send: send(0, 2, tensors[0][:3]))
    with pytest.raises(AssertionError, match="chunk should be numbers"):
        ch17.check_ring_all_reduce(lambda tensors, send: send(0, 1, "abc"))


def test_the_checks_refuse_what_is_not_a_function():
    with pytest.raises(TypeError, match="must be a function"):
        ch17.check_ring_all_reduce([1, 2])
    with pytest.raises(TypeError, match="must be a function"):
        ch17.check_shard_loss_scale(2.0)
