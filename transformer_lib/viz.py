"""Plotting defaults, the attention heat map, and pictures of tensors and their shapes used throughout the book."""
from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import numpy as np
import torch

from ._checks import as_numpy

#: Colour maps that stay readable for colour-blind readers and in grey scale.
SEQUENTIAL_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"


def set_plot_style() -> None:
    """Figure defaults for the book: readable font sizes, colour-blind-safe colours, and
    inline figures as SVG without a timestamp, so that re-running a notebook rewrites the
    same bytes and figures stay sharp on the website."""
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg", metadata={"Date": None})
    except Exception:  # not inside IPython: nothing to configure
        pass
    mpl.rcParams.update({
        "svg.hashsalt": "transformer-book",
        "svg.fonttype": "path",
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "figure.figsize": (6.4, 4.0),
        "font.size": 11,
        "axes.titlesize": 12,
        "axes.grid": False,
        "image.cmap": SEQUENTIAL_CMAP,
        "axes.prop_cycle": mpl.cycler(color=["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"]),
    })


def plot_attention(weights, query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                   ax=None, title: str | None = None, annotate: bool | None = None, colorbar: bool = True,
                   xlabel: str = "key (attended to)", ylabel: str = "query (attending)"):
    """Draw one attention map: rows are queries, columns keys, colour = weight in [0, 1].

    weights: (q_len, k_len) tensor or array. Tokens label the axes; `annotate` writes the
    weights into the cells (default: when the map is at most 8 x 8). Returns the Axes.
    """
    w = as_numpy("weights", weights, lists=True)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D (q_len, k_len), got shape {w.shape}")
    if query_tokens is not None and len(query_tokens) != w.shape[0]:
        raise ValueError(f"query_tokens has {len(query_tokens)} tokens but weights has {w.shape[0]} rows")
    if key_tokens is not None and len(key_tokens) != w.shape[1]:
        raise ValueError(f"key_tokens has {len(key_tokens)} tokens but weights has {w.shape[1]} columns")
    if ax is None:
        import matplotlib.pyplot as plt  # imported on first use: `import transformer_lib` stays light

        _, ax = plt.subplots(figsize=(0.5 * w.shape[1] + 2.5, 0.45 * w.shape[0] + 1.5))
    vmax = max(1.0, float(w.max())) if w.min() >= 0 else None
    # pcolormesh draws one vector rectangle per weight (crisp in SVG, no embedded bitmap)
    edges_x, edges_y = np.arange(w.shape[1] + 1) - 0.5, np.arange(w.shape[0] + 1) - 0.5
    im = ax.pcolormesh(edges_x, edges_y, w, cmap=SEQUENTIAL_CMAP, vmin=0 if vmax else None, vmax=vmax)
    ax.set_ylim(w.shape[0] - 0.5, -0.5)  # first query at the top, as in a matrix
    ax.set_xticks(range(w.shape[1]), labels=key_tokens if key_tokens is not None else range(w.shape[1]),
                  rotation=90 if key_tokens is not None and max(map(len, key_tokens), default=0) > 4 else 0)
    ax.set_yticks(range(w.shape[0]), labels=query_tokens if query_tokens is not None else range(w.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = max(w.shape) <= 8
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if w[i, j] > 0.6 * (vmax or w.max()) else "white")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


# --- Pictures of tensors and their shapes (chapters 3-5) ---------------------------------------

#: Eight colours that stay distinguishable for colour-blind readers: the Okabe-Ito palette
#: (black replaced by grey), one per head or per block.
BLOCK_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"]


def text_colour(rgba) -> str:
    """'black' or 'white', whichever contrasts more with the colour `rgba` (WCAG 2 contrast ratio)."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in mpl.colors.to_rgb(rgba))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def plot_matrix(values, row_labels: Sequence[str], col_labels: Sequence[str], ax=None, title: str | None = None,
                xlabel: str = "", ylabel: str = "", cmap: str = "cividis", fmt: str = "{:.2f}",
                colorbar_label: str | None = None):
    """An annotated heat map of a (rows, cols) matrix of any sign, each number written in the
    cell in black or white, whichever reads better on that cell's colour. Returns the Axes."""
    v = as_numpy("values", values, lists=True)
    if v.ndim != 2 or v.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values must be 2-D of shape (len(row_labels), len(col_labels)) = "
                         f"({len(row_labels)}, {len(col_labels)}), got {v.shape}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(1.2 * v.shape[1] + 2.5, 0.6 * v.shape[0] + 1.5))
    edges_x, edges_y = np.arange(v.shape[1] + 1) - 0.5, np.arange(v.shape[0] + 1) - 0.5
    im = ax.pcolormesh(edges_x, edges_y, v, cmap=cmap)
    ax.set_ylim(v.shape[0] - 0.5, -0.5)
    ax.set_xticks(range(v.shape[1]), labels=col_labels, rotation=20, ha="right")
    ax.set_yticks(range(v.shape[0]), labels=row_labels)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            ax.text(j, i, fmt.format(v[i, j]), ha="center", va="center", color=text_colour(im.to_rgba(v[i, j])))
    if colorbar_label:
        ax.figure.colorbar(im, ax=ax, label=colorbar_label)
    return ax


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
    (B, T, d_model) -> view (B, T, h, d_k) -> transpose (B, h, T, d_k), and, below it, what
    view(B, h, T, d_k) straight away produces. Each cell is one token's d_k-wide slice of
    features, coloured by slice (its head, when the split is right) and labelled with its
    token; the layout is computed by `head_split_layout`. Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if n_heads > len(BLOCK_COLOURS):
        raise ValueError(f"n_heads must be at most {len(BLOCK_COLOURS)} to be drawn, got {n_heads}")
    T, d_k, cw, ch = len(tokens), d_model // n_heads, 0.62, 0.5
    if ax is None:
        _, ax = plt.subplots(figsize=(15, 5.6 if show_mistake else 3.4))

    def cell(x, y, token_index, slice_index):
        colour = BLOCK_COLOURS[slice_index]
        ax.add_patch(Rectangle((x, y), cw, ch, fc=colour, ec="black", lw=0.6))
        ax.text(x + cw / 2, y + ch / 2, tokens[token_index], ha="center", va="center", fontsize=7.5,
                color=text_colour(colour))

    def heads(x0, y0, token_of, slice_of):                   # h blocks of shape (T, d_k), side by side
        for i in range(n_heads):
            x = x0 + i * (cw + 0.28)
            ax.text(x + cw / 2, y0 + 0.1, f"head {i}", ha="center", va="bottom", fontsize=8)
            for t in range(T):
                cell(x, y0 - (t + 1) * ch, int(token_of[i, t]), int(slice_of[i, t]))
        return x0 + n_heads * (cw + 0.28) - 0.28

    def arrow(x0, x1, y, text):
        ax.annotate("", xy=(x1, y), xytext=(x0, y), arrowprops=dict(arrowstyle="-|>", lw=1.2))
        ax.text((x0 + x1) / 2, y + 0.12, text, ha="center", va="bottom", fontsize=8.5)

    y0 = 0.0
    for panel, gap in enumerate((0.0, 0.14)):                # (B, T, d_model), then (B, T, h, d_k)
        x0 = panel * (n_heads * (cw + 0.14) + 2.2)
        for t in range(T):
            for i in range(n_heads):
                cell(x0 + i * (cw + gap), y0 - (t + 1) * ch, t, i)
        width = n_heads * (cw + gap) - gap
        shape = f"(B, T, {d_model})" if panel == 0 else f"(B, T, {n_heads}, {d_k})"
        what = f"$XW^Q$: {d_model} features per token" if panel == 0 else f"{n_heads} groups of {d_k} per token"
        ax.text(x0 + width / 2, y0 + 0.1, f"{shape}\n{what}", ha="center", va="bottom", fontsize=9)
        if panel == 0:
            arrow(x0 + width + 0.15, x0 + width + 2.05, y0 - T * ch / 2, f"view(B, T, {n_heads}, {d_k})")
            left_mid = x0 + width / 2
        else:
            x_heads = x0 + width + 2.2
            arrow(x0 + width + 0.15, x_heads - 0.15, y0 - T * ch / 2, "transpose(1, 2)")
    token_of, slice_of = head_split_layout(T, d_model, n_heads)
    right = heads(x_heads, y0 + 0.45, token_of, slice_of)
    ax.text((x_heads + right) / 2, y0 + 0.95, f"(B, {n_heads}, T, {d_k}): each head, every token", ha="center",
            va="bottom", fontsize=9)
    y_low = y0 - T * ch - 0.25
    ax.annotate("", xy=(left_mid, y_low), xytext=((x_heads + right) / 2, y_low + 0.45 - 0.1),
                arrowprops=dict(arrowstyle="-|>", lw=1.2, ls="--", connectionstyle="arc3,rad=-0.08"))
    ax.text((left_mid + right) / 2, y_low - 0.55, f"merge (Concat): transpose(1, 2), then reshape(B, T, {d_model})",
            ha="center", va="top", fontsize=8.5)
    bottom = y_low - 0.9
    if show_mistake:
        token_of, slice_of = head_split_layout(T, d_model, n_heads, direct_view=True)
        y1 = bottom - 0.6
        ax.text(x_heads - 0.3, y1 - T * ch / 2, f"the mistake: view(B, {n_heads}, T, {d_k}) straight away\n"
                "right shape, wrong numbers:\nhead 0 gets one token's slices", ha="right", va="center", fontsize=9)
        heads(x_heads, y1, token_of, slice_of)
        bottom = y1 - T * ch - 0.2
    ax.set_xlim(-0.3, right + 0.3)
    ax.set_ylim(bottom, y0 + 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


# --- Attention heads, layer by layer (chapter 12) ----------------------------------------------


def plot_head_grid(weights, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str | None = None,
                   xlabel: str = "key (attended to)", ylabel: str = "query (attending)", size: float = 2.3):
    """Every head of every layer for one input: one column per layer, one row per head, and the
    mean of the heads in the last row (a layer's heads stacked, so the figure stays as narrow as a
    page while each map keeps readable tokens).

    weights: (n_layers, n_heads, q_len, k_len), e.g. `torch.stack([w[0] for w in
    attention["cross"]])` from `decoding.attention_of`. One colour scale (0 to 1) for every map,
    so that a sharp head and a diffuse one compare at a glance. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    w = as_numpy("weights", weights, lists=True)
    if w.ndim != 4:
        raise ValueError(f"weights must be 4-D (n_layers, n_heads, q_len, k_len), got shape {w.shape}")
    n_layers, n_heads, q_len, k_len = w.shape
    if len(query_tokens) != q_len or len(key_tokens) != k_len:
        raise ValueError(f"query_tokens and key_tokens must have {q_len} and {k_len} tokens, "
                         f"got {len(query_tokens)} and {len(key_tokens)}")
    fig, axes = plt.subplots(n_heads + 1, n_layers, squeeze=False, sharex=True, sharey=True,
                             figsize=(size * n_layers * max(k_len, 4) / 12 + 1.5, size * (n_heads + 1) * max(q_len, 4) / 12 + 1.2))
    for layer in range(n_layers):
        maps = list(w[layer]) + [w[layer].mean(0)]
        for row, m in enumerate(maps):
            ax = axes[row, layer]
            im = ax.pcolormesh(np.arange(k_len + 1) - 0.5, np.arange(q_len + 1) - 0.5, m, cmap=SEQUENTIAL_CMAP,
                               vmin=0, vmax=1)
            ax.set_title(f"layer {layer + 1}, " + (f"head {row + 1}" if row < n_heads else "mean of heads"),
                         fontsize=9)
            ax.set_xticks(range(k_len), labels=key_tokens, fontsize=8)
            ax.set_yticks(range(q_len), labels=query_tokens, fontsize=8)
            ax.set_ylim(q_len - 0.5, -0.5)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=9)
    fig.colorbar(im, ax=axes, fraction=0.04, pad=0.02, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


# --- The heads of one layer (chapter 5) and the two encoding layouts (chapter 6) -------------


def plot_heads(weights, query_tokens: Sequence[str], key_tokens: Sequence[str], ncols: int = 4,
               mean: bool = False, title: str | None = None, vmax: float = 1.0, size: float = 2.6):
    """Every head of one attention layer side by side, on one colour scale.

    weights: (n_heads, q_len, k_len), e.g. `mha.last_weights[0]`. The heads fill a grid of
    `ncols` columns, row after row; `mean=True` adds the mean of the heads as one more map.
    Every map uses the same scale, 0 to `vmax` (1 by default: a weight's largest possible
    value), so that a sharp head and a diffuse one compare at a glance. Query tokens label the
    first column's rows, key tokens the last row's columns. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    w = as_numpy("weights", weights, lists=True)
    if w.ndim != 3:
        raise ValueError(f"weights must be 3-D (n_heads, q_len, k_len), got shape {w.shape}")
    n_heads, q_len, k_len = w.shape
    if len(query_tokens) != q_len or len(key_tokens) != k_len:
        raise ValueError(f"query_tokens and key_tokens must have {q_len} and {k_len} tokens, "
                         f"got {len(query_tokens)} and {len(key_tokens)}")
    if not isinstance(ncols, int) or isinstance(ncols, bool) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    if not vmax > 0:
        raise ValueError(f"vmax must be > 0, got {vmax!r}")
    maps = list(w) + ([w.mean(0)] if mean else [])
    names = [f"head {i}" for i in range(n_heads)] + (["mean of the heads"] if mean else [])
    ncols = min(ncols, len(maps))
    nrows = -(-len(maps) // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True,
                             figsize=(size * ncols * max(k_len, 4) / 10 + 1.2,
                                      size * nrows * max(q_len, 4) / 10 + 0.8))
    for ax in axes.flat[len(maps):]:
        ax.set_visible(False)
    for ax, m, name in zip(axes.flat, maps, names):
        im = ax.pcolormesh(np.arange(k_len + 1) - 0.5, np.arange(q_len + 1) - 0.5, m, cmap=SEQUENTIAL_CMAP,
                           vmin=0, vmax=vmax)
        ax.set_title(name, fontsize=10)
        ax.set_ylim(q_len - 0.5, -0.5)
        ax.set_xticks(range(k_len), labels=key_tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(q_len), labels=query_tokens, fontsize=8)
        ax.tick_params(labelbottom=True)
    for ax in axes[-1]:
        ax.set_xlabel("key (attended to)", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("query (attending)", fontsize=9)
    fig.colorbar(im, ax=axes, fraction=0.03, pad=0.02, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


#: The colours of the sine and the cosine channels in `plot_encoding_layouts` (Okabe-Ito).
SINE_COLOUR, COSINE_COLOUR = "#E69F00", "#56B4E9"


def plot_encoding_layouts(tables, sine_channels, title: str | None = None):
    """Positional-encoding tables side by side, each with a strip above it that marks every
    channel as a sine (orange) or a cosine (light blue), so that two layouts of the same
    numbers (the paper's interleaved sin, cos, sin, cos, ... and tensor2tensor's sines, then
    cosines) can be compared at a glance.

    tables: a mapping from a panel title to a (n_positions, d_model) table, values in [-1, 1].
    sine_channels: a mapping with the same keys to d_model booleans, True where the channel is
    a sine. Returns the Figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    if not tables or set(tables) != set(sine_channels):
        raise ValueError("tables and sine_channels must be non-empty mappings with the same keys, got "
                         f"{list(tables)} and {list(sine_channels)}")
    arrays = {name: as_numpy(f"tables[{name!r}]", t, lists=True) for name, t in tables.items()}
    for name, t in arrays.items():
        if t.ndim != 2:
            raise ValueError(f"tables[{name!r}] must be 2-D (n_positions, d_model), got shape {t.shape}")
        if len(sine_channels[name]) != t.shape[1]:
            raise ValueError(f"sine_channels[{name!r}] must have one flag per channel ({t.shape[1]}), "
                             f"got {len(sine_channels[name])}")
    fig, axes = plt.subplots(2, len(arrays), squeeze=False, sharex="col",
                             figsize=(5.2 * len(arrays) + 1.0, 4.6),
                             gridspec_kw={"height_ratios": [1, 12], "hspace": 0.06})
    strip_cmap = ListedColormap([COSINE_COLOUR, SINE_COLOUR])
    for col, (name, t) in enumerate(arrays.items()):
        n_positions, d_model = t.shape
        strip = np.array([[1.0 if s else 0.0 for s in sine_channels[name]]])
        top, ax = axes[0, col], axes[1, col]
        top.pcolormesh(np.arange(d_model + 1) - 0.5, [0, 1], strip, cmap=strip_cmap, vmin=0, vmax=1)
        top.set(yticks=[], title=name)
        top.tick_params(labelbottom=False, bottom=False)
        # A table has thousands of cells: drawn as one embedded bitmap (rasterized), the SVG
        # stays small; the axes, labels and strip stay vector graphics.
        im = ax.pcolormesh(np.arange(d_model + 1) - 0.5, np.arange(n_positions + 1) - 0.5, t,
                           cmap=SEQUENTIAL_CMAP, vmin=-1, vmax=1, rasterized=True)
        ax.set_ylim(n_positions - 0.5, -0.5)
        ax.set(xlabel="channel", ylabel="position" if col == 0 else "")
    axes[0, 0].set_ylabel("sin/cos", rotation=0, ha="right", va="center", fontsize=9)
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02, label="value")
    handles = [mpl.patches.Patch(color=SINE_COLOUR, label="sine channel"),
               mpl.patches.Patch(color=COSINE_COLOUR, label="cosine channel")]
    fig.legend(handles=handles, loc="upper center", ncol=2, fontsize=9, bbox_to_anchor=(0.45, 0.0))
    if title:
        fig.suptitle(title)
    return fig


# --- Chapters 2 and 4: vector similarities, and the whole shape flow of attention --------------


def plot_similarity(similarity, labels: Sequence[str], group_size: int | None = None, ax=None,
                    title: str | None = None, fmt: str = "{:.1f}",
                    colorbar_label: str | None = "cosine similarity"):
    """An annotated heat map of an (n, n) similarity matrix (a cosine, say) on the fixed scale
    -1 to 1, so that two maps drawn with it compare at a glance: a diverging colour map (red
    for +1, blue for -1, white for 0), each number written in black or white, whichever reads
    better on its cell. `group_size` draws lines between consecutive groups of that many
    labels (the four languages of one month, say). Returns the Axes."""
    s = as_numpy("similarity", similarity, lists=True)
    n = len(labels)
    if s.ndim != 2 or s.shape != (n, n):
        raise ValueError(f"similarity must be (len(labels), len(labels)) = ({n}, {n}), got {s.shape}")
    if group_size is not None and (not isinstance(group_size, int) or isinstance(group_size, bool)
                                   or group_size < 1 or n % group_size):
        raise ValueError(f"group_size must be a positive int that divides len(labels) = {n}, got {group_size!r}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(0.45 * n + 2.5, 0.42 * n + 1.5))
    edges = np.arange(n + 1) - 0.5
    im = ax.pcolormesh(edges, edges, s, cmap=DIVERGING_CMAP, vmin=-1, vmax=1)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xticks(range(n), labels=labels, rotation=90)
    ax.set_yticks(range(n), labels=labels)
    ax.set_aspect("equal")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, fmt.format(s[i, j]), ha="center", va="center", fontsize=7,
                    color=text_colour(im.to_rgba(s[i, j])))
    if group_size is not None:
        for k in range(group_size, n, group_size):
            ax.axhline(k - 0.5, color="black", lw=1.2)
            ax.axvline(k - 0.5, color="black", lw=1.2)
    if title:
        ax.set_title(title)
    if colorbar_label:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=colorbar_label)
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
            h, wd = max(h, 0.8 * n_rows), max(wd, 0.8 * n_cols)
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
                            f"{cells[r, c]:.2f}", ha="center", va="center", fontsize=8,
                            color=text_colour(colour))
        elif rows is not None and n_rows <= 8:
            for r, label in enumerate(rows):
                ax.text(x + wd / 2, y + h / 2 - (r + 0.5) * h / n_rows, label, ha="center",
                        va="center", fontsize=9, color=text_colour(colour))
        shown = {"scores": "$QK^\\top/\\sqrt{d_k}$"}.get(name, f"${name}$")
        ax.text(x + wd / 2, y - h / 2 - 0.12, f"{shown}\n{shapes[name]}", ha="center", va="top",
                fontsize=9)
        return x, x + wd, y + h / 2, y - h / 2

    def link(start, end, label=None, at=0.5, dy=0.0):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="#444444", lw=1.2))
        if label:
            mx, my = start[0] + at * (end[0] - start[0]), start[1] + at * (end[1] - start[1])
            ax.text(mx, my + dy, label, ha="center", va="center", fontsize=9,
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
    xa = S[1] + gap - 0.6
    A = block("A", xa, ys, colours["A"], cells=w)
    link((S[1] + 0.05, ys), (A[0] - 0.05, ys), "softmax\n(each row)", dy=0.75)
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
