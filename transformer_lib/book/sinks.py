"""Attention sinks and streaming windows, measured on the book's small language models.

Xiao et al. 2023 ("Efficient Streaming Language Models with Attention Sinks", arXiv:2309.17453)
found that large pretrained language models put a large share of their attention on the first
few tokens of a sequence, whatever those tokens are: a softmax must spend all of its weight
somewhere, and a query with nothing relevant to read parks it there. A sliding window that
drops those first tokens then fails; StreamingLLM keeps them (4 "sink" tokens) next to the
most recent ones, with positions numbered inside the cache.

- `sink_scores`: per layer and head, the mean weight that queries at positions >= `start` put
  on the first `n_first` positions; `uniform_share` is the same number for uniform attention;
- `relative_weight`: per head, the weight on chosen keys (a character, say) as a multiple of
  uniform attention;
- `streaming_inputs`: for every target position, the cache a streaming model reads (the first
  `n_sink` tokens and the most recent ones), as one batch;
- `streaming_loss`: the loss at each position when every prediction reads only such a cache,
  the model run afresh on it (Xiao et al.'s sliding window with recomputation, their figure 1c:
  a fresh first token in every window, so it works even for models with sinks; a real cache
  that evicts keys computed earlier is not what this measures);
  `banded_loss`, the same with a banded causal mask instead (absolute positions kept).

Every function takes weights recorded by `transformer_lib.record_attention` or a
`lm.CausalLM`; none changes the model.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from ..lm import CausalLM
from ..runtime import eval_mode

__all__ = ["sink_scores", "uniform_share", "relative_weight", "streaming_inputs", "streaming_loss", "banded_loss",
           "plot_last_query"]


def _check_weights(weights: torch.Tensor, start: int) -> None:
    if not isinstance(weights, torch.Tensor) or weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be attention weights of shape (batch, n_heads, T, T), got {shape}")
    T = weights.shape[-1]
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < T:
        raise ValueError(f"start must be an integer in [0, {T - 1}] (a query position), got {start!r}")


def _check_count(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def sink_scores(weights, n_first: int = 1, start: int = 8) -> torch.Tensor:
    """The mean attention weight that queries at positions >= `start` put on the keys at
    positions 0 .. n_first - 1 (summed over those keys), averaged over the batch and the queries.

    weights: (B, n_heads, T, T) causal attention weights, or a dict of them by layer name (as
    `transformer_lib.record_attention` returns them, layers in order). Returns (n_heads,), or
    (n_layers, n_heads) for a dict. Compare with `uniform_share(T, n_first, start)`: a head
    that spreads its weight evenly over the keys it sees scores exactly that, a sink far more
    (Xiao et al. 2023, figure 2: beyond its first two layers, Llama-2-7B puts most of its
    attention on the first token).
    """
    if isinstance(weights, Mapping):
        if not weights:
            raise ValueError("weights must hold at least one layer's attention weights")
        return torch.stack([sink_scores(w, n_first, start) for w in weights.values()])
    _check_weights(weights, start)
    _check_count("n_first", n_first, 1, weights.shape[-1])
    return weights[:, :, start:, :n_first].sum(-1).mean((0, 2))


def uniform_share(length: int, n_first: int = 1, start: int = 8) -> float:
    """What `sink_scores` gives for uniform causal attention over `length` positions: the mean
    over query positions t = start .. length - 1 of min(n_first, t + 1) / (t + 1)."""
    _check_count("length", length, 1, 10 ** 9)
    _check_count("start", start, 0, length - 1)
    _check_count("n_first", n_first, 1, length)
    t = torch.arange(start, length, dtype=torch.float64)
    return float((t + 1).clamp(max=n_first).div(t + 1).mean())


def relative_weight(weights: torch.Tensor, select: torch.Tensor, start: int = 8) -> torch.Tensor:
    """Per head, the mean weight a query at position t >= `start` puts on a key it can see and
    that `select` marks, times t + 1 (the number of keys it sees): 1 is what uniform attention
    gives, 2 means twice as much as uniform. weights (B, n_heads, T, T); select (B, T) bool,
    True for the keys to average over (e.g. `ids == space`). Returns (n_heads,); NaN for a head
    if no selected key is visible to any of those queries."""
    _check_weights(weights, start)
    B, _, T, _ = weights.shape
    if not isinstance(select, torch.Tensor) or select.dtype != torch.bool or tuple(select.shape) != (B, T):
        shape = tuple(select.shape) if isinstance(select, torch.Tensor) else type(select).__name__
        raise ValueError(f"select must be a bool tensor of shape (batch={B}, T={T}), got {shape}")
    t = torch.arange(T, device=weights.device)
    visible = t[None, :] <= t[start:, None]  # (Q, T): key k is visible to query t
    chosen = (select[:, None, :] & visible[None]).to(weights.dtype)  # (B, Q, T)
    scaled = weights[:, :, start:, :] * (t[start:, None] + 1).to(weights.dtype)  # (B, h, Q, T)
    return (scaled * chosen[:, None]).sum((0, 2, 3)) / chosen.sum()


def streaming_inputs(x: torch.Tensor, window: int, n_sink: int = 0, start: int | None = None) -> torch.Tensor:
    """The caches a streaming model reads, one per target position, as one batch.

    x: (B, T) token ids. For each position t = start .. T - 1 (start defaults to window - 1, the
    first position whose cache is full; it may not be smaller), the row holds the first
    `n_sink` tokens x[:, :n_sink] followed by the most recent window - n_sink tokens
    x[:, t - window + n_sink + 1 : t + 1], so the last token is x[:, t]. A model reading a row
    numbers its positions 0 .. window - 1 inside the cache, as StreamingLLM does (Xiao et al.
    2023, section 3.2). n_sink = 0 is a plain sliding window of the last `window` tokens.
    Returns (B, T - start, window).
    """
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.dtype.is_floating_point:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be token ids of shape (batch, T), got {shape}")
    T = x.shape[1]
    _check_count("window", window, 1, T)
    _check_count("n_sink", n_sink, 0, window - 1)
    start = window - 1 if start is None else start
    _check_count("start", start, window - 1, T - 1)
    t = torch.arange(start, T, device=x.device)  # (R,) the target positions
    recent = t[:, None] + torch.arange(n_sink - window + 1, 1, device=x.device)  # (R, window - n_sink)
    sinks = torch.arange(n_sink, device=x.device).expand(len(t), n_sink)  # (R, n_sink)
    return x[:, torch.cat([sinks, recent], dim=1)]  # (B, R, window)


@torch.no_grad()
def streaming_loss(model: CausalLM, x: torch.Tensor, y: torch.Tensor, window: int, n_sink: int = 0,
                   start: int = 0, chunk: int = 4096) -> torch.Tensor:
    """The cross-entropy at positions start .. T - 1, averaged over the batch, when the
    prediction at position t reads only the cache `streaming_inputs` builds for it (before
    position window - 1 the cache is not full yet and holds the whole prefix, as a plain run).

    model: a `lm.CausalLM`; x, y: (B, T) inputs and targets. Each cache is one row of a batched
    forward pass of `chunk` rows at a time, of which only the last position's logits are
    computed. Returns (T - start,).
    """
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a lm.CausalLM, got {type(model).__name__}")
    if not isinstance(y, torch.Tensor) or not isinstance(x, torch.Tensor) or x.shape != y.shape:
        raise ValueError(f"x and y must be token ids of the same shape (batch, T), got "
                         f"{getattr(x, 'shape', x)} and {getattr(y, 'shape', y)}")
    T = x.shape[-1] if x.ndim == 2 else 0
    _check_count("start", start, 0, max(T - 1, 0))
    _check_count("chunk", chunk, 1, 10 ** 9)
    full_from = max(start, window - 1) if isinstance(window, int) else start
    rows = streaming_inputs(x, window, n_sink, full_from)  # (B, R, window); checks window, n_sink
    losses = []
    with eval_mode(model):
        if start < window - 1:  # the cache still holds the whole prefix: a plain causal run
            logits = model(x[:, :window - 1])[:, start:]  # (B, window - 1 - start, V)
            losses.append(F.cross_entropy(logits.transpose(1, 2), y[:, start:window - 1],
                                          reduction="none").mean(0))
        flat = rows.reshape(-1, window)  # (B * R, window)
        keep_last = model.norm.register_forward_hook(lambda module, args, out: out[:, -1:])
        try:  # the final norm passes on only the last position, so only its logits are computed
            last = torch.cat([model(flat[i:i + chunk])[:, -1] for i in range(0, len(flat), chunk)])
        finally:
            keep_last.remove()
        targets = y[:, full_from:].reshape(-1)  # row order: batch, then target position
        loss = F.cross_entropy(last, targets, reduction="none").view(x.shape[0], -1).mean(0)
        losses.append(loss)
    return torch.cat(losses)


@torch.no_grad()
def banded_loss(model: CausalLM, x: torch.Tensor, y: torch.Tensor, window: int) -> torch.Tensor:
    """The cross-entropy at each position, averaged over the batch, when every layer lets each
    position attend only to itself and the window - 1 positions before it (a banded causal mask,
    as Mistral 7B's sliding window; Jiang et al. 2023), positions counted from the start of x as
    usual. Stacked layers reach further back: L layers see up to L (window - 1) positions.
    model: a `lm.CausalLM`; x, y: (B, T). Returns (T,)."""
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a lm.CausalLM, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"x and y must be token ids of the same shape (batch, T), got "
                         f"{getattr(x, 'shape', x)} and {getattr(y, 'shape', y)}")
    _check_count("window", window, 1, x.shape[1])
    i = torch.arange(x.shape[1], device=x.device)
    band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)  # (T, T)
    with eval_mode(model):
        h = model.embed(x)
        for layer in model.layers:
            h = layer(h, band)
        logits = model.out(model.norm(h))  # (B, T, V)
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)


def plot_last_query(weights, length: int):
    """One panel per layer of `weights` ({layer name: (B, heads, T, T)}, from
    `record_attention`): the weight that the last query (position T - 1) puts on each key,
    averaged over the batch, as a multiple of uniform attention (1 / T), one line per head, on a
    log scale. A sink would stand out at the first positions. Returns the figure."""
    import matplotlib.pyplot as plt

    if not isinstance(weights, dict) or not weights:
        raise ValueError("weights: expected {layer name: (B, heads, T, T)} as record_attention gives")
    colours = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
    fig, axes = plt.subplots(1, len(weights), figsize=(4.75 * len(weights), 3.2), sharey=True, squeeze=False)
    axes = axes[0]
    for layer, (ax, w) in enumerate(zip(axes, weights.values())):
        last = w[:, :, -1, :].mean(0) * length  # (heads, T): 1 is uniform
        for h in range(last.shape[0]):
            ax.plot(range(length), last[h], color=colours[h % len(colours)], marker=".", label=f"head {h}")
        ax.axhline(1, color="0.4", ls="--", lw=1)
        ax.text(0, 1.25, "uniform", fontsize=9, color="0.3")
        ax.set(xlabel=f"key position (the query is at {length - 1})", yscale="log", title=f"layer {layer}")
    axes[0].set_ylabel("weight / uniform")
    axes[-1].legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
