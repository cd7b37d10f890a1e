"""Chapter 7's study of post-norm against pre-norm: a small encoder learns to reverse 8 symbols,
trained through the book's one loop (`training.train`), and a running mean smooths its loss."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_non_negative_int, check_positive_int
from ..layers import Encoder
from ..model import Embeddings, init_weights
from ..training import TrainConfig, train

__all__ = ["running_mean", "reverse_batch", "ReverseTagger", "tagging_loss", "train_reverse"]


def running_mean(values: Sequence[float], k: int = 10) -> list[float]:
    """Mean of the last `k` values at every index (fewer at the start): a smoothed loss curve."""
    check_positive_int("k", k)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= k:
            total -= values[i - k]
        out.append(total / min(i + 1, k))
    return out


def reverse_batch(generator: torch.Generator, batch_size: int = 32, seq_len: int = 8, n_symbols: int = 8):
    """A batch of random symbol sequences and their reversals: x, y of shape (batch_size, seq_len)."""
    x = torch.randint(0, n_symbols, (batch_size, seq_len), generator=generator, device=generator.device)
    return x, x.flip(1)


class ReverseTagger(nn.Module):
    """`Embeddings` (times sqrt(d_model), sinusoidal positions) -> `tl.Encoder` -> a linear read-out.

    ids (B, T) -> logits (B, T, n_symbols). No dropout; every matrix Xavier-uniform.
    """

    def __init__(self, n_layers: int, norm_first: bool, d_model: int = 32, n_heads: int = 4, d_ff: int = 64,
                 seq_len: int = 8, n_symbols: int = 8):
        super().__init__()
        self.embed = Embeddings(n_symbols, d_model, max_len=seq_len)
        self.encoder = Encoder(d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, dropout=0.0,
                               norm_first=norm_first)
        self.read_out = nn.Linear(d_model, n_symbols)
        init_weights(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.read_out(self.encoder(self.embed(ids)))


def tagging_loss(model: nn.Module, batch, cfg: TrainConfig) -> torch.Tensor:
    """Cross-entropy of a tagger's logits (B, T, n) against the tags y (B, T) of a batch (x, y):
    the `loss_fn` of `training.train` for the reversal task."""
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def train_reverse(n_layers: int, norm_first: bool, warmup: int, steps: int = 200, lr: float = 1e-2,
                  seed: int = 0) -> list[float]:
    """Train a `ReverseTagger` to reverse 8 symbols out of 8; return the loss of every step.

    The book's one loop, `training.train`, with Adam (betas 0.9, 0.98 as in Vaswani et al.
    2017, section 5.3; PyTorch's epsilon 1e-8), learning rate `lr` ramped up linearly over the
    first `warmup` steps (0: no warm-up), no clipping, and `steps` batches of 32 drawn from a
    generator seeded with 1, so every run sees the same batches. Chance level is ln 8 = 2.079.
    """
    check_positive_int("steps", steps)
    check_non_negative_int("warmup", warmup)
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(1)
    batches = [reverse_batch(data) for _ in range(steps)]
    model = ReverseTagger(n_layers, norm_first)
    cfg = TrainConfig(max_steps=steps, schedule="linear_warmup" if warmup else "constant", warmup=max(warmup, 1),
                      lr=lr, betas=(0.9, 0.98), adam_eps=1e-8, clip_norm=None, progress=False)
    return train(model, batches, cfg=cfg, loss_fn=tagging_loss).loss
