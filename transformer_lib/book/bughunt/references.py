"""The plain references of the bug hunt (chapter 15) and the planted bugs: each reference is the
textbook form of one piece (equation 1, the smoothed loss, the sinusoidal table, the padding
mask, the shifted target, greedy decoding), and each bug is a copy of one with one line
changed, as real implementations got it wrong (each docstring cites the public report).
`show_diff` prints the changed lines."""
from __future__ import annotations

import ast
import difflib
import inspect
import math
import textwrap
from typing import Callable

import torch
import torch.nn.functional as F

from ...decoding import greedy_decode
from ...masks import padding_mask
from ...special_tokens import BOS_ID as BOS
from ...special_tokens import EOS_ID as EOS  # noqa: F401 (handed on by the bug hunt's face)
from ...special_tokens import PAD_ID as PAD
from ...training import Batch

D_MODEL, N_HEADS, D_FF, VOCAB = 32, 4, 64, 20
#: The scales of the scores the attention checks try by default.
SCALES = (1.0, 1e2, 1e4)


# --- plain references ---------------------------------------------------------------------

def softmax_and_average(scores, value, dropout=None):
    """The second half of equation 1, shared by the references and the bugs below: weights =
    softmax(scores) over the keys (then dropout), output = weights V. scores (B, h, T_q, T_k),
    value (B, h, T_k, d_v) -> output (B, h, T_q, d_v), weights (B, h, T_q, T_k)."""
    weights = scores.softmax(-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def plain_attention(query, key, value, mask=None, dropout=None):
    """softmax(Q K^T / sqrt(d_k)) V (equation 1) in its textbook form; query (B, h, T_q, d_k),
    key (B, h, T_k, d_k), value (B, h, T_k, d_v), mask True = may attend.
    Returns output (B, h, T_q, d_v) and weights (B, h, T_q, T_k)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return softmax_and_average(scores, value, dropout)


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


def plain_padding_mask(ids, pad_id: int = PAD):
    """ids (B, S) -> (B, 1, 1, S): True at real tokens. The singleton axes are the heads and
    the QUERIES, so every query row is told which KEYS are padding."""
    return (ids != pad_id)[:, None, None, :]


def plain_shift(tgt):
    """Teacher forcing (section 5.1 feeds the target shifted right): from tgt = [<bos>, y_1,
    ..., y_n, <eos>] (B, T + 1), the decoder reads tgt[:, :-1] and position t is scored on
    the NEXT token, tgt[:, 1:]. Returns (decoder input, target), both (B, T)."""
    return tgt[:, :-1], tgt[:, 1:]


@torch.no_grad()
def plain_greedy(model, src, max_len: int):
    """Greedy decoding as evaluation code writes it: switch the model to eval mode, encode,
    then append the most likely token (never <pad> or <bos>) `max_len` times.
    src (B, S) -> tokens (B, max_len)."""
    model.eval()
    return greedy_steps(model, src, max_len)


def greedy_steps(model, src, max_len: int):
    """The loop of greedy decoding, in whatever mode `model` is: encode `src` (B, S), then
    append the most likely token (never <pad> or <bos>) `max_len` times -> (B, max_len)."""
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1]  # (B, V)
        logits[:, [PAD, BOS]] = float("-inf")  # tokens decoding never produces
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:]


# --- the planted bugs: each is its reference with one line changed --------------------------

def attention_scaled_by_d_model(query, key, value, mask=None, dropout=None):
    """Scores divided by sqrt(d_model) = sqrt(n_heads * d_k) instead of sqrt(d_k).
    Reported: jadore801120/attention-is-all-you-need-pytorch #42 (fixed by the maintainer);
    karpathy/ng-video-lecture PR #6."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-3] * query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return softmax_and_average(scores, value, dropout)


def attention_fill_tiny(query, key, value, mask=None, dropout=None):
    """Blocked scores set to -1e-9 (about zero) instead of a large negative number.
    Reported: awslabs/gluonts PR #1401; Shujun-He/RibonanzaNet #5."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e-9)
    return softmax_and_average(scores, value, dropout)


def attention_fill_1e4(query, key, value, mask=None, dropout=None):
    """Blocked scores set to -10000, which wins once the allowed scores fall below it.
    Reported: huggingface/transformers #14859; TransformerLensOrg/TransformerLens #318."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    return softmax_and_average(scores, value, dropout)


def smoothed_loss_log_of_softmax(logits, target, smoothing: float = 0.1, pad_id: int = PAD):
    """The KL form fed log(softmax(logits)): a probability that underflows to 0 gives log 0.
    Reported in training code: allenai/allennlp #2797 (a NaN loss from -log(softmax));
    tinygrad/tinygrad #219 (log(0) in the Transformer example's loss); in a tutorial's
    example of the loss: harvardnlp/annotated-transformer #109."""
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


def padding_mask_on_queries(ids, pad_id: int = PAD):
    """The padding mask unsqueezed on the wrong axis, (B, 1, S, 1): it blocks QUERY rows
    instead of key columns. In the encoder's self-attention every real query may attend to
    the padding keys, and the padded positions (whose outputs the real ones then read) attend
    to nothing. Against cross-attention's (B, h, T, S) scores it broadcasts only when T = S,
    and then it blocks decoder row t wherever SOURCE position t is padding: the target
    positions from the source's real length on get no cross-attention output, so they lose
    the source entirely. Reported (for a target mask, where the causal mask hides most of
    it): hyunwoongko/transformer PR #40 ("fix(model): attention pad mask")."""
    return (ids != pad_id)[:, None, :, None]


def target_not_shifted(tgt):
    """The decoder reads tgt[:, :-1] and is scored on the same tokens: each position learns
    to copy its input. Reported: huggingface/transformers #27517 (MBartForCausalLM, "the model
    seems to copy the input during training") and #30105 (BartForCausalLM)."""
    return tgt[:, :-1], tgt[:, :-1]


@torch.no_grad()
def greedy_dropout_on(model, src, max_len: int):
    """Greedy decoding that never switches the model to eval mode: called during training,
    dropout stays on. Reported: IBM/pytorch-seq2seq #33 (fixed in PR #38);
    meta-pytorch/torchtune PR #1049; ipolharvard/ethos-ares #20."""
    return greedy_steps(model, src, max_len)


def attention_causal_flag(query, key, value, mask=None, dropout=None):
    """Causal attention through the fused kernel's flag, is_causal=True, in place of the mask
    the model passes. The flag aligns the causal mask to the top-left corner: query i sees
    keys 0..i, also when there are fewer queries than keys, as when new tokens attend to a
    key/value cache, where query i should see every key up to k_len - q_len + i. It ignores
    the mask it is given and returns no weights (None). Equal to the library's attention
    whenever queries and keys are as many and the mask passed is the causal one (a causal
    LM's full forward pass), not for an encoder's, a padded or a cross-attention mask.
    Discussed in
    pytorch/pytorch #103082; ml-explore/mlx #2835 found its kernel aligned the other way."""
    return F.scaled_dot_product_attention(query, key, value, is_causal=True), None


def show_diff(reference: Callable, changed: Callable) -> str:
    """The lines of `changed`'s source that differ from `reference`'s (docstrings and
    decorators left out), as '- old' / '+ new' lines."""
    def body(fn):
        source = textwrap.dedent(inspect.getsource(fn))
        node = ast.parse(source).body[0]
        start = node.body[0].end_lineno if ast.get_docstring(node) else node.body[0].lineno - 1
        return [line.strip() for line in source.splitlines()[start:]]

    diff = difflib.ndiff(body(reference), body(changed))
    return "\n".join(line for line in diff if line[:1] in "-+")


# --- the library's own pieces --------------------------------------------------------------

def library_shift(tgt):
    """The library's teacher forcing: `training.Batch.from_ids`'s decoder input and target."""
    batch = Batch.from_ids(tgt, tgt, PAD)
    return batch.tgt_in, batch.tgt_out


def library_greedy(model, src, max_len: int):
    """The library's greedy decoding (`decoding.greedy_decode`, which runs in eval mode and
    gives the model back in the mode it had); its tokens (B, <= max_len)."""
    return greedy_decode(model, src, max_len).tokens
