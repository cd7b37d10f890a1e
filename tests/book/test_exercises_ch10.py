"""Chapter 10's exercise check: the reference solution passes, the usual slips fail with a message
that says what is wrong, and other right answers pass (among them chapter 11's way of building
the batch, which keeps a short target's <eos> in tgt_in)."""
import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import vocab
from transformer_lib.book.exercises import ch10


def library_batch(pairs, src_vocab, tgt_vocab):
    """A right answer: collate, then the shift of training.Batch (its tgt_in keeps <eos>)."""
    src, tgt = vocab.collate(pairs, src_vocab, tgt_vocab)
    return src, tgt[:, :-1], tgt[:, 1:]


def log_softmax_loss(model, src, tgt_in, tgt_out):
    """A right answer from log_softmax and gather."""
    logp = model(src, tgt_in).log_softmax(-1)
    real = tgt_out != vocab.PAD_ID
    return -logp.gather(-1, tgt_out[..., None])[..., 0][real].mean()


def loss_with_padding(model, src, tgt_in, tgt_out):
    return F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())


def per_sentence_mean(model, src, tgt_in, tgt_out):
    per_token = F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, reduction="none")
    real = tgt_out != vocab.PAD_ID
    return ((per_token * real).sum(1) / real.sum(1)).mean()


def smoothed(model, src, tgt_in, tgt_out):
    return tl.LabelSmoothingLoss(0.1, vocab.PAD_ID)(model(src, tgt_in), tgt_out)


def out_starts_with_bos(pairs, src_vocab, tgt_vocab):
    src, tgt_in, _ = ch10.teacher_forcing_batch(pairs, src_vocab, tgt_vocab)
    return src, tgt_in, tgt_in.clone()


def no_shift(pairs, src_vocab, tgt_vocab):
    src, _, tgt_out = ch10.teacher_forcing_batch(pairs, src_vocab, tgt_vocab)
    return src, tgt_out.clone(), tgt_out


def no_eos(pairs, src_vocab, tgt_vocab):
    src, tgt_in, tgt_out = ch10.teacher_forcing_batch(pairs, src_vocab, tgt_vocab)
    return src, tgt_in[:, :-1], tgt_out[:, :-1]


def src_with_bos(pairs, src_vocab, tgt_vocab):
    src, tgt_in, tgt_out = ch10.teacher_forcing_batch(pairs, src_vocab, tgt_vocab)
    return torch.cat([torch.ones_like(src[:, :1]), src[:, :-1]], 1), tgt_in, tgt_out


@pytest.mark.parametrize("batch_fn, loss_fn", [
    (ch10.teacher_forcing_batch, ch10.next_token_loss),
    (library_batch, log_softmax_loss),
])
def test_right_answers_pass(batch_fn, loss_fn):
    verdict = ch10.check_batch(batch_fn, loss_fn)
    assert verdict.startswith("Correct") and "ln V = 2.708" in verdict


@pytest.mark.parametrize("batch_fn, loss_fn, message", [
    (ch10.teacher_forcing_batch, loss_with_padding, "includes the padding positions"),
    (ch10.teacher_forcing_batch, per_sentence_mean, "mean of per-sentence means"),
    (ch10.teacher_forcing_batch, smoothed, "label-smoothed"),
    (out_starts_with_bos, ch10.next_token_loss, "tgt_out starts with <bos>"),
    (no_shift, ch10.next_token_loss, "tgt_in equals tgt_out"),
    (no_eos, ch10.next_token_loss, "forget <eos> or <bos>"),
    (src_with_bos, ch10.next_token_loss, "one id per character"),
])
def test_slips_fail_with_their_message(batch_fn, loss_fn, message):
    with pytest.raises(AssertionError, match=message):
        ch10.check_batch(batch_fn, loss_fn)
