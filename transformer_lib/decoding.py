"""Decoding: greedy search and beam search, with the attention weights of the result.

The decoder is auto-regressive (section 3.1): it reads its own previous outputs, so
generation runs one token at a time. `model` is any module with
`encode(src, src_mask) -> memory` and `decode(tgt, memory, src_mask) -> logits`: the
`Transformer` and the recurrent `rnn.Seq2Seq` alike. `translate` works on strings;
`greedy_decode` and `beam_search` on tensors of token ids. Each leaves the model in the
train/eval mode it found it in, and builds every tensor on the device of `src`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_positive_int, check_tensor, check_token_ids
from .attention import record_attention
from .attention_maps import attention_kind
from .masks import padding_mask
from .runtime import device_of, eval_mode
from .vocab import BOS_ID, EOS_ID, PAD_ID, collate


@dataclass
class Decoded:
    """The result of decoding a batch.

    tokens: (B, L) output ids without <bos>, padded with pad_id after <eos>;
    scores: (B,) total log-probability of each output (for beam search, before the length
    penalty); attention: when asked for, the weights of the final pass over the output,
    {"encoder": [...], "decoder": [...], "cross": [...]}, one (B, n_heads, q_len, k_len)
    tensor per layer.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    attention: dict[str, list[torch.Tensor]] | None = None


def strip_special(ids, eos_id: int, pad_id: int = 0) -> list[int]:
    """The ids before the first <eos> (and without padding), as a list."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == eos_id:
            break
        if i != pad_id:
            out.append(i)
    return out


def _next_token_logp(model, ys, memory, src_mask, bos_id: int, pad_id: int) -> torch.Tensor:
    """log P(next token | prefix, source), (rows, V); <bos> and <pad> are never generated."""
    logp = model.decode(ys, memory, src_mask)[:, -1].log_softmax(-1)
    logp[:, [bos_id, pad_id]] = float("-inf")
    return logp


def _check(model, src, max_len) -> None:
    """Check the arguments once per call (not once per decoder step), lengths included: a
    Transformer's decoder reads up to `max_len` target positions (<bos> and max_len - 1
    outputs), so both the source and `max_len` must fit its positional table."""
    check_tensor("src", src, ndim=2)
    if src.shape[1] == 0:
        raise ValueError(f"src must hold at least one position per row, got shape {tuple(src.shape)}")
    config = getattr(model, "config", None)
    if getattr(config, "src_vocab", None) is not None:
        check_token_ids("src", src, config.src_vocab)
    _check_lengths(model, src.shape[1], max_len)


def _check_lengths(model, src_len: int, max_len: int) -> None:
    check_positive_int("max_len", max_len)
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and src_len > limit:
        raise ValueError(f"src has {src_len} positions, more than the model's max_len={limit}")
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len}: the decoder would read up to {max_len} target positions, but the "
                         f"model's positional table holds max_len={limit}; pass max_len <= {limit}")


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, max_len: int, bos_id: int = 1, eos_id: int = 2,
                  pad_id: int = 0, return_attention: bool = False) -> Decoded:
    """Pick the most probable next token, append it, repeat, until every row has produced
    <eos> or `max_len` tokens. src: (B, S) ids -> Decoded with tokens (B, <= max_len)."""
    _check(model, src, max_len)
    with eval_mode(model):
        return _greedy(model, src, max_len, bos_id, eos_id, pad_id, return_attention)


def _greedy(model, src, max_len, bos_id, eos_id, pad_id, return_attention) -> Decoded:
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(src.shape[0], device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logp = _next_token_logp(model, ys, memory, src_mask, bos_id, pad_id)  # (B, V)
        best_logp, nxt = logp.max(-1)
        nxt = nxt.masked_fill(done, pad_id)
        scores += best_logp.masked_fill(done, 0.0)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    result = Decoded(ys[:, 1:], scores)
    if return_attention:
        result.attention = attention_of(model, src, ys, pad_id)
    return result


def length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); alpha = 0 ranks by raw log-probability."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, max_len: int, beam_size: int = 4, bos_id: int = 1,
                eos_id: int = 2, pad_id: int = 0, alpha: float = 0.0, return_attention: bool = False) -> Decoded:
    """Keep the `beam_size` best prefixes at every step instead of one.

    Each step extends every live prefix by every token and keeps the best `beam_size` of
    the results by total log-probability; a prefix that produces <eos> among the
    `beam_size` best candidates is set aside as a finished hypothesis (the best `beam_size`
    are kept). A row stops when it has `beam_size` finished hypotheses and no live prefix
    can still beat the worst of them (exact for alpha = 0, where scores only fall as a prefix
    grows), or at `max_len`; the best finished one by log P(Y) / lp(Y) is returned. The whole
    batch is decoded together: (B * beam_size) prefixes go through the decoder at once.
    """
    _check(model, src, max_len)
    check_positive_int("beam_size", beam_size)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha < float("inf"):
        raise ValueError(f"alpha must be a non-negative number (the length penalty's exponent), got {alpha!r}")
    with eval_mode(model):
        return _beam(model, src, max_len, beam_size, bos_id, eos_id, pad_id, alpha, return_attention)


def _beam(model, src, max_len, k, bos_id, eos_id, pad_id, alpha, return_attention) -> Decoded:
    B, device = src.shape[0], src.device
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)
    memory, src_mask_k = memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0)  # (B*k, ...)
    ys = torch.full((B * k, 1), bos_id, dtype=torch.long, device=src.device)
    live = torch.full((B, k), float("-inf"), device=src.device)
    live[:, 0] = 0.0  # all beams start identical: keep one, or the top-k would be k copies
    finished: list[list[tuple[float, float, list[int]]]] = [[] for _ in range(B)]  # (rank score, logp, ids)
    done = [False] * B
    for step in range(1, max_len + 1):
        logp = _next_token_logp(model, ys, memory, src_mask_k, bos_id, pad_id)  # (B*k, V)
        vocab = logp.shape[-1]
        cand = (live.view(-1, 1) + logp).view(B, k * vocab)  # (B, k*V)
        top_scores, top_idx = cand.topk(min(2 * k, k * vocab), dim=-1)
        new_rows, new_live = [], torch.full((B, k), float("-inf"), device=src.device)
        for b in range(B):
            kept = 0
            for rank, (s, idx) in enumerate(zip(top_scores[b].tolist(), top_idx[b].tolist())):
                beam, tok = divmod(idx, vocab)
                if s == float("-inf") or done[b] or kept == k:
                    break
                prefix = ys[b * k + beam, 1:].tolist()
                if tok != eos_id:
                    new_rows.append(torch.cat([ys[b * k + beam], ys.new_tensor([tok])]))
                    new_live[b, kept] = s
                    kept += 1
                elif rank < k:  # an <eos> counts only among the k best candidates (so k = 1 is greedy)
                    finished[b].append((s / length_penalty(len(prefix) + 1, alpha), s, prefix + [eos_id]))
                    finished[b] = sorted(finished[b], key=lambda h: -h[0])[:k]
            while kept < k:  # pad the beam with dead rows to keep the (B*k) layout
                new_rows.append(torch.cat([ys[b * k], ys.new_tensor([pad_id])]))
                kept += 1
            best_live = new_live[b].max().item()
            if len(finished[b]) >= k and (best_live == float("-inf")
                                          or best_live / length_penalty(step, alpha) <= finished[b][-1][0]):
                done[b] = True
        ys, live = torch.stack(new_rows), new_live
        if all(done):
            break
    for b in range(B):  # rows that ran out of steps: their live prefixes count as finished
        if not done[b]:
            for j in range(k):
                s = live[b, j].item()
                if s > float("-inf"):
                    prefix = ys[b * k + j, 1:].tolist()
                    finished[b].append((s / length_penalty(len(prefix), alpha), s, prefix))
    best = [max(f, key=lambda h: h[0]) for f in finished]
    length = max(len(h[2]) for h in best)
    tokens = torch.full((B, length), pad_id, dtype=torch.long, device=device)
    for b, (_, _, ids) in enumerate(best):
        tokens[b, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
    result = Decoded(tokens, torch.tensor([h[1] for h in best], device=device))
    if return_attention:
        bos = torch.full((B, 1), bos_id, dtype=torch.long, device=device)
        result.attention = attention_of(model, src, torch.cat([bos, tokens], 1), pad_id)
    return result


@torch.no_grad()
def attention_of(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad_id: int = 0) -> dict[str, list[torch.Tensor]]:
    """Every attention weight of one teacher-forced pass over `tgt` (B, T) given `src` (B, S).

    Because the decoder is causal, these are exactly the weights seen while generating `tgt`
    token by token. Returns {"encoder": [(B, h, S, S)] * N, "decoder": [(B, h, T, T)] * N,
    "cross": [(B, h, T, S)] * N}.
    """
    src_mask = padding_mask(src, pad_id)
    with record_attention(model) as weights:
        model.decode(tgt, model.encode(src, src_mask), src_mask)
    groups: dict[str, list[torch.Tensor]] = {"encoder": [], "decoder": [], "cross": []}
    for name, w in weights.items():  # names like "encoder.layers.0.self_attn"
        groups[attention_kind(name)].append(w)
    return groups


@torch.no_grad()
def alignment_of(model: nn.Module, sources, outputs, src_vocab, tgt_vocab) -> list[torch.Tensor]:
    """The alignment of a recurrent model with attention (`rnn.Seq2Seq`) for each pair of a
    source string and the output it decoded: a (len(output) + 1, len(source)) matrix whose row
    t holds the weights alpha[t, t'] with which output character t was written (the last row:
    <eos>). The decoder reads its own previous outputs, so one teacher-forced pass over the
    outputs gives exactly the weights seen while decoding them."""
    if isinstance(sources, str) or isinstance(outputs, str):
        raise TypeError("sources and outputs must be lists of strings, not single strings")
    if len(sources) != len(outputs):
        raise ValueError(f"sources and outputs must pair up, got {len(sources)} and {len(outputs)}")
    src, tgt = (t.to(device_of(model)) for t in collate(list(zip(sources, outputs)), src_vocab, tgt_vocab))
    weights = model.alignment(src, tgt[:, :-1])  # (B, T_y, T_x)
    return [weights[i, : len(o) + 1, : len(s)] for i, (s, o) in enumerate(zip(sources, outputs))]


def translate(model: nn.Module, sources, src_vocab, tgt_vocab, max_len: int = 40, beam_size: int = 1,
              batch_size: int = 512, alpha: float = 0.0) -> list[str]:
    """Decode a list of strings with `model` (a `Transformer` or an `rnn.Seq2Seq`): greedy when
    `beam_size` is 1, else beam search with length penalty `alpha`.

    `src_vocab` and `tgt_vocab` are `transformer_lib.vocab.Vocab`s; batches of `batch_size`
    sources are padded together and moved to the model's device. Returns one output string
    per source (without <eos>)."""
    if isinstance(sources, str):
        raise TypeError("sources must be a list of strings, not a single string")
    check_positive_int("batch_size", batch_size)
    check_positive_int("beam_size", beam_size)
    _check_lengths(model, max((len(src_vocab.encode(s)) for s in sources), default=0), max_len)  # before any batch
    device = device_of(model)
    outputs = []
    for start in range(0, len(sources), batch_size):
        src, _ = collate([(s, "") for s in sources[start : start + batch_size]], src_vocab, tgt_vocab)
        src = src.to(device)
        kw = dict(bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
        out = (greedy_decode(model, src, max_len, **kw) if beam_size == 1
               else beam_search(model, src, max_len, beam_size=beam_size, alpha=alpha, **kw))
        outputs += [tgt_vocab.decode(row) for row in out.tokens]
    return outputs
