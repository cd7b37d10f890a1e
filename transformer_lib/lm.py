"""Decoder-only language models: the Transformer's blocks without the encoder (chapter 14).

A causal language model reads tokens x_1..x_T and predicts, at every position t, the next token
x_{t+1} from x_1..x_t alone (Radford et al. 2018, 2019; GPT). It is a stack of the encoder
layers of `layers.py` with the causal mask of `masks.py` in their self-attention: no encoder,
no cross-attention. This module adds what generation needs:

- `CausalLM`: embedding * sqrt(d_model) + sinusoidal positions, n_layers `EncoderLayer`s under
  a causal mask, a final LayerNorm (pre-norm, as in GPT-2) and an output layer tied to the
  embedding;
- `KVCache` and `CausalLM.step`: the keys and values of every layer kept from earlier steps, so
  that a new token costs one position's projections instead of the whole prefix's;
- `generate`: greedy decoding, or sampling with a temperature and top-k filtering, with or
  without the cache (both give the same tokens);
- `load_corpus`: the book's own prose (CC BY 4.0), shipped as package data.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from ._checks import check_positive_int, check_probability, check_tensor, check_token_ids
from .attention import fused_attention, scaled_dot_product_attention
from .layers import EncoderLayer
from .masks import causal_mask
from .positional import PositionalEncoding
from .utils import eval_mode

__all__ = ["CORPORA", "load_corpus", "CausalLM", "KVCache", "top_k_filter", "next_token", "generate"]

#: The corpora shipped with the package (package data, so Colab and Binder get them too).
CORPORA = Path(__file__).resolve().parent / "corpora"


def load_corpus(name: str = "book_prose") -> str:
    """The text of `corpora/<name>.txt` without its first line (a comment naming source and licence)."""
    path = CORPORA / f"{name}.txt"
    if not isinstance(name, str) or not path.is_file():
        known = sorted(p.stem for p in CORPORA.glob("*.txt"))
        raise ValueError(f"name must be one of the corpora {known}, got {name!r}")
    return path.read_text(encoding="utf-8").split("\n", 1)[1]


class KVCache:
    """The keys and values of every layer for the positions seen so far (one batch).

    `keys[l]` and `values[l]` are (batch, n_heads, length, d_k), or None before the first step.
    `length` is the number of positions cached; `nbytes()` what they occupy:
    2 * n_layers * batch * length * d_model numbers.
    """

    def __init__(self, n_layers: int):
        check_positive_int("n_layers", n_layers)
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    @property
    def batch_size(self) -> int | None:
        return None if self.keys[0] is None else self.keys[0].shape[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new positions' k, v (batch, n_heads, n_new, d_k) to `layer`; return all of them."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)

    def __repr__(self) -> str:
        return f"KVCache({len(self.keys)} layers, length {self.length})"


class CausalLM(nn.Module):
    """A decoder-only Transformer language model: logits for the next token at every position.

    ids (batch, T) -> logits (batch, T, vocab_size), where position t sees ids[:, :t+1] only:

        h_0 = E[x] * sqrt(d_model) + PE            (sections 3.4 and 3.5 of Vaswani et al. 2017)
        h_l = EncoderLayer_l(h_{l-1}, causal mask)  (l = 1..n_layers)
        logits = LayerNorm(h_L) E^T + b             (output tied to the embedding E)

    Args:
        vocab_size: number of token ids V.
        d_model, n_heads, d_ff, n_layers: the sizes of the layers, named as in the paper.
        max_len: the longest sequence (prompt and generated tokens) the model accepts.
        dropout: dropout probability (training only).
        norm_first: pre-norm layers and a final LayerNorm (GPT-2's arrangement, the default), or
            the paper's post-norm layers without a final norm.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, d_ff: int = 256, n_layers: int = 2,
                 max_len: int = 512, dropout: float = 0.0, norm_first: bool = True):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_ff", d_ff), ("n_layers", n_layers), ("max_len", max_len)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        self.vocab_size, self.d_model, self.max_len, self.norm_first = vocab_size, d_model, max_len, norm_first
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = PositionalEncoding(d_model, max_len, dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.out = nn.Linear(d_model, vocab_size)
        for p in self.parameters():  # Xavier-uniform matrices, as in transformer_lib.model
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.out.weight = self.embed.weight

    def _check_ids(self, ids: torch.Tensor, start: int) -> None:
        check_token_ids("ids", ids, self.vocab_size)
        if ids.shape[1] == 0:
            raise ValueError("ids must hold at least one position, got shape (batch, 0)")
        if start + ids.shape[1] > self.max_len:
            raise ValueError(f"positions {start}..{start + ids.shape[1] - 1} go past max_len={self.max_len} "
                             "of the model: give a shorter sequence or build the model with a larger max_len")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (batch, T) -> logits (batch, T, vocab_size); position t sees positions <= t."""
        self._check_ids(ids, 0)
        h = self.pos(self.embed(ids) * math.sqrt(self.d_model))  # (B, T, d_model)
        mask = causal_mask(ids.shape[1], device=ids.device)  # (T, T), True = may attend
        for layer in self.layers:
            h = layer(h, mask)
        return self.out(self.norm(h))

    def new_cache(self) -> KVCache:
        """An empty cache for `step`."""
        return KVCache(len(self.layers))

    def step(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits for new tokens that follow the cached ones, and the cache extended by them.

        ids (batch, n) are the tokens at positions cache.length .. cache.length + n - 1; only
        their queries, keys and values are computed, and they attend to the cached keys and
        values plus their own (causally). Returns logits (batch, n, vocab_size), equal (up to
        rounding) to forward(all tokens so far)[:, -n:]. Uses the layers' own weights.
        """
        if not isinstance(cache, KVCache) or len(cache.keys) != len(self.layers):
            raise TypeError(f"cache must be a KVCache with {len(self.layers)} layers (model.new_cache()), got {cache!r}")
        start = cache.length
        self._check_ids(ids, start)
        if cache.batch_size is not None and cache.batch_size != ids.shape[0]:
            raise ValueError(f"ids has batch size {ids.shape[0]} but the cache holds {cache.batch_size} sequences")
        n = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d_model)
        h = self.pos.dropout(x + self.pos.pe[start:start + n].to(x.dtype))  # positions start.. of the table
        # New position start + i may attend to every position j <= start + i (all cached ones).
        mask = None if n == 1 else torch.arange(start + n, device=ids.device) <= start + torch.arange(n, device=ids.device)[:, None]
        for index, layer in enumerate(self.layers):
            h = layer.norm1(h, lambda z: self._cached_attention(layer, z, cache, index, mask))
            h = layer.norm2(h, layer.ff)
        return self.out(self.norm(h))

    @staticmethod
    def _cached_attention(layer: EncoderLayer, z: torch.Tensor, cache: KVCache, index: int, mask) -> torch.Tensor:
        """Multi-head self-attention of the new positions z (B, n, d_model) over cache + z."""
        attn = layer.self_attn
        q = attn.split_heads(attn.w_q(z))  # (B, h, n, d_k): only the new queries
        k, v = cache.append(index, attn.split_heads(attn.w_k(z)), attn.split_heads(attn.w_v(z)))  # (B, h, t, d_k)
        rule = getattr(attn, "attention_fn", scaled_dot_product_attention)  # a swapped-in rule is honoured
        if rule is scaled_dot_product_attention and attn.fused:
            out = fused_attention(q, k, v, mask, dropout_p=attn.dropout.p if attn.training else 0.0)
        else:
            out, _ = rule(q, k, v, mask, attn.dropout)
        return attn.w_o(attn.merge_heads(out))


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row (last dimension) and set the others to -inf.

    logits (..., V) -> (..., V). Exactly k survive per row, so softmax then puts all the
    probability on the k most likely tokens (Fan et al. 2018, arXiv:1805.04833).
    """
    check_tensor("logits", logits, floating=True)
    check_positive_int("top_k", k)
    if k > logits.shape[-1]:
        raise ValueError(f"top_k={k} is larger than the vocabulary ({logits.shape[-1]} logits per row)")
    values, indices = logits.topk(k, dim=-1)
    return torch.full_like(logits, float("-inf")).scatter(-1, indices, values)


def next_token(logits: torch.Tensor, *, sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Choose the next token of each row from its logits (batch, V); returns ids (batch, 1).

    Greedy (sample=False): the argmax. Sampling: draw from softmax(filtered logits / temperature),
    where a temperature below 1 sharpens the distribution and above 1 flattens it, and top_k
    first keeps only the k most likely tokens. `generator` fixes the random draws.
    """
    check_tensor("logits", logits, ndim=2, floating=True)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if not sample:
        return logits.argmax(dim=-1, keepdim=True)
    scaled = logits / temperature
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    return torch.multinomial(scaled.softmax(dim=-1), 1, generator=generator)


def generate(model: CausalLM, prompt: torch.Tensor, max_new_tokens: int, *, sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> torch.Tensor:
    """Extend `prompt` (batch, T) by `max_new_tokens` tokens; returns (batch, T + max_new_tokens).

    Each new token is chosen by `next_token` (greedy by default; see there for sampling) from
    the logits at the last position. With `use_cache` the prompt runs once through
    `model.step` and every later step feeds one token; without it every step runs `model` on
    the whole sequence so far. Both give the same tokens (greedy) and the same draws (sampling
    with the same generator), the first much faster on long outputs. Runs in eval mode
    without gradients and restores the model's mode.
    """
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a transformer_lib.lm.CausalLM, got {type(model).__name__}")
    check_token_ids("prompt", prompt, model.vocab_size)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must hold at least one token per row, got shape (batch, 0)")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if prompt.shape[1] + max_new_tokens > model.max_len:
        raise ValueError(f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} exceeds the model's "
                         f"max_len={model.max_len}")
    choose = dict(sample=sample, temperature=temperature, top_k=top_k, generator=generator)
    next_token(torch.zeros(1, model.vocab_size), **{**choose, "sample": False})  # check the options up front
    with eval_mode(model), torch.no_grad():
        ids = prompt
        cache = model.new_cache() if use_cache else None
        logits = model.step(prompt, cache)[:, -1] if use_cache else None
        for i in range(max_new_tokens):
            if not use_cache:
                logits = model(ids)[:, -1]  # the whole prefix again: O(t) positions at step t
            new = next_token(logits, **choose)  # (B, 1)
            ids = torch.cat([ids, new], dim=1)
            if use_cache and i < max_new_tokens - 1:
                logits = model.step(new, cache)[:, -1]  # one position, attending to the cache
    return ids
