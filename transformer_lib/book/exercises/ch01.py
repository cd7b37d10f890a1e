"""Chapter 1's exercise check: one step of the recurrent decoder without attention.

`check_decoder_step(fn)` runs the reader's `fn(decoder, y_prev, state, summary)` beside the
library's `rnn.GRUDecoder.step` on a batch of copy strings, from the library's state and
tokens at every step, then decodes greedily with the reader's step alone. It returns a
one-line verdict when the step is right and raises an AssertionError that says what is wrong
otherwise (it recognises the common slips: the GRU input in the order [c ; e], the output
layer reading the old state or its inputs in another order, the pair returned the other way
round).
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ... import checkpoints, data, decoding, vocab

__all__ = ["check_decoder_step"]

STEPS = 13  # output steps checked: the longest test string (12) and <eos>


@lru_cache(maxsize=1)
def _model():
    """The chapter's trained copy model without attention, and its vocabulary."""
    model, src_vocab, _, _ = checkpoints.load(checkpoints.CHECKPOINTS / "copy_none.pt")
    model.eval()
    return model, src_vocab


def _pair(result, expected_logits, expected_state, step):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(f"Not yet: at step {step} your function returned "
                             f"{type(result).__name__}; return a pair (logits, new state)")
    logits, state = (torch.as_tensor(r) for r in result)
    if logits.shape == expected_state.shape and state.shape == expected_logits.shape \
            and expected_logits.shape != expected_state.shape:
        raise AssertionError("Not yet: you returned (new state, logits); return (logits, new state)")
    if logits.shape != expected_logits.shape or state.shape != expected_state.shape:
        raise AssertionError(f"Not yet: expected logits {tuple(expected_logits.shape)} and state "
                             f"{tuple(expected_state.shape)}, got {tuple(logits.shape)} and "
                             f"{tuple(state.shape)}")
    return logits.to(expected_logits.dtype), state.to(expected_state.dtype)


def _close(a, b, atol):
    return torch.allclose(a, b, atol=atol, rtol=1e-4)


def _state_hint(decoder, emb, state, summary, got):
    """What a wrong new state is, when it is a known slip."""
    gru = decoder.rnn
    swapped = gru(torch.cat([summary, emb], -1).unsqueeze(1), state.unsqueeze(0))[1].squeeze(0)
    if _close(got, swapped, 1e-5):
        return "the GRU reads [c ; e(y_prev)]; it should read [e(y_prev) ; c], embedding first"
    if _close(got, state, 1e-6):
        return "it is the old state s_(t-1) unchanged; run the GRU step"
    return "the GRU reads [e(y_prev) ; c] and the old state s_(t-1)"


def _logits_hint(decoder, emb, old_state, new_state, summary, got):
    """What wrong logits are, when they are a known slip."""
    candidates = [
        ([old_state, summary, emb], "the output layer read the old state s_(t-1); it reads the new s_t"),
        ([new_state, emb, summary], "the output layer read [s_t ; e ; c]; the order is [s_t ; c ; e(y_prev)]"),
        ([summary, new_state, emb], "the output layer read [c ; s_t ; e]; the order is [s_t ; c ; e(y_prev)]"),
    ]
    for parts, hint in candidates:
        if _close(got, decoder.out(torch.cat(parts, -1)), 1e-4):
            return hint
    return "the output layer reads [s_t ; c ; e(y_prev)]"


def check_decoder_step(fn) -> str:
    """Check `fn(decoder, y_prev, state, summary) -> (logits, new_state)` against
    `rnn.GRUDecoder.step` of the chapter's copy model without attention; return a verdict or
    raise AssertionError saying what is wrong."""
    model, copy_vocab = _model()
    decoder = model.decoder
    pairs = data.make_copy_pairs(4, 5, 12, seed=11)
    sources = [s for s, _ in pairs]
    src, _ = vocab.collate(pairs, copy_vocab, copy_vocab)
    bos = torch.full((len(pairs),), copy_vocab.bos_id)
    with torch.no_grad():
        features, summary, mask = model.encoder(src)
        s0, _ = decoder.start(features, summary, mask)
        y, state = bos, s0
        for t in range(1, STEPS + 1):  # 1. every step from the library's state and tokens
            logits, new_state, _ = decoder.step(y, state, features, summary, mask)
            ours_logits, ours_state = _pair(fn(decoder, y, state, summary), logits, new_state, t)
            emb = decoder.embedding(y)
            if not _close(ours_state, new_state, 1e-5):
                raise AssertionError(f"Not yet: at step {t} your new state differs from the "
                                     f"library's: {_state_hint(decoder, emb, state, summary, ours_state)}")
            if not _close(ours_logits, logits, 1e-4):
                hint = _logits_hint(decoder, emb, state, new_state, summary, ours_logits)
                raise AssertionError(f"Not yet: the state is right, but at step {t} the logits "
                                     f"differ: {hint}")
            y, state = logits.argmax(-1), new_state
        y, state, written = bos, s0, []  # 2. greedy decoding with the reader's step alone
        for t in range(STEPS):
            logits, state = _pair(fn(decoder, y, state, summary), logits, state, t + 1)
            y = logits.argmax(-1)
            written.append(y)
    ours = [copy_vocab.decode(row) for row in torch.stack(written, 1).tolist()]
    lib = decoding.translate(model, sources, copy_vocab, copy_vocab, max_len=STEPS)
    if ours != lib:
        raise AssertionError(f"Not yet: decoding with your step gives {ours}, the library {lib}")
    return f"Correct: your step equals GRUDecoder.step and copies {sources[0]!r} to {ours[0]!r}."
