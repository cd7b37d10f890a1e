"""Pictures of tensors as blocks of their shapes (chapters 3-5): matrix products drawn to
scale, the split of d_model into heads, and the whole flow of single-head attention."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .._checks import as_numpy
from .viz import text_colour


#: Eight colours that stay distinguishable for colour-blind readers: the Okabe-Ito palette
#: (black replaced by grey), one per head or per block.
BLOCK_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"]


def _size(n: int) -> float:
    """Drawn length of an axis of n entries: grows with log2(n), so 2 and 512 both fit."""
    return 0.45 * (1 + np.log2(max(int(n), 1)))


def draw_blocks(terms, ax=None, title: str | None = None):
    """Draw an equation of matrices as labelled blocks, left to right, e.g. X W^Q = Q.

    terms: a sequence of operator strings ("×", "=", "→") and blocks, each a dict with
    "name", "shape" (rows, cols) and optionally "rows" (one label per row, drawn as bands)
    and "colour". Block sides grow with the log of the number of entries (not to scale);
    the shape is written under each block. Returns the Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.2))
    x, top, n_block = 0.0, 0.0, 0
    for term in terms:
        if isinstance(term, str):
            ax.text(x + 0.35, 0, term, ha="center", va="center", fontsize=20)
            x += 0.7
            continue
        if len(term.get("shape", ())) != 2:
            raise ValueError(f"each block needs a 2-D 'shape' (rows, cols), got {term}")
        (n_rows, n_cols), colour = term["shape"], term.get("colour", BLOCK_COLOURS[n_block % len(BLOCK_COLOURS)])
        h, w = _size(n_rows), _size(n_cols)
        ax.add_patch(Rectangle((x, -h / 2), w, h, fc=colour, ec="black", alpha=0.85))
        rows = term.get("rows")
        if rows is not None:
            if len(rows) != n_rows:
                raise ValueError(f"block {term['name']!r} has {n_rows} rows but {len(rows)} row labels")
            for r, label in enumerate(rows):
                y = h / 2 - (r + 0.5) * h / n_rows
                if r:
                    ax.plot([x, x + w], [h / 2 - r * h / n_rows] * 2, color="black", lw=0.8)
                ax.text(x + w / 2, y, label, ha="center", va="center", fontsize=9, color=text_colour(colour))
        else:
            ax.text(x + w / 2, 0, term["name"], ha="center", va="center", fontsize=14, color=text_colour(colour))
        ax.text(x + w / 2, -h / 2 - 0.15, f"{term['name']}\n{tuple(term['shape'])}", ha="center", va="top", fontsize=10)
        x, top, n_block = x + w + 0.1, max(top, h / 2), n_block + 1
    ax.set_xlim(-0.2, x + 0.2)
    ax.set_ylim(-top - 1.1, top + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def head_split_layout(n_tokens: int, d_model: int, n_heads: int, direct_view: bool = False):
    """Where the numbers of each head come from, computed with the real reshape.

    Splits a (1, T, d_model) tensor that holds each number's own flat index, either as the
    book does, view(B, T, h, d_k).transpose(1, 2), or (direct_view=True) with the mistake
    view(B, h, T, d_k). Every row of a head is then one d_k-wide run of numbers; returns two
    (h, T) integer tensors: the token each row comes from and which d_k-wide slice (0..h-1)
    of that token's features it holds. Done right, head i row t holds token t, slice i.
    """
    if n_tokens < 1 or n_heads < 1 or d_model % n_heads:
        raise ValueError(f"need n_tokens >= 1 and d_model divisible by n_heads, got {n_tokens}, {d_model}, {n_heads}")
    d_k = d_model // n_heads
    index = torch.arange(n_tokens * d_model).view(1, n_tokens, d_model)
    if direct_view:
        heads = index.view(1, n_heads, n_tokens, d_k)
    else:
        heads = index.view(1, n_tokens, n_heads, d_k).transpose(1, 2)
    first = heads[0, :, :, 0]                                   # (h, T): flat index of each row's first number
    return first // d_model, (first % d_model) // d_k


def draw_head_split(tokens: Sequence[str], d_model: int = 512, n_heads: int = 8, ax=None, show_mistake: bool = True):
    """Draw the split of d_model into heads and the merge back, for one sentence of the batch:
    X W^Q (B, T, d_model), the queries of every head side by side, -> view(B, T, h, d_k) and
    transpose(1, 2) -> (B, h, T, d_k); below it (show_mistake) what view(B, h, T, d_k) straight
    away produces. Each cell is one token's d_k-wide slice of features, coloured by slice (its
    head, when the split is right) and labelled with its token; the layout is computed by
    `head_split_layout`. Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if n_heads > len(BLOCK_COLOURS):
        raise ValueError(f"n_heads must be at most {len(BLOCK_COLOURS)} to be drawn, got {n_heads}")
    T, d_k, cw, ch = len(tokens), d_model // n_heads, 1.1, 0.55
    if ax is None:
        fig = plt.figure(figsize=(10.5, 4.0 if show_mistake else 2.4))
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))   # the whole figure: the cells as large as it allows

    def cell(x, y, token_index, slice_index):
        colour = BLOCK_COLOURS[slice_index]
        ax.add_patch(Rectangle((x, y), cw, ch, fc=colour, ec="black", lw=0.6))
        ax.text(x + cw / 2, y + ch / 2, tokens[token_index], ha="center", va="center", fontsize=10,
                color=text_colour(colour))

    def heads(x0, y0, token_of, slice_of):                   # h blocks of shape (T, d_k), side by side
        for i in range(n_heads):
            x = x0 + i * (cw + 0.45)
            ax.text(x + cw / 2, y0 + 0.08, f"head {i}", ha="center", va="bottom", fontsize=9.5)
            for t in range(T):
                cell(x, y0 - (t + 1) * ch, int(token_of[i, t]), int(slice_of[i, t]))
        return x0 + n_heads * (cw + 0.45) - 0.45

    y0 = 0.0
    for t in range(T):                                       # X W^Q: (B, T, d_model), slice by slice
        for i in range(n_heads):
            cell(i * cw, y0 - (t + 1) * ch, t, i)
    width = n_heads * cw
    ax.text(width / 2, y0 + 0.08, f"$XW^Q$, shape (B, T, {d_model}):\nevery head's queries side by side",
            ha="center", va="bottom", fontsize=10)
    x_heads = width + 3.4
    ax.annotate("", xy=(x_heads - 0.15, y0 - T * ch / 2), xytext=(width + 0.15, y0 - T * ch / 2),
                arrowprops=dict(arrowstyle="-|>", lw=1.3))
    ax.text(width + 1.7, y0 - T * ch / 2 + 0.1, f"view(B, T, {n_heads}, {d_k})\ntranspose(1, 2)",
            ha="center", va="bottom", fontsize=9.5)
    ax.text(width + 1.7, y0 - T * ch / 2 - 0.3, "merge: the reverse,\nthen reshape", ha="center",
            va="top", fontsize=9.5, color="#555555")
    token_of, slice_of = head_split_layout(T, d_model, n_heads)
    right = heads(x_heads, y0, token_of, slice_of)
    ax.text((x_heads + right) / 2, y0 + 0.55, f"(B, {n_heads}, T, {d_k}): each head, every token", ha="center",
            va="bottom", fontsize=10)
    bottom = y0 - T * ch - 0.3
    if show_mistake:
        token_of, slice_of = head_split_layout(T, d_model, n_heads, direct_view=True)
        y1 = bottom - 0.55
        ax.text(x_heads - 0.3, y1 - T * ch / 2, f"the mistake: view(B, {n_heads}, T, {d_k})\n"
                "right shape, wrong numbers:\nhead 0 gets one token's slices", ha="right", va="center",
                fontsize=10)
        heads(x_heads, y1, token_of, slice_of)
        bottom = y1 - T * ch - 0.2
    ax.set_xlim(-0.3, right + 0.3)
    ax.set_ylim(bottom, y0 + 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def attention_flow_shapes(n_tokens: int, d_model: int, d_k: int, d_v: int | None = None) -> dict:
    """The shape of every tensor of single-head attention, equation (1), for one sentence of
    n_tokens tokens: {"X", "W^Q", "W^K", "W^V", "Q", "K", "V", "scores", "A", "Z"} -> (rows,
    cols). What `draw_attention_flow` draws; d_v defaults to d_k."""
    d_v = d_k if d_v is None else d_v
    for name, v in (("n_tokens", n_tokens), ("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    T = n_tokens
    return {"X": (T, d_model), "W^Q": (d_model, d_k), "W^K": (d_model, d_k), "W^V": (d_model, d_v),
            "Q": (T, d_k), "K": (T, d_k), "V": (T, d_v), "scores": (T, T), "A": (T, T), "Z": (T, d_v)}


def draw_attention_flow(tokens: Sequence[str], d_model: int, d_k: int, d_v: int | None = None,
                        weights=None, ax=None, title: str | None = None):
    """The whole of single-head attention for one sentence as a flow of blocks, left to right:
    X (T, d_model) times W^Q, W^K and W^V gives Q, K (T, d_k) and V (T, d_v); Q K^T / sqrt(d_k)
    gives the scores (T, T); a softmax along each row gives the weights A (T, T); A V gives the
    output Z (T, d_v). Each block is named with its shape underneath; its sides grow with the
    log of the size (as in `draw_blocks`), and the rows of X carry the tokens. `weights`, a
    (T, T) tensor, writes the attention weights into A's cells. Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    tokens = list(tokens)
    d_v = d_k if d_v is None else d_v
    shapes = attention_flow_shapes(len(tokens), d_model, d_k, d_v)
    T = len(tokens)
    w = None
    if weights is not None:
        w = as_numpy("weights", weights, lists=True)
        if w.shape != (T, T):
            raise ValueError(f"weights must be (T, T) = ({T}, {T}) for {T} tokens, got {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 4.6))

    def block(name, x, y, colour, rows=None, cells=None):
        """Draw the block `name` with its left edge at x, centred on y; return (left, right, top, bottom)."""
        n_rows, n_cols = shapes[name]
        h, wd = _size(n_rows), _size(n_cols)
        if name in ("scores", "A"):  # the (T, T) maps: room for numbers in their cells
            h, wd = max(h, 1.3 * n_rows), max(wd, 1.3 * n_cols)
        ax.add_patch(Rectangle((x, y - h / 2), wd, h, fc=colour, ec="black", alpha=0.85))
        for r in range(1, n_rows if n_rows <= 8 else 1):
            ax.plot([x, x + wd], [y + h / 2 - r * h / n_rows] * 2, color="black", lw=0.6)
        if name in ("scores", "A") and n_cols <= 8:
            for c in range(1, n_cols):
                ax.plot([x + c * wd / n_cols] * 2, [y - h / 2, y + h / 2], color="black", lw=0.6)
        if cells is not None and n_rows <= 8:
            for r in range(n_rows):
                for c in range(n_cols):
                    ax.text(x + (c + 0.5) * wd / n_cols, y + h / 2 - (r + 0.5) * h / n_rows,
                            f"{cells[r, c]:.2f}", ha="center", va="center", fontsize=10.5,
                            color=text_colour(colour))
        elif rows is not None and n_rows <= 8:
            for r, label in enumerate(rows):
                ax.text(x + wd / 2, y + h / 2 - (r + 0.5) * h / n_rows, label, ha="center",
                        va="center", fontsize=10, color=text_colour(colour))
        shown = {"scores": "$QK^\\top/\\sqrt{d_k}$"}.get(name, f"${name}$")
        ax.text(x + wd / 2, y - h / 2 - 0.12, f"{shown}\n{shapes[name]}", ha="center", va="top",
                fontsize=11)
        return x, x + wd, y + h / 2, y - h / 2

    def link(start, end, label=None, at=0.5, dy=0.0):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="#444444", lw=1.2))
        if label:
            mx, my = start[0] + at * (end[0] - start[0]), start[1] + at * (end[1] - start[1])
            ax.text(mx, my + dy, label, ha="center", va="center", fontsize=11,
                    bbox=dict(facecolor="white", edgecolor="none", pad=1.5))

    colours = dict(zip(["X", "Q", "K", "V", "scores", "A", "Z"], BLOCK_COLOURS))
    gap = 2.6
    x0 = 0.0
    X = block("X", x0, 0.0, colours["X"], rows=tokens)
    spread = max(_size(T) + 1.3, 2.0)
    xq = X[1] + gap + 0.6
    Qb = block("Q", xq, spread, colours["Q"], rows=[f"$q_{{{i + 1}}}$" for i in range(T)])
    Kb = block("K", xq, 0.0, colours["K"], rows=[f"$k_{{{i + 1}}}$" for i in range(T)])
    Vb = block("V", xq, -spread, colours["V"], rows=[f"$v_{{{i + 1}}}$" for i in range(T)])
    for b, wname in ((Qb, "W^Q"), (Kb, "W^K"), (Vb, "W^V")):
        y = (b[2] + b[3]) / 2
        link((X[1] + 0.05, 0.0), (b[0] - 0.05, y), f"$\\times {wname}$\n{shapes[wname]}", at=0.6)
    xs = Qb[1] + gap
    ys = spread / 2
    S = block("scores", xs, ys, colours["scores"])
    link((Qb[1] + 0.05, spread), (S[0] - 0.05, ys + 0.1))
    link((Kb[1] + 0.05, 0.0), (S[0] - 0.05, ys - 0.1), "$K^\\top$")
    xa = S[1] + gap + 0.3
    A = block("A", xa, ys, colours["A"], cells=w)
    link((S[1] + 0.05, ys), (A[0] - 0.05, ys), "softmax\n(each row)", dy=0.95)
    xz = A[1] + gap - 0.6
    yz = -spread / 2
    Z = block("Z", xz, yz, colours["Z"], rows=[f"$z_{{{i + 1}}}$" for i in range(T)])
    link(((A[0] + A[1]) / 2, A[3] - 0.05), (Z[0] - 0.05, yz + 0.1))
    link((Vb[1] + 0.05, -spread), (Z[0] - 0.05, yz - 0.1), "$A\\,V$")
    ax.set_xlim(-0.3, Z[1] + 0.3)
    ax.set_ylim(min(b[3] for b in (X, Qb, Kb, Vb, S, A, Z)) - 1.0,
                max(b[2] for b in (X, Qb, Kb, Vb, S, A, Z)) + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax
