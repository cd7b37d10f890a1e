"""Planted bugs and the book's checks, for the bug hunt of chapter 15.

Each piece comes twice: a plain reference (the textbook form of equation 1, of the smoothed
loss, of the sinusoidal table) and copies of it with one line changed, the way real
implementations got it wrong (each docstring cites the public report). A `Suspect` bundles
the three swappable pieces of a model; `plant` puts them into a copy of a `Transformer`; the
checks take a `Suspect` and return True when it passes:

- `matches_torch`:   the stacks equal `torch.nn.Transformer` with the same weights (chapters 5-10)
- `is_causal`:       changing later target tokens leaves earlier logits unchanged (chapter 8)
- `loss_is_finite`:  loss and gradients stay finite, even for confident logits (chapter 11)
- `score_variance`:  random unit-variance q, k give scores of variance about 1 (chapter 4)
- `rotation_holds`:  PE[pos + k] = T(k) PE[pos] for the book's rotation T(k) (chapter 6)

The checks use one small model: d_model = 32, n_heads = 4, so d_k = 8.
"""
from __future__ import annotations

import ast
import copy
import difflib
import inspect
import math
import textwrap
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention, use_attention
from .masks import causal_mask
from .interop import from_torch
from .model import Transformer, TransformerConfig
from .positional import PositionalEncoding, rotation_for_offset, sinusoidal_encoding
from .losses import LabelSmoothingLoss

D_MODEL, N_HEADS, D_FF, VOCAB, PAD = 32, 4, 64, 20, 0


# --- plain references ---------------------------------------------------------------------

def plain_attention(query, key, value, mask=None, dropout=None):
    """softmax(Q K^T / sqrt(d_k)) V (equation 1) in its textbook form; query (B, h, T_q, d_k),
    key (B, h, T_k, d_k), value (B, h, T_k, d_v), mask True = may attend.
    Returns output (B, h, T_q, d_v) and weights (B, h, T_q, T_k)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def plain_smoothed_loss(logits, target, smoothing: float = 0.1, pad_id: int = PAD):
    """KL(q || p) against the smoothed target q (eps on the V - 1 tokens other than padding),
    averaged over non-padding positions; logits (..., V), target (...). Equals
    `LabelSmoothingLoss` minus the entropy of q, a constant: the same gradients."""
    vocab = logits.shape[-1]
    q = torch.full_like(logits, smoothing / (vocab - 1))
    q = q.scatter(-1, target[..., None], 1 - smoothing + smoothing / (vocab - 1))
    q[..., pad_id] = 0.0
    logp = logits.log_softmax(-1)
    loss = F.kl_div(logp, q, reduction="none").sum(-1)
    keep = target != pad_id
    return loss[keep].sum() / keep.sum().clamp_min(1)


def plain_encoding(n_positions: int, d_model: int):
    """The sinusoidal table (section 3.5), one channel at a time: channels 2i and 2i+1 share
    the frequency 1 / 10000^(2i / d_model). Shape (n_positions, d_model)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    c = torch.arange(d_model, dtype=torch.float64)
    angle = pos / 10000.0 ** ((c - c % 2) / d_model)
    return torch.where(c % 2 == 0, angle.sin(), angle.cos()).float()


# --- the planted bugs: each is its reference with one line changed --------------------------

def attention_scaled_by_d_model(query, key, value, mask=None, dropout=None):
    """Scores divided by sqrt(d_model) = sqrt(n_heads * d_k) instead of sqrt(d_k).
    Reported: karpathy/ng-video-lecture PR #6; jadore801120/attention-is-all-you-need-pytorch #49."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-3] * query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def attention_fill_tiny(query, key, value, mask=None, dropout=None):
    """Blocked scores set to -1e-9 (about zero) instead of a large negative number.
    Reported: awslabs/gluonts PR #1401; Shujun-He/RibonanzaNet #5."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e-9)
    weights = scores.softmax(-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def attention_fill_1e4(query, key, value, mask=None, dropout=None):
    """Blocked scores set to -10000, which wins once the allowed scores fall below it.
    Reported: huggingface/transformers #14859; TransformerLensOrg/TransformerLens #318 (PR #319)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    weights = scores.softmax(-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def smoothed_loss_log_of_softmax(logits, target, smoothing: float = 0.1, pad_id: int = PAD):
    """The KL form fed log(softmax(logits)): a probability that underflows to 0 gives log 0.
    Reported: harvardnlp/annotated-transformer #109 ("label smoothing inf err")."""
    vocab = logits.shape[-1]
    q = torch.full_like(logits, smoothing / (vocab - 1))
    q = q.scatter(-1, target[..., None], 1 - smoothing + smoothing / (vocab - 1))
    q[..., pad_id] = 0.0
    logp = logits.softmax(-1).log()
    loss = F.kl_div(logp, q, reduction="none").sum(-1)
    keep = target != pad_id
    return loss[keep].sum() / keep.sum().clamp_min(1)


def encoding_frequency_per_channel(n_positions: int, d_model: int):
    """Each channel c gets the frequency 1 / 10000^(2c / d_model): a sine and its cosine no
    longer share a frequency. Reported: Kyubyong/transformer #38; shenweichen/DeepCTR #379."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    c = torch.arange(d_model, dtype=torch.float64)
    angle = pos / 10000.0 ** (2 * c / d_model)
    return torch.where(c % 2 == 0, angle.sin(), angle.cos()).float()


def show_diff(reference: Callable, changed: Callable) -> str:
    """The lines of `changed`'s source that differ from `reference`'s (docstrings left out),
    as '- old' / '+ new' pairs."""
    def body(fn):
        source = textwrap.dedent(inspect.getsource(fn))
        node = ast.parse(source).body[0]
        start = node.body[0].end_lineno if ast.get_docstring(node) else node.body[0].lineno - 1
        return [line.strip() for line in source.splitlines()[start:]]

    diff = difflib.ndiff(body(reference), body(changed))
    return "\n".join(line for line in diff if line[:1] in "-+")


# --- suspects and the model they are planted in -------------------------------------------

@dataclass
class Suspect:
    """The three swappable pieces of a model: the attention rule (signature of
    `scaled_dot_product_attention`), the positional table `(n_positions, d_model) -> table`,
    and the loss `(logits, target) -> scalar`. The defaults are the library's own."""

    name: str = "clean (the library)"
    attention_fn: Callable = scaled_dot_product_attention
    encoding_fn: Callable = sinusoidal_encoding
    loss: Callable = field(default_factory=lambda: LabelSmoothingLoss(0.1, pad_id=PAD))


def small_model(seed: int = 0) -> Transformer:
    """The checks' model: d_model 32, 4 heads, d_ff 64, 2 layers, vocabulary 20, no dropout."""
    torch.manual_seed(seed)
    config = TransformerConfig(VOCAB, VOCAB, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF, n_layers=2,
                               dropout=0.0, max_len=64, pad_id=PAD)
    return Transformer(config).eval()


def plant(model: Transformer, suspect: Suspect) -> Transformer:
    """A copy of `model` computing attention with `suspect.attention_fn` and adding the table of
    `suspect.encoding_fn`; the weights are the same, and `model` is left as it was."""
    planted = use_attention(copy.deepcopy(model), suspect.attention_fn)
    c = model.config
    table = PositionalEncoding(c.d_model, c.max_len, encoding_fn=suspect.encoding_fn)
    planted.src_embed.pos = planted.tgt_embed.pos = table  # both ends read the suspect's table
    return planted


# --- the checks ---------------------------------------------------------------------------

def matches_torch(suspect: Suspect, atol: float = 1e-4) -> bool:
    """Chapters 5-10: copy a random `torch.nn.Transformer` into `EncoderDecoder` (`interop.from_torch`), swap in the
    suspect's attention, and compare the decoder outputs (padded source, causal target)."""
    torch.manual_seed(1)
    theirs = nn.Transformer(D_MODEL, N_HEADS, 2, 2, D_FF, dropout=0.0, batch_first=True)
    ours = use_attention(from_torch(theirs), suspect.attention_fn)
    src, tgt = torch.randn(2, 7, D_MODEL), torch.randn(2, 5, D_MODEL)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 5:] = False  # two padding tokens in the second source
    causal = causal_mask(5)
    with torch.no_grad():
        expected = theirs(src, tgt, tgt_mask=~causal, src_key_padding_mask=~keep, memory_key_padding_mask=~keep)
        got = ours(src, tgt, keep[:, None, None, :], causal, keep[:, None, None, :])
    return bool((got - expected).abs().max() < atol)


def is_causal(suspect: Suspect, t: int = 4) -> bool:
    """Chapter 8: target tokens from position t on are changed; the logits of positions
    before t must not move (to 1e-6)."""
    model = plant(small_model(), suspect)
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(1, VOCAB, (3, 6), generator=g), torch.randint(1, VOCAB, (3, 8), generator=g)
    changed = tgt.clone()
    changed[:, t:] = torch.randint(1, VOCAB, (3, 8 - t), generator=g)
    with torch.no_grad():
        before, after = model(src, tgt)[:, :t], model(src, changed)[:, :t]
    return bool((before - after).abs().max() < 1e-6)


def loss_is_finite(suspect: Suspect) -> bool:
    """Chapter 11: the loss and its gradients are finite on the model's own logits (a batch
    with padding) and on confident logits (+-100, as a trained model may give)."""
    model = plant(small_model(), suspect).train()
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(1, VOCAB, (3, 6), generator=g), torch.randint(1, VOCAB, (3, 8), generator=g)
    tgt[0, 6:] = PAD
    loss = suspect.loss(model(src, tgt[:, :-1]), tgt[:, 1:])
    loss.backward()
    grads_ok = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    target = torch.randint(1, VOCAB, (6,), generator=g)
    confident = torch.full((6, VOCAB), -100.0).scatter(-1, target[:, None], 100.0).requires_grad_()
    extreme = suspect.loss(confident, target)
    extreme.backward()
    return bool(torch.isfinite(loss) and grads_ok and torch.isfinite(extreme) and torch.isfinite(confident.grad).all())


def score_variance(suspect: Suspect) -> float:
    """Chapter 4: the variance of the scores in a row, for q, k with N(0, 1) entries and
    d_k = 8; read back from the weights (log w = score - logsumexp, a per-row shift)."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(64, N_HEADS, 16, D_MODEL // N_HEADS, generator=g) for _ in range(3))
    _, weights = suspect.attention_fn(q, k, v, None, None)
    return weights.log().var(dim=-1).mean().item()


def variance_is_one(suspect: Suspect) -> bool:
    """Chapter 4: the scaled scores have variance about 1 (between 0.6 and 1.6 here)."""
    return 0.6 < score_variance(suspect) < 1.6


def rotation_holds(suspect: Suspect, n_positions: int = 50) -> bool:
    """Chapter 6: every row of the table is the row k before it turned by the book's
    rotation T(k), for k = 1 and 7."""
    table = suspect.encoding_fn(n_positions, D_MODEL).double()
    return all(torch.allclose(table[k:], table[:-k] @ rotation_for_offset(k, D_MODEL, torch.float64).T, atol=1e-5)
               for k in (1, 7))


CHECKS: dict[str, Callable[[Suspect], bool]] = {
    "torch.nn": matches_torch, "causal": is_causal, "finite loss": loss_is_finite,
    "variance": variance_is_one, "rotation": rotation_holds,
}


def caught_by(suspects: list[Suspect], checks: dict[str, Callable[[Suspect], bool]]) -> dict[str, dict[str, bool]]:
    """{suspect name: {check name: True if the check FAILS on it (the bug is caught)}}."""
    return {s.name: {name: not check(s) for name, check in checks.items()} for s in suspects}


def format_table(caught: dict[str, dict[str, bool]]) -> str:
    """A text table: one row per suspect, 'caught' where a check fails, '.' where it passes."""
    checks = list(next(iter(caught.values())))
    width = max(len(name) for name in caught) + 2
    cols = [max(len(c), 6) + 2 for c in checks]
    lines = ["".ljust(width) + "".join(c.rjust(w) for c, w in zip(checks, cols))]
    for name, row in caught.items():
        lines.append(name.ljust(width) + "".join(("caught" if row[c] else ".").rjust(w) for c, w in zip(checks, cols)))
    return "\n".join(lines)
