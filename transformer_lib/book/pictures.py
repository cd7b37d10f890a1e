"""The opening pictures of chapters 1-6, one idea each, drawn with the primitives of
`diagrams` (`box`, `arrow`, its colours): the recurrent encoder-decoder with and without
attention (chapters 1-2), a weighted average of word vectors and the two roads of X (chapter 3),
attention as a soft look-up (chapter 4), several heads side by side (chapter 5) and positions as
clock hands (chapter 6).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from matplotlib.patches import FancyBboxPatch

from .diagrams import arrow, box, COLOURS

__all__ = ["draw_seq2seq", "draw_average", "draw_two_paths", "soft_lookup", "multi_head", "position_clocks"]


def draw_seq2seq(src_tokens: Iterable[str], tgt_tokens: Iterable[str], weights=None, step: int | None = None,
                 ax=None, title: str | None = None, bidirectional: bool = True):
    """Draw a recurrent encoder-decoder as boxes and arrows.

    The encoder reads ``src_tokens``: one row of forward states (arrows to the right) and, if
    ``bidirectional``, a row of backward states (arrows to the left) below it. The decoder
    writes ``tgt_tokens``, one state per token, each written token fed to the next step (the
    thin arrows from a token to the next box).

    Without ``weights``: the summary ``c``, made of the last forward state and, if
    bidirectional, the first backward state, reaches every decoder step along one line below
    the decoder (the bottleneck). With ``weights`` (T_y, T_x) and an output ``step``: lines
    from every input position to decoder step ``step``, as thick and dark as the weight
    alpha[step, t'] (attention). Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    import torch

    src_tokens, tgt_tokens = list(src_tokens), list(tgt_tokens)
    if not src_tokens or not tgt_tokens:
        raise ValueError("src_tokens, tgt_tokens: expected at least one token each")
    n_x, n_y = len(src_tokens), len(tgt_tokens)
    if weights is not None:
        w = torch.as_tensor(weights, dtype=torch.float64)
        if w.shape != (n_y, n_x):
            raise ValueError(f"weights: expected shape (T_y, T_x) = ({n_y}, {n_x}), got {tuple(w.shape)}")
        if step is None or not 0 <= step < n_y:
            raise ValueError(f"step: expected an output step in [0, {n_y}), got {step!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(6.5, 0.3 * max(n_x, n_y) + 1.5), 3.4))
    width = max(n_x, n_y) - 1.0
    enc_x = [i * width / max(n_x - 1, 1) for i in range(n_x)]
    dec_x = [i * width / max(n_y - 1, 1) for i in range(n_y)]
    fwd_y = 0.8 if bidirectional else 0.0          # the forward row, above the backward one
    bwd_y, bus_in, bus_out, dec_y = 0.0, fwd_y + 0.75, fwd_y + 1.3, fwd_y + 1.9
    half = 0.22  # half the height of a state box

    def state(x, y, colour, edge="black", lw=0.8):  # one recurrent state: a small box
        box(ax, x, y, "", colour, width=0.5, height=2 * half, lw=lw, edge=edge)

    def link(x0, y0, x1, y1, lw=0.8, alpha=1.0, colour="black"):  # an arrow that stops at the boxes
        arrow(ax, [(x0, y0), (x1, y1)], colour=colour, lw=lw, alpha=alpha, shrink=6)

    summary_colour = "#CC79A7"
    rows = [(fwd_y, 1)] + ([(bwd_y, -1)] if bidirectional else [])
    for y, direction in rows:
        ends = {enc_x[-1] if direction == 1 else enc_x[0]}  # the state that goes into c
        for i, x in enumerate(enc_x):
            on_c = weights is None and x in ends
            state(x, y, "#56B4E9", edge=summary_colour if on_c else "black", lw=2.0 if on_c else 0.8)
            if i:
                a, b = (enc_x[i - 1], x) if direction == 1 else (x, enc_x[i - 1])
                link(a, y, b, y)
        ax.text(-0.7, y, "forward" if direction == 1 else "backward", ha="right", va="center", fontsize=9)
    for x, tok in zip(enc_x, src_tokens):
        ax.text(x, rows[-1][0] - half - 0.1, tok.replace(" ", "\u2423"), ha="center", va="top", fontsize=9)
    for i, (x, tok) in enumerate(zip(dec_x, tgt_tokens)):
        state(x, dec_y, "#E69F00")
        ax.text(x, dec_y + half + 0.08, tok, ha="center", va="bottom", fontsize=9)
        if i:
            link(dec_x[i - 1], dec_y, x, dec_y)
            # the token just written is the next step's input
            arrow(ax, [(dec_x[i - 1] + 0.15, dec_y + half + 0.1), (x - 0.2, dec_y + half)],
                  colour="#777777", lw=0.6)
    if weights is None:
        cx = width + 1.4
        box(ax, cx, bus_in, "c", summary_colour, width=0.7, height=0.42, fontsize=10, lw=1.0)
        link(enc_x[-1], fwd_y, cx, bus_in, lw=1.2, colour=summary_colour)
        if bidirectional:  # the first backward state, round the left and along to c
            arrow(ax, [(enc_x[0] - 0.25, bwd_y), (-0.45, bwd_y), (-0.45, bus_in), (cx - 0.35, bus_in)],
                  colour=summary_colour, lw=1.2)
        # c reaches every decoder step along one line below the decoder
        ax.plot([cx, cx, dec_x[0]], [bus_in + 0.21, bus_out, bus_out], color=summary_colour, lw=1.0,
                solid_capstyle="butt", zorder=2)
        for x in dec_x:
            arrow(ax, [(x, bus_out), (x, dec_y - half)], colour=summary_colour, lw=0.8)
    else:
        row = w[step] / max(float(w[step].max()), 1e-12)
        for x, a in zip(enc_x, row.tolist()):
            if a > 0.02:
                link(x, fwd_y, dec_x[step], dec_y, lw=0.4 + 2.6 * a, alpha=0.15 + 0.85 * a, colour="#0072B2")
    ax.text(-0.7, dec_y, "decoder", ha="right", va="center", fontsize=9)
    ax.set_xlim(-2.6, width + 2.0)
    ax.set_ylim(rows[-1][0] - 0.9, dec_y + 0.8)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    return ax


# --------------------------------------------------------------------------------------
# Parameter-free self-attention on a few 2-D word vectors (chapter 3's opening picture)
# --------------------------------------------------------------------------------------

def draw_average(X, words: Sequence[str], focus: str, figsize=(6.5, 3.3)):
    """Parameter-free self-attention, softmax(X X^T) X, on a few two-dimensional word vectors.

    Left: the output for the word ``focus`` gathers every input, each line as thick as its
    weight (the weight written on it). Right: every input (filled dot) moves to its output
    (ring), all inside the shaded convex hull of the inputs. ``X`` is (T, 2), one row per word
    of ``words``. Returns the Figure.
    """
    import matplotlib.pyplot as plt
    import torch

    from .geometry import convex_hull

    X = torch.as_tensor(X, dtype=torch.float64)
    words = list(words)
    if X.dim() != 2 or X.shape[1] != 2 or X.shape[0] != len(words):
        raise ValueError(f"X: expected shape (len(words), 2) = ({len(words)}, 2), got {tuple(X.shape)}")
    if focus not in words:
        raise ValueError(f"focus: expected one of {words}, got {focus!r}")
    W = (X @ X.T).softmax(dim=-1)
    Y = W @ X
    blue, orange = "#0072B2", "#D55E00"
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=figsize, gridspec_kw={"width_ratios": [1, 1.1]})

    i = words.index(focus)
    for j, word in enumerate(words):
        ax_l.plot([j, i], [0, 1], color=blue, lw=0.5 + 12 * W[i, j].item(), alpha=0.8)
        ax_l.text(j, -0.1, word, ha="center", va="top", fontsize=10)
        ax_l.text(j, 0.12, f"{W[i, j]:.2f}", ha="center", fontsize=9,
                  bbox=dict(facecolor="white", edgecolor="none", pad=1))
    ax_l.text(i, 1.1, f"output for {focus!r}", ha="center", va="bottom", fontsize=10)
    ax_l.scatter(range(len(words)), [0] * len(words), color=blue, zorder=3)
    ax_l.scatter([i], [1], facecolors="white", edgecolors=orange, s=80, zorder=3)
    ax_l.set_xlim(-0.6, len(words) - 0.4)
    ax_l.set_ylim(-0.35, 1.3)
    ax_l.set_title("a weighted sum of all inputs", fontsize=10)
    ax_l.axis("off")

    hull = convex_hull(X)
    ax_r.fill(hull[:, 0], hull[:, 1], color="#56B4E9", alpha=0.2, label="convex hull of the inputs")
    for j, word in enumerate(words):
        (x0, y0), (x1, y1) = X[j].tolist(), Y[j].tolist()
        ax_r.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color="grey"))
        ax_r.scatter([x0], [y0], color=blue, zorder=3)
        ax_r.scatter([x1], [y1], facecolors="white", edgecolors=orange, s=50, zorder=3)
        ax_r.text(x0 + 0.06, y0 + 0.06, word, fontsize=10)
    ax_r.scatter([], [], color=blue, label="input")
    ax_r.scatter([], [], facecolors="white", edgecolors=orange, label="output")
    ax_r.axhline(0, color="lightgrey", lw=0.8)
    ax_r.axvline(0, color="lightgrey", lw=0.8)
    ax_r.set_aspect("equal")
    ax_r.set_xlabel("feature 1", fontsize=10)
    ax_r.set_ylabel("feature 2", fontsize=10)
    ax_r.tick_params(labelsize=9)
    ax_r.set_title("inputs move towards what they resemble", fontsize=10)
    ax_r.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize=9, frameon=False,
                handletextpad=0.3, columnspacing=0.8)
    fig.tight_layout()
    return fig


def draw_two_paths(ax=None):
    """The two roads of X through parameter-free self-attention, Y = softmax(X X^T) X: along
    the top X makes the weights (a product with itself, then a softmax: not linear in X);
    along the bottom X is what the weights average (linear in X). Returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 2.4))
    weights_colour, values_colour = "#E69F00", "#56B4E9"
    box(ax, 0.0, 0.0, "$X$\n$(T, d)$", COLOURS["io"], width=1.0, height=0.8, fontsize=10)
    box(ax, 2.0, 0.8, "scores\n$X X^\\top$", weights_colour, width=1.5, height=0.8, fontsize=10)
    box(ax, 4.0, 0.8, "softmax\nof each row", weights_colour, width=1.5, height=0.8, fontsize=10)
    box(ax, 6.4, 0.0, "$Y = W X$\n$(T, d)$", COLOURS["io"], width=1.3, height=0.8, fontsize=10)
    arrow(ax, [(0.5, 0.2), (0.8, 0.8), (1.25, 0.8)], colour=weights_colour, lw=1.6)
    arrow(ax, [(2.75, 0.8), (3.25, 0.8)], colour=weights_colour, lw=1.6)
    arrow(ax, [(4.75, 0.8), (5.4, 0.8), (5.75, 0.2)], colour=weights_colour, lw=1.6)
    ax.text(5.15, 1.0, "$W$", ha="center", va="bottom", fontsize=10)
    arrow(ax, [(0.5, -0.2), (0.8, -0.8), (5.4, -0.8), (5.75, -0.2)], colour=values_colour, lw=1.6)
    ax.text(3.0, 1.45, "the weights: not linear in $X$", ha="center", fontsize=10, color="#8a5a00")
    ax.text(3.0, -1.05, "what is averaged: linear in $X$ (for fixed weights)", ha="center", va="top",
            fontsize=10, color="#005a8c")
    ax.set_xlim(-0.7, 7.2)
    ax.set_ylim(-1.5, 1.8)
    ax.axis("off")
    return ax


# --------------------------------------------------------------------------------------
# The opening pictures of chapters 4-6: each chapter's idea before any code
# --------------------------------------------------------------------------------------

def soft_lookup(keys: Sequence[str] = ("cats", "dogs", "cats and dogs", "no cats"),
                scores: Sequence[float] = (2.0, 0.5, 1.75, -2.0),
                values: Sequence[float] = (10.0, 20.0, 30.0, 40.0), query: str = "query",
                title: str | None = "attention as a soft look-up", figsize=(7.0, 3.4)):
    """Attention as a soft look-up table (chapter 4): a query compared with every key, the scores
    turned into weights by a softmax (drawn as bars), and the output the weighted average of
    all the values (its arrows as thick as the weights). Returns the Figure."""
    import math

    import matplotlib.pyplot as plt

    keys, scores, values = list(keys), [float(s) for s in scores], [float(v) for v in values]
    if not keys or len(scores) != len(keys) or len(values) != len(keys):
        raise ValueError(f"keys, scores and values must have the same non-zero length, got {len(keys)}, "
                         f"{len(scores)} and {len(values)}")
    top = max(scores)
    exp = [math.exp(s - top) for s in scores]
    weights = [e / sum(exp) for e in exp]
    out = sum(w * v for w, v in zip(weights, values))
    fig, ax = plt.subplots(figsize=figsize)
    n = len(keys)
    ys = [(n - 1) / 2 - i for i in range(n)]
    x_q, x_k, x_s, x_w, x_v, x_o = 0.0, 2.3, 3.85, 4.55, 7.1, 9.0
    box(ax, x_q, 0, query, COLOURS["attention"], width=1.2, height=0.6, fontsize=10)
    for y, key, s, w, v in zip(ys, keys, scores, weights, values):
        arrow(ax, [(x_q + 0.62, 0), (x_k - 0.92, y)], colour="#777777", lw=1.0)
        box(ax, x_k, y, key, "#E8E8E8", width=1.8, height=0.56, fontsize=10)
        ax.text(x_s, y, f"{s:+.2f}", ha="center", va="center", fontsize=10)
        ax.add_patch(FancyBboxPatch((x_w, y - 0.17), 1.6 * w, 0.34, boxstyle="square,pad=0", fc=COLOURS["ffn"],
                                    ec="none", zorder=3))
        ax.text(x_w + 1.6 * w + 0.08, y, f"{w:.3f}", ha="left", va="center", fontsize=10)
        box(ax, x_v, y, f"{v:g}", "#FFFFFF", width=0.8, height=0.56, fontsize=10)
        arrow(ax, [(x_v + 0.43, y), (x_o - 0.75, 0)], colour=COLOURS["masked"], lw=0.5 + 5 * w,
              alpha=0.35 + 0.65 * w)
    box(ax, x_o, 0, f"output\n{out:.2f}", COLOURS["ffn"], width=1.3, height=0.9, fontsize=10)
    head_y = ys[0] + 0.62
    for x, text in ((x_k, "keys"), (x_s, "score\n$q \\cdot k$"), (x_w + 0.8, "weight\n(softmax)"),
                    (x_v, "values")):
        ax.text(x, head_y, text, ha="center", va="bottom", fontsize=10)
    ax.text(x_o, -0.72, "$\\Sigma_j\\, w_j v_j$", ha="center", va="top", fontsize=10)
    ax.set_xlim(-0.7, 9.8)
    ax.set_ylim(ys[-1] - 0.6, head_y + 0.75)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


def multi_head(n_heads: int = 8, shown: int = 3, d_model: int = 512,
               title: str | None = "multi-head attention", figsize=(7.0, 3.9)):
    """Multi-head attention (chapter 5; Vaswani et al. 2017, Figure 2, right) from left to right:
    the input X feeds h heads side by side, each its own scaled dot-product attention on its own
    projections; their outputs are concatenated and mixed by W^O. `shown` heads are drawn, then
    a gap for the others, then the last. Returns the Figure."""
    import matplotlib.pyplot as plt

    from matplotlib.colors import to_rgba

    from .shapes import BLOCK_COLOURS
    from .viz import text_colour

    for name, v in (("n_heads", n_heads), ("shown", shown), ("d_model", d_model)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    d_k = d_model // n_heads
    heads = list(range(min(shown, n_heads)))
    if n_heads > len(heads):
        heads += [None, n_heads - 1]                      # None: the gap for the heads not drawn
    fig, ax = plt.subplots(figsize=figsize)
    ys = [(len(heads) - 1) / 2 * 1.0 - i * 1.0 for i in range(len(heads))]
    x_x, x_h, x_c, x_o, x_y = 0.0, 3.0, 5.55, 7.05, 8.6
    box(ax, x_x, 0, f"$X$\n$(T, {d_model})$", "#E8E8E8", width=1.2, height=0.95, fontsize=10)
    for y, i in zip(ys, heads):
        if i is None:
            ax.text(x_h, y, "$\\vdots$", ha="center", va="center", fontsize=14)
            continue
        colour = BLOCK_COLOURS[i % len(BLOCK_COLOURS)]
        arrow(ax, [(x_x + 0.62, 0), (x_h - 1.63, y)], colour="#777777", lw=1.0)
        box(ax, x_h, y, f"head {i + 1}: attention with its own\n$W^Q_{{{i + 1}}}, W^K_{{{i + 1}}}, W^V_{{{i + 1}}}$",
            colour, width=3.2, height=0.78, fontsize=9.5, text_colour=text_colour(to_rgba(colour)))
        arrow(ax, [(x_h + 1.63, y), (x_c - 0.5, 0)], colour=colour, lw=1.6)
    ax.text(x_h, ys[0] + 0.5, f"{n_heads} heads side by side, each $(T, d_k) = (T, {d_k})$", ha="center",
            va="bottom", fontsize=9.5)
    box(ax, x_c, 0, f"Concat\n$(T, {n_heads} \\cdot {d_k})$", "#F5F5F5", width=0.95, height=1.5, fontsize=9.5)
    arrow(ax, [(x_c + 0.5, 0), (x_o - 0.55, 0)], lw=1.3)
    box(ax, x_o, 0, f"$\\times\\, W^O$\n$({d_model}, {d_model})$", COLOURS["attention"], width=1.05,
        height=0.95, fontsize=9.5)
    arrow(ax, [(x_o + 0.55, 0), (x_y - 0.55, 0)], lw=1.3)
    box(ax, x_y, 0, f"output\n$(T, {d_model})$", COLOURS["ffn"], width=1.05, height=0.95, fontsize=9.5)
    ax.set_xlim(-0.7, 9.2)
    ax.set_ylim(ys[-1] - 0.6, ys[0] + 0.9)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


def position_clocks(positions: Sequence[int] = (0, 1, 2, 3, 10, 30), pairs: Sequence[int] = (0, 4, 8, 16),
                    d_model: int = 64, title: str | None = "a clock with many hands", figsize=(6.0, 5.8)):
    """The sinusoidal encoding as clocks (chapter 6): one row per position, one clock per channel
    pair i, whose hand points at (sin w_i pos, cos w_i pos), w_i = 10000^(-2i / d_model): position
    0 at twelve o'clock, turning clockwise by w_i per position. The tips of all the hands of a
    row are that position's vector. Returns the Figure."""
    import math

    import matplotlib.pyplot as plt

    positions, pairs = [int(p) for p in positions], [int(i) for i in pairs]
    if not positions or not pairs or min(positions) < 0:
        raise ValueError(f"positions (non-negative) and pairs must be non-empty, got {positions} and {pairs}")
    if d_model < 2 or d_model % 2 or not all(0 <= i < d_model // 2 for i in pairs):
        raise ValueError(f"pairs must lie in [0, d_model/2) for an even d_model, got {pairs} with d_model {d_model}")
    fig, axes = plt.subplots(len(positions), len(pairs), figsize=figsize, squeeze=False)
    ring = [2 * math.pi * t / 120 for t in range(121)]
    for col, i in enumerate(pairs):
        omega = 1 / 10000 ** (2 * i / d_model)
        for row, pos in enumerate(positions):
            ax = axes[row, col]
            ax.plot([math.sin(a) for a in ring], [math.cos(a) for a in ring], color="#999999", lw=1.0)
            for tick in range(12):
                a = 2 * math.pi * tick / 12
                ax.plot([0.85 * math.sin(a), math.sin(a)], [0.85 * math.cos(a), math.cos(a)], color="#BBBBBB", lw=0.8)
            a = omega * pos
            ax.annotate("", xy=(0.9 * math.sin(a), 0.9 * math.cos(a)), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=COLOURS["masked"], lw=2.0))
            ax.plot([0], [0], "o", color="black", ms=3)
            ax.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15), aspect="equal", xticks=[], yticks=[])
            for side in ax.spines.values():
                side.set_visible(False)
            if row == 0:
                ax.set_title(f"pair {i}\n$\\omega$ = {omega:.3g}", fontsize=10)
            if col == 0:
                ax.set_ylabel(f"pos {pos}", rotation=0, ha="right", va="center", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
