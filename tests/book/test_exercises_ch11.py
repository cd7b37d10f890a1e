"""Chapter 11's exercise check: the reference solution and other right answers pass; the slips
the review names (and a few more) fail, each with a message that says what is wrong."""
import pytest
import torch

from transformer_lib.book.exercises import ch11


def closed_form(logits, target, eps, pad_id):
    """A right answer: -(1 - eps) log p_y - eps / V' * sum over the tokens other than <pad>."""
    log_p = torch.log_softmax(logits, dim=-1)
    real = target != pad_id
    others = log_p.sum(-1) - log_p[:, pad_id]
    per = -(1 - eps) * log_p.gather(1, target[:, None])[:, 0] - eps / (logits.shape[-1] - 1) * others
    return per[real].mean()


def in_float32_as_a_float(logits, target, eps, pad_id):
    """A right answer: the reference in float32, returned as a Python float."""
    return ch11.smoothed_loss(logits.float(), target, eps, pad_id).item()


def _q(logits, target, eps, pad_id, share, keep):
    q = torch.full_like(logits, share)
    q[:, pad_id] = 0.0
    q[torch.arange(len(target)), target] = keep
    return q


def spread_over_all_v(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = torch.full_like(logits, eps / V)
    q[torch.arange(len(target)), target] += 1 - eps
    return -(q * logits.log_softmax(-1)).sum(-1)[target != pad_id].mean()


def keeps_padding_rows(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 1), 1 - eps + eps / (V - 1))
    return -(q * logits.log_softmax(-1)).sum(-1).mean()


def softmax_then_log(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 1), 1 - eps + eps / (V - 1))
    return -(q * logits.softmax(-1).log()).sum(-1)[target != pad_id].mean()


def kl_form(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 1), 1 - eps + eps / (V - 1))
    kl = torch.nn.functional.kl_div(logits.log_softmax(-1), q, reduction="none").sum(-1)
    return kl[target != pad_id].mean()


def exactly_point_nine(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 2), 1 - eps)
    return -(q * logits.log_softmax(-1)).sum(-1)[target != pad_id].mean()


def sums(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 1), 1 - eps + eps / (V - 1))
    return -(q * logits.log_softmax(-1)).sum(-1)[target != pad_id].sum()


def hard_coded_eps(logits, target, eps, pad_id):
    return ch11.smoothed_loss(logits, target, 0.1, pad_id)


def per_position(logits, target, eps, pad_id):
    V = logits.shape[-1]
    q = _q(logits, target, eps, pad_id, eps / (V - 1), 1 - eps + eps / (V - 1))
    return -(q * logits.log_softmax(-1)).sum(-1)


def padding_fixed_at_zero(logits, target, eps, pad_id):
    """A slip: the reference with the padding id hard-coded as 0, whatever pad_id says."""
    return ch11.smoothed_loss(logits, target, eps, 0)


def unsmoothed(logits, target, eps, pad_id):
    return torch.nn.functional.cross_entropy(logits, target, ignore_index=pad_id)


@pytest.mark.parametrize("fn", [ch11.smoothed_loss, closed_form, in_float32_as_a_float])
def test_right_answers_pass(fn):
    assert ch11.check_smoothed_loss(fn).startswith("Correct")


@pytest.mark.parametrize("fn, message", [
    (spread_over_all_v, "<pad> is never a target"),
    (keeps_padding_rows, "must not count"),
    (softmax_then_log, "log_softmax"),
    (kl_form, "KL divergence"),
    (exactly_point_nine, "not exactly 1 - eps"),
    (sums, "you summed it"),
    (hard_coded_eps, "eps = 0.2"),
    (per_position, "return one number"),
    (unsmoothed, "plain cross-entropy"),
    (padding_fixed_at_zero, "use the pad_id argument"),
])
def test_slips_fail_with_a_message_that_says_what_is_wrong(fn, message):
    with pytest.raises(AssertionError, match=message):
        ch11.check_smoothed_loss(fn)


def test_a_missing_answer_is_not_a_pass():
    def not_done(*args):
        raise NotImplementedError
    with pytest.raises(NotImplementedError):
        ch11.check_smoothed_loss(not_done)
