"""Decoding: greedy search and beam search, with the attention weights of the result.

The decoder is auto-regressive (section 3.1): it reads its own previous outputs, so
generation runs one token at a time. `model` is any module with
`encode(src, src_mask) -> memory` and `decode(tgt, memory, src_mask) -> logits`: the
`Transformer` and the recurrent `rnn.Seq2Seq` alike. `translate` works on strings;
`greedy_decode` and `beam_search` on tensors of token ids. Each leaves the model in the
train/eval mode it found it in, and builds every tensor on the device of `src`.

A model that offers a cache runs only the newest position through its decoder at each step:
`new_cache(batch_size, src_len, max_len)` gives a list of caches (one per decoder layer), each
with `length` (the target positions read) and `reorder(rows)`, and `decode(new_tokens, memory,
src_mask, cache=...)` reads the cache and extends it. The `Transformer` keeps the
self-attention's keys and values of the earlier positions and computes the cross-attention's
(the source's) once; `rnn.Seq2Seq` keeps its decoder's state. Beam search reorders the caches
when it reorders its beams. `use_cache=False` re-reads the whole prefix at
every step instead; both give the same tokens and scores (up to rounding). The special tokens
come from `special_tokens`: every output starts after <bos>, ends at <eos>, and is padded with
<pad>; neither <bos> nor <pad> is ever generated.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_bool, check_positive_int, check_tensor, check_token_ids, entry_point
from .attention import record_attention
from .attention_maps import attention_kind
from .masks import padding_mask
from .runtime import device_of, eval_mode
from .special_tokens import BOS_ID, EOS_ID, NEVER_GENERATED, PAD_ID
from .vocab import collate


@dataclass
class Decoded:
    """The result of decoding a batch.

    tokens: (B, L) output ids without <bos>, padded with <pad> after <eos>;
    scores: (B,) total log-probability of each output (for beam search, before the length
    penalty); attention: when asked for, the weights of the final pass over the output,
    {"encoder": [...], "decoder": [...], "cross": [...]}, one (B, n_heads, q_len, k_len)
    tensor per layer.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    attention: dict[str, list[torch.Tensor]] | None = None


def strip_special(ids, eos_id: int = EOS_ID) -> list[int]:
    """The ids before the first `eos_id` (<eos> by default), without padding, as a list."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == eos_id:
            break
        if i != PAD_ID:
            out.append(i)
    return out


class _Prefixes:
    """The decoder's side of a search: the prefixes so far, (rows, t) ids starting with <bos>,
    and, for a model with a cache, the cache that holds every position but the newest."""

    def __init__(self, model, memory, src_mask, max_len: int, use_cache: bool):
        self.model, self.memory, self.src_mask = model, memory, src_mask
        rows, device = memory.shape[0], memory.device
        self.ids = torch.full((rows, 1), BOS_ID, dtype=torch.long, device=device)
        use_cache = use_cache and hasattr(model, "new_cache")
        self.cache = model.new_cache(rows, memory.shape[1], max_len) if use_cache else None

    def next_logp(self) -> torch.Tensor:
        """log P(next token | prefix, source), (rows, V); <bos> and <pad> are never generated."""
        if self.cache is None:
            logits = self.model.decode(self.ids, self.memory, self.src_mask)
        else:  # only the positions the cache has not seen (after the first step: the newest)
            new = self.ids[:, self.cache[0].length:]
            logits = self.model.decode(new, self.memory, self.src_mask, cache=self.cache)
        logp = logits[:, -1].log_softmax(-1)
        logp[:, list(NEVER_GENERATED)] = float("-inf")
        return logp

    def extend(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Append `tokens` (rows,) to the prefixes, each to the prefix of `rows` (default: its
        own row): the prefixes, and the cache with them, are reordered first."""
        if rows is not None:
            self.ids = self.ids[rows]
            for layer in self.cache or ():
                layer.reorder(rows)
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)


def _check(model, src, max_len, return_attention: bool = False, use_cache: bool = True) -> None:
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
    check_bool("return_attention", return_attention)
    check_bool("use_cache", use_cache)


def _check_lengths(model, src_len: int, max_len: int) -> None:
    check_positive_int("max_len", max_len)
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and src_len > limit:
        raise ValueError(f"src has {src_len} positions, more than the model's max_len={limit}")
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len}: the decoder would read up to {max_len} target positions, but the "
                         f"model's positional table holds max_len={limit}; pass max_len <= {limit}")


@torch.no_grad()
@entry_point(_check)
def greedy_decode(model: nn.Module, src: torch.Tensor, max_len: int, return_attention: bool = False,
                  use_cache: bool = True) -> Decoded:
    """Pick the most probable next token, append it, repeat, until every row has produced
    <eos> or `max_len` tokens. src: (B, S) ids -> Decoded with tokens (B, <= max_len)."""
    with eval_mode(model):
        src_mask = padding_mask(src, PAD_ID)
        prefixes = _Prefixes(model, model.encode(src, src_mask), src_mask, max_len, use_cache)
        scores = torch.zeros(src.shape[0], device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            best_logp, nxt = prefixes.next_logp().max(-1)  # (B,) each
            nxt = nxt.masked_fill(done, PAD_ID)
            scores += best_logp.masked_fill(done, 0.0)
            prefixes.extend(nxt)
            done |= nxt == EOS_ID
            if done.all():
                break
        result = Decoded(prefixes.ids[:, 1:], scores)
        if return_attention:
            result.attention = attention_of(model, src, prefixes.ids)
        return result


def length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); alpha = 0 ranks by raw log-probability."""
    return ((5 + length) / 6) ** alpha


def _check_beam(model, src, max_len, beam_size: int = 4, alpha: float = 0.0, return_attention: bool = False,
                use_cache: bool = True) -> None:
    _check(model, src, max_len, return_attention, use_cache)
    check_positive_int("beam_size", beam_size)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha < float("inf"):
        raise ValueError(f"alpha must be a non-negative number (the length penalty's exponent), got {alpha!r}")


@torch.no_grad()
@entry_point(_check_beam)
def beam_search(model: nn.Module, src: torch.Tensor, max_len: int, beam_size: int = 4, alpha: float = 0.0,
                return_attention: bool = False, use_cache: bool = True) -> Decoded:
    """Keep the `beam_size` best prefixes at every step instead of one.

    Each step extends every live prefix by every token and keeps the best `beam_size` of
    the results by total log-probability; a prefix that produces <eos> among the
    `beam_size` best candidates is set aside as a finished hypothesis (the best `beam_size`
    are kept). A row stops when it has `beam_size` finished hypotheses and no live prefix
    can still beat the worst of them (exact for alpha = 0, where scores only fall as a prefix
    grows), or at `max_len`; the best finished one by log P(Y) / lp(Y) is returned. The whole
    batch is decoded together: (B * beam_size) prefixes go through the decoder at once, and
    the kept prefixes (with their caches) are gathered from their parents.
    """
    with eval_mode(model):
        return _beam(model, src, max_len, beam_size, alpha, return_attention, use_cache)


def _beam(model, src, max_len, k, alpha, return_attention, use_cache) -> Decoded:
    B, device = src.shape[0], src.device
    src_mask = padding_mask(src, PAD_ID)
    memory = model.encode(src, src_mask).repeat_interleave(k, 0)  # (B*k, S, d): beam j of row b is b*k + j
    prefixes = _Prefixes(model, memory, src_mask.repeat_interleave(k, 0), max_len, use_cache)
    live = torch.full((B, k), float("-inf"), device=device)
    live[:, 0] = 0.0  # all beams start identical: keep one, or the top-k would be k copies
    finished: list[list[tuple[float, float, list[int]]]] = [[] for _ in range(B)]  # (rank score, logp, ids)
    done = [False] * B
    for step in range(1, max_len + 1):
        logp = prefixes.next_logp()  # (B*k, V)
        vocab = logp.shape[-1]
        cand = (live.view(-1, 1) + logp).view(B, k * vocab)  # (B, k*V)
        top_scores, top_idx = (t.tolist() for t in cand.topk(min(2 * k, k * vocab), dim=-1))
        parents, tokens, new_live = [], [], [[float("-inf")] * k for _ in range(B)]
        for b in range(B):
            kept = 0
            for rank, (s, idx) in enumerate(zip(top_scores[b], top_idx[b])):
                beam, tok = divmod(idx, vocab)
                if s == float("-inf") or done[b] or kept == k:
                    break
                if tok != EOS_ID:
                    parents.append(b * k + beam)
                    tokens.append(tok)
                    new_live[b][kept] = s
                    kept += 1
                elif rank < k:  # an <eos> counts only among the k best candidates (so k = 1 is greedy)
                    ids = prefixes.ids[b * k + beam, 1:].tolist() + [EOS_ID]
                    finished[b].append((s / length_penalty(len(ids), alpha), s, ids))
                    finished[b] = sorted(finished[b], key=lambda h: -h[0])[:k]
            parents += [b * k] * (k - kept)  # dead rows keep the (B*k) layout; they score -inf
            tokens += [PAD_ID] * (k - kept)
            best_live = max(new_live[b])
            if len(finished[b]) >= k and (best_live == float("-inf")
                                          or best_live / length_penalty(step, alpha) <= finished[b][-1][0]):
                done[b] = True
        prefixes.extend(torch.tensor(tokens, device=device), torch.tensor(parents, device=device))
        live = torch.tensor(new_live, device=device)
        if all(done):
            break
    for b in range(B):  # rows that ran out of steps: their live prefixes count as finished
        if not done[b]:
            for j, s in enumerate(live[b].tolist()):
                if s > float("-inf"):
                    ids = prefixes.ids[b * k + j, 1:].tolist()
                    finished[b].append((s / length_penalty(len(ids), alpha), s, ids))
    best = [max(f, key=lambda h: h[0]) for f in finished]
    length = max(len(h[2]) for h in best)
    tokens = torch.full((B, length), PAD_ID, dtype=torch.long, device=device)
    for b, (_, _, ids) in enumerate(best):
        tokens[b, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
    result = Decoded(tokens, torch.tensor([h[1] for h in best], device=device))
    if return_attention:
        bos = torch.full((B, 1), BOS_ID, dtype=torch.long, device=device)
        result.attention = attention_of(model, src, torch.cat([bos, tokens], 1))
    return result


@torch.no_grad()
def attention_of(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """Every attention weight of one teacher-forced pass over `tgt` (B, T) given `src` (B, S).

    Because the decoder is causal, these are exactly the weights seen while generating `tgt`
    token by token. Returns {"encoder": [(B, h, S, S)] * N, "decoder": [(B, h, T, T)] * N,
    "cross": [(B, h, T, S)] * N}.
    """
    src_mask = padding_mask(src, PAD_ID)
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
        out = (greedy_decode(model, src, max_len) if beam_size == 1
               else beam_search(model, src, max_len, beam_size=beam_size, alpha=alpha))
        outputs += [tgt_vocab.decode(row) for row in out.tokens]
    return outputs
