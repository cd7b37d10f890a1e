"""Chapter 12's exercises: greedy decoding for a batch, and the length penalty's score.

`check_greedy(fn, models=())` runs the reader's `fn(model, src, max_len)` on a scripted
stand-in model whose favourite tokens are exactly the traps (<pad> at the first step, <bos> at
the second, and rows that end at different steps, or not at all within `max_len`), then on the
shipped date model (and on any other `(name, model)` pairs given, such as chapter 12's
under-trained one), and compares it token for token with the reference. `check_penalised(fn)`
compares the reader's `fn(log_prob, length)` with log P / lp(|Y|), alpha = 0.6, on a few
hypotheses, so an off-by-one in the length is caught directly. Each returns a one-line verdict
when the answer is right and raises an AssertionError saying what is wrong otherwise.
`greedy_decode` and `penalised` are the reference solutions.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.decoding import length_penalty
from transformer_lib.vocab import BOS_ID, EOS_ID, PAD_ID, collate

__all__ = ["ScriptedModel", "check_greedy", "check_penalised", "greedy_decode", "penalised"]

ALPHA = 0.6


@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    """The reference solution: src (B, S) ids -> (B, L) output ids, no <bos>, <pad> after each
    row's <eos>; L is the step at which the last row wrote <eos>, or max_len."""
    src_mask = tl.padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)  # once
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1].clone()  # (B, V): the next token
        logits[:, [bos_id, pad_id]] = -math.inf  # never written
        nxt = logits.argmax(-1).masked_fill(done, pad_id)  # finished rows: padding
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys[:, 1:]


def penalised(log_prob, length):
    """The reference solution: log P(Y) / lp(Y), lp = ((5 + |Y|) / 6)^0.6 (Wu et al. 2016)."""
    return log_prob / ((5 + length) / 6) ** ALPHA


class ScriptedModel(nn.Module):
    """A stand-in for a trained encoder-decoder whose next-token scores are scripted, so that
    a greedy decoder that skips a rule is caught on every run: at the first step <pad> scores
    highest and <bos> second, at the second step <bos> highest; a source that starts with id k writes
    <eos> at step 3 + k % 6 (so six sources in a row end at steps 3 to 8); at every other step,
    and after <eos>, a digit that depends on the source and the step wins (so a row left unpadded after <eos> shows
    digits). Vocabulary: the date model's 15 target tokens."""

    VOCAB = 15

    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # a parameter, so the model has a device

    def encode(self, src, src_mask=None, **kwargs):
        return src[..., None].float()  # (B, S, 1): the memory only carries the row's ids

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, **kwargs):
        """The whole model in one call, as `tl.Transformer` offers it: decode(tgt, encode(src))."""
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def decode(self, ys, memory, src_mask=None, **kwargs):
        B, t = ys.shape
        rows = torch.arange(B)
        key = memory[:, 0, 0].long()  # the row's first source id: what the script follows
        logits = torch.zeros(B, t, self.VOCAB)
        digit = 5 + (key + t) % 10  # ids 5..14 are the digits 0..9
        logits[rows, -1, digit] = 4.0
        if t == 1:
            logits[:, -1, PAD_ID], logits[:, -1, BOS_ID] = 9.0, 8.0
        elif t == 2:
            logits[:, -1, BOS_ID] = 9.0
        ends = 3 + key % 6
        logits[rows[ends == t], -1, EOS_ID] = 6.0
        return logits


@functools.lru_cache(maxsize=1)
def _dates():
    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    test = tl.data.make_date_splits(seed=0).test
    src, _ = collate(test[1000:1064], src_vocab, tgt_vocab)
    return model.eval(), src


def _compare(fn, name, model, src, max_len, expected):
    with torch.no_grad():
        got = fn(model, src.clone(), max_len)
    case = f"with the {name} and max_len={max_len}"
    assert isinstance(got, torch.Tensor) and got.dim() == 2, (
        f"Not yet: return a (B, L) tensor of ids, not {type(got).__name__}"
        + (f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""))
    assert got.shape[0] == src.shape[0], (
        f"Not yet: {case} return one row per source ({src.shape[0]}), not {got.shape[0]}")
    assert not (got[:, 0] == BOS_ID).all(), "Not yet: the output should not start with <bos>: drop the first column"
    if got.shape == expected.shape and torch.equal(got.cpu(), expected.cpu()):
        return
    written = set(got.unique().tolist())
    if BOS_ID in written:
        raise AssertionError(f"Not yet: {case} your output writes <bos>; <bos> and <pad> are never written: "
                             "set their scores to -inf before the argmax")
    n = min(got.shape[1], expected.shape[1])
    ended = (expected == EOS_ID).cumsum(1).roll(1, 1) > 0  # positions after a row's <eos>
    ended[:, 0] = False
    if n and ((got[:, :n] == PAD_ID) & ~ended[:, :n]).any():
        raise AssertionError(f"Not yet: {case} your output writes <pad> before a row's <eos>; <bos> and <pad> "
                             "are never written: set their scores to -inf before the argmax")
    if n and ((got[:, :n] != expected[:, :n]) & ended[:, :n]).any() and not (
            (got[:, :n] != expected[:, :n]) & ~ended[:, :n]).any():
        raise AssertionError(f"Not yet: {case} a row goes on after its <eos>; every position after a row's <eos> "
                             "should hold <pad>")
    if got.shape[1] > expected.shape[1]:
        raise AssertionError(f"Not yet: {case} the output has {got.shape[1]} columns, it should stop when every row "
                             f"has written <eos> ({expected.shape[1]} here) or after max_len tokens")
    if got.shape[1] < expected.shape[1]:
        raise AssertionError(f"Not yet: {case} the output has {got.shape[1]} columns, {expected.shape[1]} expected: "
                             "go on until every row has written <eos>, or for max_len tokens")
    row = int((got != expected).any(1).nonzero()[0])
    raise AssertionError(f"Not yet: {case} row {row} is {got[row].tolist()}, expected {expected[row].tolist()}")


def check_greedy(fn, models=()) -> str:
    """Check `fn(model, src, max_len)` against the reference on the scripted model (max_len 12,
    where every row ends by step 8, and 4, where none does), then against `tl.greedy_decode` on
    the shipped date model (64 test dates) and each `(name, model)` in `models`, with max_len 12
    and 6."""
    scripted, src_s = ScriptedModel(), torch.arange(4, 16).reshape(12, 1)
    for max_len in (12, 4):
        _compare(fn, "scripted model", scripted, src_s, max_len, greedy_decode(scripted, src_s, max_len))
    model, src = _dates()
    for name, m in [("trained date model", model), *models]:
        for max_len in (12, 6):
            expected = tl.greedy_decode(m, src, max_len=max_len).tokens
            _compare(fn, name, m, src, max_len, expected)
    return "Correct: your greedy decoding equals tl.greedy_decode, token for token."


def check_penalised(fn) -> str:
    """Check `fn(log_prob, length)` against log_prob / lp(length), alpha = 0.6."""
    for log_prob, length in [(-3.0, 11), (-1.0, 1), (-7.5, 6), (-0.25, 3)]:
        want = log_prob / length_penalty(length, ALPHA)
        got = fn(log_prob, length)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        assert isinstance(got, (int, float)) and not isinstance(got, bool), (
            f"Not yet: return the score as a number, not {type(got).__name__}")
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        slips = {
            "you counted one token too many (is <bos> in your length?): |Y| counts the tokens after <bos>, "
            "<eos> included, which is `length` as given": log_prob / length_penalty(length + 1, ALPHA),
            "you counted one token too few: |Y| is `length` as given, <eos> included":
                log_prob / length_penalty(length - 1, ALPHA) if length > 1 else math.nan,
            "divide the log-probability by lp(Y); you multiplied": log_prob * length_penalty(length, ALPHA),
            "that is the log-probability itself: divide it by lp(Y) = ((5 + |Y|) / 6)^0.6": log_prob,
            "lp(Y) is raised to the power alpha = 0.6": log_prob / length_penalty(length, 1.0),
            "lp(Y) is ((5 + |Y|) / 6)^alpha, not |Y|^alpha": log_prob / length**ALPHA,
        }
        for hint, value in slips.items():
            if math.isclose(got, value, rel_tol=1e-6):
                raise AssertionError(f"Not yet: for log P = {log_prob}, |Y| = {length}: {hint}")
        raise AssertionError(f"Not yet: for log P = {log_prob}, |Y| = {length} your score is {got:.5f}, "
                             f"log P / lp(|Y|) = {want:.5f}")
    return "Correct: your score is log P(Y) / ((5 + |Y|) / 6)^0.6."
