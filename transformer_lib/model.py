"""The full encoder-decoder Transformer (Vaswani et al. 2017, figure 1 and section 3)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ._checks import check_bool, check_choice, check_config, check_non_negative_int, check_positive_int, check_probability, check_token_ids
from .layers import Decoder, Encoder
from .masks import padding_mask, target_mask
from .positional import LearnedPositionalEncoding, PositionalEncoding

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
    encoding of a small model."""
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


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
    pad_id: int = 0

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
        check_non_negative_int("pad_id", self.pad_id)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                f"share_embeddings needs one vocabulary: src_vocab={self.src_vocab} != tgt_vocab={self.tgt_vocab}"
            )
        if not 0 <= self.pad_id < min(self.src_vocab, self.tgt_vocab):
            raise ValueError(f"pad_id={self.pad_id} must be a token id of both vocabularies")


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

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, S) source ids -> memory (batch, S, d_model). Padding is masked by default."""
        check_token_ids("src", src, self.config.src_vocab)
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """(batch, T) target ids and memory (batch, S, d_model) -> logits (batch, T, tgt_vocab).

        tgt_mask defaults to the causal mask combined with the target's padding mask; src_mask
        (the source padding mask) is needed whenever the source batch holds padding.
        """
        check_token_ids("tgt", tgt, self.config.tgt_vocab)
        if tgt_mask is None:
            tgt_mask = target_mask(tgt, self.config.pad_id)
        h = self.decoder(self.tgt_embed(tgt), memory, tgt_mask, src_mask)  # (B, T, d_model)
        return self.out(h)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """src (batch, S), tgt (batch, T) token ids -> logits (batch, T, tgt_vocab)."""
        memory = self.encode(src, src_mask)  # checks src
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self.config).items())


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """The number of distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)

