"""Chapter 10's exercise: the teacher-forced batch the model trains on, and its loss.

The check returns a one-line verdict when the answer is right and raises an AssertionError
saying what is wrong otherwise. The reference solutions are `teacher_forcing_batch` and
`next_token_loss`.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import data, vocab

__all__ = ["check_batch", "teacher_forcing_batch", "next_token_loss"]


def _pad(rows):
    out = torch.full((len(rows), max(map(len, rows))), vocab.PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def teacher_forcing_batch(pairs, src_vocab, tgt_vocab):
    """The reference solution: src (B, S), tgt_in (B, T), tgt_out (B, T), right-padded."""
    src = _pad([src_vocab.encode(s) for s, _ in pairs])
    tgt_in = _pad([[vocab.BOS_ID] + tgt_vocab.encode(t) for _, t in pairs])
    tgt_out = _pad([tgt_vocab.encode(t) + [vocab.EOS_ID] for _, t in pairs])
    return src, tgt_in, tgt_out


def next_token_loss(model, src, tgt_in, tgt_out):
    """The reference solution: mean cross-entropy over the real positions of tgt_out."""
    logits = model(src, tgt_in)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=vocab.PAD_ID)


@functools.lru_cache(maxsize=1)
def _task():
    """Three training pairs, two of them with shortened targets (so the targets pad too), and
    the date vocabularies."""
    src_vocab, tgt_vocab = data.date_vocabs()
    train = data.make_date_splits(seed=0).train
    pairs = tuple((s, t[:n]) for (s, t), n in zip(train[6:9], (10, 7, 4)))
    return pairs, src_vocab, tgt_vocab


def check_batch(batch_fn, loss_fn) -> str:
    """Check `batch_fn(pairs, src_vocab, tgt_vocab)` against the library's batch (`vocab.collate`,
    then `training.Batch`'s shift) on the positions the loss reads, and `loss_fn(model, src,
    tgt_in, tgt_out)` against the unsmoothed loss chapter 11 trains with, on a small untrained
    model."""
    pairs, src_vocab, tgt_vocab = _task()
    src_e, tgt_e = vocab.collate(list(pairs), src_vocab, tgt_vocab)
    expected = tl.training.Batch.from_ids(src_e, tgt_e, vocab.PAD_ID)
    got = batch_fn(list(pairs), src_vocab, tgt_vocab)
    assert isinstance(got, (tuple, list)) and len(got) == 3 and all(map(torch.is_tensor, got)), (
        "Not yet: return three tensors, (src, tgt_in, tgt_out)")
    src, tgt_in, tgt_out = got
    for name, g, e in [("src", src, src_e), ("tgt_in", tgt_in, expected.tgt_in),
                       ("tgt_out", tgt_out, expected.tgt_out)]:
        assert g.dtype == torch.long, f"Not yet: {name} should hold integer ids (torch.long)"
        assert g.shape == e.shape, (
            f"Not yet: {name} should be {tuple(e.shape)}, got {tuple(g.shape)}"
            + (" (did you forget <eos> or <bos>?)" if name != "src" else ""))
    assert torch.equal(src, src_e), (
        "Not yet: src should hold one id per character, src_vocab.encode(source), "
        "right-padded with 0")
    if not torch.equal(tgt_out, expected.tgt_out):
        assert not (tgt_out[:, 0] == vocab.BOS_ID).all(), (
            "Not yet: tgt_out starts with <bos>, which is what the decoder reads; tgt_out is "
            "what comes after each position of tgt_in: the target, then <eos>")
        raise AssertionError("Not yet: tgt_out should be the target's ids, then <eos>, then "
                             "padding")
    scored = tgt_out != vocab.PAD_ID  # the positions the loss reads
    if not torch.equal(tgt_in[scored], expected.tgt_in[scored]):
        assert not torch.equal(tgt_in, tgt_out), (
            "Not yet: tgt_in equals tgt_out, so each position would read the token it must "
            "predict; tgt_in is <bos>, then the target: shifted right by one")
        raise AssertionError("Not yet: tgt_in should be <bos>, then the target (shifted right "
                             "by one)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = tl.TransformerConfig(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab),
                                   d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.0)
        tiny = tl.Transformer(cfg).eval()
    with torch.no_grad():
        loss = loss_fn(tiny, src_e, expected.tgt_in, expected.tgt_out)
        logits = tiny(src_e, expected.tgt_in)
        reference = tl.LabelSmoothingLoss(0.0, vocab.PAD_ID)(logits, expected.tgt_out)
        everywhere = F.cross_entropy(logits.flatten(0, 1), expected.tgt_out.flatten())
        real = expected.tgt_out != vocab.PAD_ID
        per_token = F.cross_entropy(logits.transpose(1, 2), expected.tgt_out, reduction="none")
        per_sentence = ((per_token * real).sum(1) / real.sum(1)).mean()
        smoothed = tl.LabelSmoothingLoss(0.1, vocab.PAD_ID)(logits, expected.tgt_out)
    assert torch.is_tensor(loss) and loss.dim() == 0, (
        "Not yet: next_token_loss should return one number, a 0-d tensor")
    loss = loss.double()
    if torch.isclose(loss, reference.double(), atol=1e-5):
        return (f"Correct: your batch is the library's, and its loss is {loss.item():.3f} "
                f"(ln V = {math.log(len(tgt_vocab)):.3f}).")
    assert not torch.isclose(loss, everywhere.double(), atol=1e-5), (
        "Not yet: that mean includes the padding positions; leave them out (ignore_index)")
    assert not torch.isclose(loss, per_sentence.double(), atol=1e-5), (
        "Not yet: that is a mean of per-sentence means, which weighs a short sentence's "
        "tokens more; take one mean over all real positions")
    assert not torch.isclose(loss, smoothed.double(), atol=1e-5), (
        "Not yet: that loss is label-smoothed (chapter 11); here the target is the true "
        "token alone")
    raise AssertionError("Not yet: the loss is not the mean cross-entropy over the real "
                         "positions of tgt_out")
