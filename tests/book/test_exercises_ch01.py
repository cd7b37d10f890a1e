"""Chapter 1's exercise check (transformer_lib/book/exercises/ch01.py): the decoder step.

The reference solution and another right answer pass; the slips a reader makes fail, each with
a message that says what is wrong (among them the two the chapter's review tried: the old state
in the output layer, and the GRU input in the order [c ; e])."""
import pytest
import torch

from transformer_lib.book.exercises import ch01


def gru_step(x, h, W_ih, W_hh, b_ih, b_hh):  # the chapter's from-scratch GRU step
    r_i, z_i, n_i = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    n = torch.tanh(n_i + r * n_h)
    return (1 - z) * n + z * h


def weights(decoder):
    gru = decoder.rnn
    return gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0


def solution(decoder, y_prev, state, summary):
    emb = decoder.embedding(y_prev)
    state = gru_step(torch.cat([emb, summary], dim=-1), state, *weights(decoder))
    return decoder.out(torch.cat([state, summary, emb], dim=-1)), state


def fused_gru_as_a_list(decoder, y_prev, state, summary):  # right: PyTorch's GRU, a list
    emb = decoder.embedding(y_prev)
    x = torch.cat([emb, summary], dim=-1).unsqueeze(1)
    state = decoder.rnn(x, state.unsqueeze(0))[1].squeeze(0)
    return [decoder.out(torch.cat([state, summary, emb], dim=-1)), state]


def summary_first(decoder, y_prev, state, summary):
    emb = decoder.embedding(y_prev)
    new = decoder.rnn(torch.cat([summary, emb], -1).unsqueeze(1), state.unsqueeze(0))[1].squeeze(0)
    return decoder.out(torch.cat([new, summary, emb], dim=-1)), new


def old_state_in_output(decoder, y_prev, state, summary):
    emb = decoder.embedding(y_prev)
    new = gru_step(torch.cat([emb, summary], dim=-1), state, *weights(decoder))
    return decoder.out(torch.cat([state, summary, emb], dim=-1)), new


def output_order_swapped(decoder, y_prev, state, summary):
    emb = decoder.embedding(y_prev)
    new = gru_step(torch.cat([emb, summary], dim=-1), state, *weights(decoder))
    return decoder.out(torch.cat([new, emb, summary], dim=-1)), new


def pair_reversed(decoder, y_prev, state, summary):
    logits, new = solution(decoder, y_prev, state, summary)
    return new, logits


def state_not_updated(decoder, y_prev, state, summary):
    emb = decoder.embedding(y_prev)
    return decoder.out(torch.cat([state, summary, emb], dim=-1)), state


def logits_only(decoder, y_prev, state, summary):
    return solution(decoder, y_prev, state, summary)[0]


@pytest.mark.parametrize("answer", [solution, fused_gru_as_a_list])
def test_right_answers_pass(answer):
    verdict = ch01.check_decoder_step(answer)
    assert verdict.startswith("Correct") and "\n" not in verdict and len(verdict) <= 88


@pytest.mark.parametrize("answer, message", [
    (summary_first, r"\[c ; e\(y_prev\)\]; it should read \[e\(y_prev\) ; c\]"),
    (old_state_in_output, "the output layer read the old state"),
    (output_order_swapped, r"the order is \[s_t ; c ; e\(y_prev\)\]"),
    (pair_reversed, r"you returned \(new state, logits\)"),
    (state_not_updated, "old state s_\\(t-1\\) unchanged"),
    (logits_only, "return a pair"),
])
def test_wrong_answers_fail_and_say_why(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch01.check_decoder_step(answer)


def test_an_unanswered_exercise_reaches_the_notebook_as_not_implemented():
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        ch01.check_decoder_step(stub)
