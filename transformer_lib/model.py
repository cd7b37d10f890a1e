"""The full encoder-decoder Transformer (Vaswani et al. 2017, figure 1 and section 3)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ._checks import (check_bool, check_choice, check_config, check_positive_int, check_probability, check_tensor,
                      check_token_ids, entry_point)
from .attention import check_mask
from .kv_cache import DecoderCache
from .layers import Decoder, Encoder
from .masks import causal_mask, padding_mask, target_mask
from .positional import LearnedPositionalEncoding, PositionalEncoding
from .special_tokens import PAD_ID

#: The positional schemes `Embeddings` knows: added to the embeddings (sinusoidal, learned), or
#: nothing added here ("rope": queries and keys are rotated inside attention; "none").
POSITIONS = ("sinusoidal", "learned", "rope", "none")


class Embeddings(nn.Embedding):
    """The input of the first layer: E[x] * sqrt(d_model) + positions, then dropout
    (paper, sections 3.4, 3.5 and 5.4).

    ids (batch, T), at positions start .. start + T - 1 -> (batch, T, d_model). `weight` is the
    embedding matrix E (vocab_size, d_model), which a tied output layer reuses. `positions`
    names the positional scheme (`POSITIONS`): the paper's sinusoids, learned vectors, or
    nothing added here ("rope", which rotates queries and keys inside attention, or "none").
    `scale=False` drops the sqrt(d_model) factor (as most decoder-only models do).
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int = 512, dropout: float = 0.0,
                 positions: str = "sinusoidal", scale: bool = True):
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_choice("positions", positions, POSITIONS)
        check_bool("scale", scale)
        super().__init__(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.pos = {"sinusoidal": PositionalEncoding, "learned": LearnedPositionalEncoding}.get(positions)
        self.pos = self.pos(d_model, max_len) if self.pos is not None else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        x = super().forward(ids) * self.scale  # (B, T, d_model)
        if self.pos is not None:
            x = self.pos(x, start)  # + PE[start : start + T]
        return self.dropout(x)


def init_weights(model: nn.Module) -> None:
    """Xavier-uniform for every matrix (every parameter with 2 or more dimensions), as the
    paper's reference code does; biases and norm gains stay as PyTorch sets them. With
    PyTorch's N(0, 1) embedding init, embeddings times sqrt(d_model) would drown the positional
    encoding of a small model. A learned positional table is not a projection: it keeps its own
    initialisation (`LearnedPositionalEncoding.reset_parameters`), drawn after the matrices."""
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    for m in model.modules():
        if isinstance(m, LearnedPositionalEncoding):
            m.reset_parameters()


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters, named as in the paper (Table 3). The defaults are the base model."""

    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6  # N, in the encoder and in the decoder
    dropout: float = 0.1  # P_drop
    max_len: int = 512
    norm_first: bool = False  # post-norm, as in the paper
    share_embeddings: bool = False  # one embedding for source and target (needs one shared vocabulary)
    tie_output: bool = False  # the output projection reuses the target embedding matrix

    @classmethod
    def base(cls, vocab: int, **overrides) -> "TransformerConfig":
        """The paper's base model with one shared vocabulary (37,000 BPE tokens for English-German)."""
        return cls(vocab, vocab, share_embeddings=True, tie_output=True, **overrides)

    @classmethod
    def big(cls, vocab: int, **overrides) -> "TransformerConfig":
        """The paper's big model: d_model 1024, 16 heads, d_ff 4096, P_drop 0.3."""
        settings = dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3) | overrides
        return cls(vocab, vocab, share_embeddings=True, tie_output=True, **settings)

    def __post_init__(self) -> None:
        for name in ("src_vocab", "tgt_vocab", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        for name in ("norm_first", "share_embeddings", "tie_output"):
            check_bool(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                f"share_embeddings needs one vocabulary: src_vocab={self.src_vocab} != tgt_vocab={self.tgt_vocab}"
            )


class EncoderDecoder(nn.Module):
    """The two stacks without embeddings or output layer: what `torch.nn.Transformer` holds
    (`interop.from_torch(nn.Transformer(...))` gives one with PyTorch's weights).

    src: (batch, S, d_model), tgt: (batch, T, d_model) embeddings -> (batch, T, d_model).
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None) -> torch.Tensor:
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, memory, tgt_mask, memory_mask)


class Transformer(nn.Module):
    """Token ids in, next-token logits out.

    src (batch, S) and tgt (batch, T) token ids -> logits (batch, T, tgt_vocab), where
    logits[:, t] scores the token that follows tgt[:, :t+1]. The probabilities are
    softmax(logits); the loss works on logits directly.

    Pieces, in the paper's order: embeddings multiplied by sqrt(d_model) (section 3.4),
    positional encoding (3.5), encoder and decoder stacks (3.1), final linear layer (3.4).
    With `share_embeddings` one matrix embeds source and target; with `tie_output` the output
    layer reuses the target embedding matrix (as the paper does, after Press and Wolf 2017).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        check_config(config, TransformerConfig)
        self.config = c = config
        self.src_embed = Embeddings(c.src_vocab, c.d_model, c.max_len, c.dropout)
        self.tgt_embed = self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab, c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder(c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first)
        self.decoder = Decoder(c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first)
        self.out = nn.Linear(c.d_model, c.tgt_vocab, bias=not c.tie_output)
        init_weights(self)
        if c.tie_output:
            self.out.weight = self.tgt_embed.weight

    def _check_encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> None:
        self._check_ids("src", src, self.config.src_vocab)
        check_mask(src_mask, (src.shape[0], self.config.n_heads, src.shape[1], src.shape[1]), "src_mask")

    @entry_point(_check_encode)
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, S) source ids -> memory (batch, S, d_model). Padding is masked by default."""
        if src_mask is None:
            src_mask = padding_mask(src, PAD_ID)
        return self.encoder(self.src_embed(src), src_mask)

    def _check_decode(self, tgt, memory, src_mask=None, tgt_mask=None, cache=None) -> None:
        check_tensor("tgt", tgt, ndim=2)
        start = self.decoder.check_context(tgt.shape[0], tgt.shape[1], memory, tgt_mask, src_mask, cache)
        self._check_ids("tgt", tgt, self.config.tgt_vocab, start)

    @entry_point(_check_decode)
    def decode(self, tgt, memory, src_mask=None, tgt_mask=None, cache: list[DecoderCache] | None = None) -> torch.Tensor:
        """(batch, T) target ids and memory (batch, S, d_model) -> logits (batch, T, tgt_vocab).

        tgt_mask defaults to the causal mask combined with the target's padding mask; src_mask
        (the source padding mask) is needed whenever the source batch holds padding.

        With `cache` (from `new_cache`: generation), tgt holds only the tokens at positions
        cache.length .. cache.length + T - 1, after the cached ones; the layers read and extend
        the cache, and tgt_mask defaults to the causal mask over the cached and new positions.
        The logits equal those of the whole prefix at the new positions (up to rounding)."""
        start = 0 if cache is None else cache[0].length
        if tgt_mask is None:
            T = tgt.shape[1]
            tgt_mask = (target_mask(tgt, PAD_ID) if cache is None
                        else None if T == 1 else causal_mask(T, device=tgt.device, k_len=start + T))
        h = self.decoder(self.tgt_embed(tgt, start), memory, tgt_mask, src_mask, cache)  # (B, T, d_model)
        return self.out(h)

    def _check_forward(self, src, tgt, src_mask=None, tgt_mask=None) -> None:
        self._check_encode(src, src_mask)
        self._check_ids("tgt", tgt, self.config.tgt_vocab)
        if tgt.shape[0] != src.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
        B, h, S, T = src.shape[0], self.config.n_heads, src.shape[1], tgt.shape[1]
        check_mask(src_mask, (B, h, T, S), "src_mask")  # it also masks cross-attention
        check_mask(tgt_mask, (B, h, T, T), "tgt_mask")

    @entry_point(_check_forward)
    def forward(self, src, tgt, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """src (batch, S), tgt (batch, T) token ids -> logits (batch, T, tgt_vocab)."""
        if src_mask is None:
            src_mask = padding_mask(src, PAD_ID)
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def new_cache(self, batch_size: int, src_len: int, max_len: int | None = None) -> list[DecoderCache]:
        """Empty caches for generating up to `max_len` (default: the model's) target positions
        for `batch_size` sources of `src_len` positions: one `DecoderCache` per decoder layer."""
        max_len = self.config.max_len if max_len is None else max_len
        for name, value in (("batch_size", batch_size), ("src_len", src_len), ("max_len", max_len)):
            check_positive_int(name, value)
        if max_len > self.config.max_len:
            raise ValueError(f"max_len={max_len} is longer than the model's max_len={self.config.max_len}")
        return self.decoder.new_cache(batch_size, src_len, max_len)

    def _check_ids(self, name: str, ids, vocab_size: int, start: int = 0) -> None:
        """Token ids (batch, T), T >= 1, in the vocabulary, at positions that fit the table."""
        check_token_ids(name, ids, vocab_size)
        if ids.shape[1] == 0:
            raise ValueError(f"{name} must hold at least one position per row, got shape {tuple(ids.shape)}")
        if start + ids.shape[1] > self.config.max_len:
            raise ValueError(f"{name} reaches position {start + ids.shape[1] - 1}, past the model's "
                             f"max_len={self.config.max_len} (its positional table)")

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self.config).items())


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """The number of distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)

