"""The full encoder-decoder Transformer (Vaswani et al. 2017, figure 1 and section 3)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ._checks import check_positive_int, check_probability, check_token_ids
from .layers import Decoder, Encoder
from .masks import padding_mask, target_mask
from .positional import PositionalEncoding


@dataclass
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
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab, c.d_model)
        self.pos = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder(c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first)
        self.decoder = Decoder(c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first)
        self.out = nn.Linear(c.d_model, c.tgt_vocab, bias=not c.tie_output)
        self._init_weights()
        if c.tie_output:
            self.out.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix, as the paper's reference code does; biases stay as
        PyTorch sets them. With PyTorch's N(0, 1) embedding init, embeddings times sqrt(d_model)
        would drown the positional encoding of a small model."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """(batch, S) ids -> (batch, S, d_model): embedding * sqrt(d_model) + PE."""
        return self.pos(self.src_embed(src) * math.sqrt(self.config.d_model))

    def embed_tgt(self, tgt: torch.Tensor) -> torch.Tensor:
        """(batch, T) ids -> (batch, T, d_model)."""
        return self.pos(self.tgt_embed(tgt) * math.sqrt(self.config.d_model))

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, S) source ids -> memory (batch, S, d_model). Padding is masked by default."""
        check_token_ids("src", src, self.config.src_vocab)
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        return self.encoder(self.embed_src(src), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """(batch, T) target ids and memory (batch, S, d_model) -> logits (batch, T, tgt_vocab).

        tgt_mask defaults to the causal mask combined with the target's padding mask; src_mask
        (the source padding mask) is needed whenever the source batch holds padding.
        """
        check_token_ids("tgt", tgt, self.config.tgt_vocab)
        if tgt_mask is None:
            tgt_mask = target_mask(tgt, self.config.pad_id)
        h = self.decoder(self.embed_tgt(tgt), memory, tgt_mask, src_mask)  # (B, T, d_model)
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

