"""The opening pictures of chapters 7 to 10: the encoder layer, the masks, the decoder layer and
the whole encoder-decoder, drawn with the box-and-arrow primitives of `diagrams`.

Each function returns a matplotlib Figure at most 6.5 inches wide with no text smaller than
9 points, so that every label stays legible on the book's page (about 12 pixels at a 1280-pixel
window). The colours are the Okabe-Ito ones of `diagrams.COLOURS`, one per kind of part, as in
the model map.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..masks import causal_mask
from .viz import draw_mask
from .diagrams import COLOURS, arrow, box

__all__ = ["encoder_layer_figure", "mask_figure", "decoder_layer_figure", "full_model_figure"]

#: The smallest font size, in points, of any text in these figures.
MIN_FONT = 9.0
#: The widest figure, in inches (the page's code column at 1280 pixels).
MAX_WIDTH = 6.5


def _figure(ncols: int, height: float, width: float = MAX_WIDTH, **kw):
    import matplotlib.pyplot as plt  # on first use: `import transformer_lib` stays light

    fig, axes = plt.subplots(1, ncols, figsize=(width, height), **kw)
    return fig, axes


def _column(ax, stages, width: float, height: float, residuals):
    """Boxes bottom to top at x = 0, straight arrows between them, and each residual connection
    as a bend on the right from the y of its fork to the y of its sum."""
    for y, text, colour, text_colour in stages:
        box(ax, 0, y, text, colour, width=width, height=height, fontsize=MIN_FONT,
            text_colour=text_colour)
    for (y0, *_), (y1, *_) in zip(stages, stages[1:]):
        arrow(ax, [(0, y0 + height / 2), (0, y1 - height / 2)])
    right = width / 2 + 0.3
    for y_from, y_to in residuals:
        arrow(ax, [(0, y_from), (right, y_from), (right, y_to), (width / 2 + 0.02, y_to)],
              colour="#444444", lw=1.1)


def encoder_layer_figure():
    """Chapter 7: one encoder layer as the paper draws it (post-norm, left) and as most models
    since GPT-2 build it (pre-norm, right), residual connections on the right of each."""
    fig, axes = _figure(2, 4.6)
    io, norm, attn, ffn = COLOURS["io"], COLOURS["norm"], COLOURS["attention"], COLOURS["ffn"]
    post = [(0.0, "input x: (B, T, d_model)", io, "black"),
            (1.3, "multi-head self-attention", attn, "black"),
            (2.6, "add, then LayerNorm", norm, "black"),
            (3.9, "feed-forward network", ffn, "black"),
            (5.2, "add, then LayerNorm", norm, "black"),
            (6.5, "output: (B, T, d_model)", io, "black")]
    _column(axes[0], post, 2.4, 0.6, [(0.65, 2.6), (3.25, 5.2)])
    axes[0].set_title("post-norm (the paper)", fontsize=10)
    pre = [(0.0, "input x", io, "black"),
           (0.93, "LayerNorm", norm, "black"),
           (1.86, "multi-head self-attention", attn, "black"),
           (2.79, "add", "white", "black"),
           (3.72, "LayerNorm", norm, "black"),
           (4.65, "feed-forward network", ffn, "black"),
           (5.58, "add", "white", "black"),
           (6.51, "output", io, "black")]
    _column(axes[1], pre, 2.4, 0.52, [(0.47, 2.79), (3.26, 5.58)])
    axes[1].text(0, 7.0, "(after the last layer: one more LayerNorm)", ha="center",
                 fontsize=MIN_FONT)
    axes[1].set_title("pre-norm (common today)", fontsize=10)
    for ax in axes:
        ax.set(xlim=(-1.45, 1.75), ylim=(-0.45, 7.25))
        ax.axis("off")
    fig.tight_layout(w_pad=0.5)
    return fig


def mask_figure(tokens: Sequence[str], pad: str = "<pad>"):
    """Chapter 8: the padding mask, the causal mask and their AND (the target mask) of one
    right-padded sentence, queries down the side and keys along the top; blue = may attend."""
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens) or not tokens:
        raise ValueError(f"tokens must be a non-empty list of strings, got {tokens!r}")
    tokens = list(tokens)
    n = len(tokens)
    real = torch.tensor([t != pad for t in tokens])
    padding = real[None, :].expand(n, n)  # the same row of allowed keys for every query
    causal = causal_mask(n)
    fig, axes = _figure(3, 2.9)
    for ax, mask, title in zip(axes, (padding, causal, padding & causal),
                               ("padding mask", "causal mask", "target mask = both")):
        draw_mask(ax, mask, tokens, tokens, title)
        ax.title.set_fontsize(10)
        ax.tick_params(labelsize=MIN_FONT)
        ax.set_xlabel("key", fontsize=MIN_FONT)
        ax.set_ylabel("query" if ax is axes[0] else "", fontsize=MIN_FONT)
    fig.tight_layout(w_pad=0.4)
    return fig


def decoder_layer_figure(n_drawn: int = 3):
    """Chapter 9: one decoder layer with the memory feeding its cross-attention (left), and the
    two stacks, the last encoder layer's output going to every decoder layer (right)."""
    fig, axes = _figure(2, 5.0, gridspec_kw={"width_ratios": [1.1, 1.0]})
    io, norm = COLOURS["io"], COLOURS["norm"]
    ax = axes[0]
    stages = [(0.0, "target so far", io, "black"),
              (1.15, "masked self-attention", COLOURS["masked"], "white"),
              (2.3, "add, then LayerNorm", norm, "black"),
              (3.45, "cross-attention", COLOURS["cross"], "white"),
              (4.6, "add, then LayerNorm", norm, "black"),
              (5.75, "feed-forward network", COLOURS["ffn"], "black"),
              (6.9, "add, then LayerNorm", norm, "black"),
              (8.05, "output: (B, T, d_model)", io, "black")]
    _column(ax, stages, 2.2, 0.56, [(0.575, 2.3), (2.875, 4.6), (5.175, 6.9)])
    box(ax, -2.2, 3.45, "memory\n(B, S, d_model)", io, width=1.55, height=0.9,
        fontsize=MIN_FONT)
    arrow(ax, [(-1.4, 3.45), (-1.12, 3.45)], colour=COLOURS["cross"], lw=2)
    ax.text(-2.2, 4.1, "keys, values", ha="center", fontsize=MIN_FONT, color=COLOURS["cross"])
    ax.text(-0.08, 2.86, "queries", ha="right", va="center", fontsize=MIN_FONT)
    ax.set(xlim=(-3.05, 1.6), ylim=(-0.4, 8.5))
    ax.set_title("one decoder layer", fontsize=10)
    ax.axis("off")

    ax = axes[1]
    x_enc, x_dec, step, base = 0.0, 2.6, 1.5, 1.4
    for i in range(n_drawn):
        y = base + step * i
        box(ax, x_enc, y, f"encoder layer {i + 1}", COLOURS["attention"], width=1.7, height=0.6,
            fontsize=MIN_FONT)
        box(ax, x_dec, y, f"decoder layer {i + 1}", COLOURS["masked"], width=1.7, height=0.6,
            fontsize=MIN_FONT, text_colour="white")
        for x in (x_enc, x_dec):
            arrow(ax, [(x, y - step + 0.3), (x, y - 0.3)])
    box(ax, x_enc, 0.0, "source + PE", io, width=1.7, height=0.6, fontsize=MIN_FONT)
    box(ax, x_dec, 0.0, "target + PE", io, width=1.7, height=0.6, fontsize=MIN_FONT)
    top = base + step * (n_drawn - 1)
    box(ax, x_enc, top + step, "memory", io, width=1.7, height=0.6, fontsize=MIN_FONT)
    arrow(ax, [(x_enc, top + 0.3), (x_enc, top + step - 0.3)])
    for i in range(n_drawn):  # the same memory into every decoder layer
        y = base + step * i
        bend = 1.3 - 0.09 * i
        arrow(ax, [(0.85, top + step), (bend, top + step), (bend, y), (x_dec - 0.87, y)],
              colour=COLOURS["cross"], lw=1.8)
    box(ax, x_dec, top + step, "linear, softmax", io, width=1.7, height=0.6, fontsize=MIN_FONT)
    arrow(ax, [(x_dec, top + 0.3), (x_dec, top + step - 0.3)])
    ax.text(1.3, -0.85, f"N = 6 in the paper; {n_drawn} drawn", ha="center", fontsize=MIN_FONT)
    ax.set(xlim=(-0.95, 3.55), ylim=(-1.1, top + step + 0.6))
    ax.set_title("the two stacks", fontsize=10)
    ax.axis("off")
    fig.tight_layout(w_pad=0.3)
    return fig


def full_model_figure():
    """Chapter 10: ids in, probabilities out. The two stacks of chapters 7 and 9 between the
    embedding (times sqrt(d_model), plus the positional encoding) and the output layer, with the
    one shared matrix E in its three places (green)."""
    fig, axes = _figure(1, 4.8)
    ax = axes
    shared, io = COLOURS["embedding"], COLOURS["io"]
    xs, xt, w, h = 0.0, 3.3, 2.5, 0.56
    emb = "embedding E, × √d_model"
    rows = [(0.0, "source ids (B, S)", "target ids (B, T)", io, io, "black"),
            (1.05, emb, emb, shared, shared, "black"),
            (2.1, "+ positional encoding", "+ positional encoding", COLOURS["position"],
             COLOURS["position"], "black"),
            (3.35, "encoder: N layers", "decoder: N layers", COLOURS["attention"],
             COLOURS["masked"], None)]
    for y, left, right, c_left, c_right, text_colour in rows:
        tall = 0.8 if text_colour is None else h
        box(ax, xs, y, left, c_left, width=w, height=tall, fontsize=MIN_FONT)
        box(ax, xt, y, right, c_right, width=w, height=tall, fontsize=MIN_FONT,
            text_colour=text_colour or "white")
    for (y0, *_), (y1, *_, t1) in zip(rows, rows[1:]):
        for x in (xs, xt):
            arrow(ax, [(x, y0 + h / 2), (x, y1 - (0.4 if t1 is None else h / 2))])
    box(ax, xs, 4.6, "memory (B, S, d_model)", io, width=w, height=h, fontsize=MIN_FONT)
    arrow(ax, [(xs, 3.75), (xs, 4.6 - h / 2)])
    arrow(ax, [(xs + w / 2, 4.6), (1.65, 4.6), (1.65, 3.35), (xt - w / 2 - 0.02, 3.35)],
          colour=COLOURS["cross"], lw=1.8)
    box(ax, xt, 4.6, "linear: h Eᵀ, (B, T, V)", shared, width=w, height=h,
        fontsize=MIN_FONT)
    box(ax, xt, 5.65, "softmax over the V tokens", COLOURS["softmax"], width=w, height=h,
        fontsize=MIN_FONT)
    arrow(ax, [(xt, 3.75), (xt, 4.6 - h / 2)])
    arrow(ax, [(xt, 4.6 + h / 2), (xt, 5.65 - h / 2)])
    ax.text(xt, 6.2, "P(next token): (B, T, V)", ha="center", fontsize=MIN_FONT)
    ax.text(xs, 5.75, "one matrix E, (V, d_model),\nin three places (green)",
            ha="center", va="center", fontsize=MIN_FONT, color="#006B4F")
    ax.set(xlim=(-1.45, 4.75), ylim=(-0.45, 6.45))
    ax.axis("off")
    fig.tight_layout()
    return fig
