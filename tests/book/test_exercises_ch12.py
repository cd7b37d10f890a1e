"""Chapter 12's exercise checks: the reference solutions and other right answers pass; the slips
the review names (a decoder that writes <bos> or <pad>, an off-by-one length) and others fail,
each with a message that says what is wrong."""
import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.book.exercises import ch12
from transformer_lib.vocab import BOS_ID, EOS_ID, PAD_ID


def decoder(mistake=None):
    """Greedy decoding written out, with one slip (or none)."""
    @torch.no_grad()
    def fn(model, src, max_len):
        src_mask = tl.padding_mask(src, PAD_ID)
        memory = model.encode(src, src_mask)
        ys = torch.full((src.shape[0], 1), BOS_ID)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(ys, memory, src_mask)[:, -1].clone()
            if mistake != "never blocks <bos> and <pad>":
                logits[:, [BOS_ID, PAD_ID]] = -math.inf
            nxt = logits.argmax(-1)
            if mistake != "no padding after <eos>":
                nxt = nxt.masked_fill(done, PAD_ID)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == EOS_ID
            if done.all() and mistake != "always runs max_len steps":
                break
        return ys if mistake == "keeps <bos>" else ys[:, 1:]
    return fn


def one_row_at_a_time(model, src, max_len):
    """A right answer: rows decoded one by one with the library, then padded to one length."""
    rows = [tl.greedy_decode(model, src[i : i + 1], max_len=max_len).tokens[0] for i in range(len(src))]
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def blocks_only_bos(model, src, max_len):
    """Blocks <bos> but lets <pad> be written."""
    src_mask = tl.padding_mask(src, PAD_ID)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), BOS_ID)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1].clone()
        logits[:, BOS_ID] = -math.inf
        nxt = logits.argmax(-1).masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == EOS_ID
        if done.all():
            break
    return ys[:, 1:]


@torch.no_grad()
def through_forward(model, src, max_len):
    """A right answer that calls the whole model, model(src, ys), at every step (as chapter 12's
    cells do) instead of encode and decode."""
    ys = torch.full((src.shape[0], 1), BOS_ID)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        logits = model(src, ys)[:, -1].clone()
        logits[:, [BOS_ID, PAD_ID]] = -math.inf
        nxt = logits.argmax(-1).masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == EOS_ID
        if done.all():
            break
    return ys[:, 1:]


@pytest.mark.parametrize("fn", [ch12.greedy_decode, decoder(), one_row_at_a_time, through_forward])
def test_right_greedy_answers_pass(fn):
    assert ch12.check_greedy(fn).startswith("Correct")


@pytest.mark.parametrize("fn, message", [
    (decoder("never blocks <bos> and <pad>"), "never written"),
    (blocks_only_bos, "writes <pad> before a row's <eos>"),
    (decoder("no padding after <eos>"), "should hold <pad>"),
    (decoder("always runs max_len steps"), "should stop when every row"),
    (decoder("keeps <bos>"), "should not start with <bos>"),
    (lambda model, src, max_len: [[5, 6]], "return a \\(B, L\\) tensor"),
])
def test_greedy_slips_fail_with_a_message(fn, message):
    with pytest.raises(AssertionError, match=message):
        ch12.check_greedy(fn)


def test_the_scripted_model_sets_the_traps_and_the_library_agrees_with_the_reference():
    model, src = ch12.ScriptedModel(), torch.arange(4, 16).reshape(12, 1)
    out = ch12.greedy_decode(model, src, 12)
    assert out.shape == (12, 8)  # every row ends by step 8, so decoding stops there
    assert ((out == EOS_ID).sum(1) == 1).all() and not (out == BOS_ID).any()
    # the library's greedy decoding (the date models' path) agrees with the reference
    trained, _, _, _ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    dates = tl.vocab.collate(tl.data.make_date_splits(seed=0).test[:32], *tl.data.date_vocabs())[0]
    for max_len in (12, 5):
        assert torch.equal(ch12.greedy_decode(trained, dates, max_len),
                           tl.greedy_decode(trained, dates, max_len).tokens)


def with_library(log_prob, length):
    """A right answer, through the library's lp."""
    return log_prob / tl.decoding.length_penalty(length, 0.6)


def as_tensor(log_prob, length):
    """A right answer computed in torch."""
    return torch.tensor(log_prob, dtype=torch.float64) / torch.tensor((5 + length) / 6.0) ** 0.6


@pytest.mark.parametrize("fn", [ch12.penalised, with_library, as_tensor])
def test_right_penalised_answers_pass(fn):
    assert ch12.check_penalised(fn).startswith("Correct")


@pytest.mark.parametrize("fn, message", [
    (lambda lp, n: lp / ((5 + n + 1) / 6) ** 0.6, "one token too many"),
    (lambda lp, n: lp * ((5 + n) / 6) ** 0.6, "you multiplied"),
    (lambda lp, n: lp, "the log-probability itself"),
    (lambda lp, n: lp / n**0.6, "not \\|Y\\|\\^alpha"),
    (lambda lp, n: lp / ((5 + n) / 6), "power alpha"),
    (lambda lp, n: lp / ((5 + n) / 6) ** 0.5, "your score is"),
])
def test_penalised_slips_fail_with_a_message(fn, message):
    with pytest.raises(AssertionError, match=message):
        ch12.check_penalised(fn)
