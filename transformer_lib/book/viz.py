"""Plotting defaults and the book's heat maps: attention weights (one map, the heads of a layer,
every head of every layer), annotated matrices, similarities and masks as grids
(`draw_mask`). Chapter 6's figures of the positional encoding are in `positions`; the
pictures of tensors as blocks of their shapes are in `shapes`."""
from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import numpy as np

import torch

from .._checks import as_numpy, check_tensor

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
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=9,
                        color="black" if w[i, j] > 0.6 * (vmax or w.max()) else "white")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax



def draw_mask(ax, mask: torch.Tensor, q_tokens: Sequence[str], k_tokens: Sequence[str], title: str):
    """A boolean (T, S) mask as a grid: blue where a query may attend to a key, white where blocked."""
    from matplotlib.colors import ListedColormap

    check_tensor("mask", mask, ndim=2)
    if tuple(mask.shape) != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"mask must have shape (len(q_tokens), len(k_tokens)) = "
                         f"{(len(q_tokens), len(k_tokens))}, got {tuple(mask.shape)}")
    ax.imshow(as_numpy("mask", mask), cmap=ListedColormap(["#FFFFFF", "#0072B2"]), vmin=0, vmax=1)
    ax.set_xticks(range(len(k_tokens)), labels=k_tokens, rotation=90)
    ax.set_yticks(range(len(q_tokens)), labels=q_tokens)
    ax.set_xticks([x - 0.5 for x in range(1, len(k_tokens))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(q_tokens))], minor=True)
    ax.grid(which="minor", color="#AAAAAA", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set(title=title, xlabel="key (attended to)", ylabel="query (attending)")
    return ax

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
                             figsize=(size * n_layers * max(k_len, 4) / 12 + 1.5,
                                      size * (n_heads + 1) * max(q_len, 4) / 12 + 1.2))
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
    # Constrained layout keeps every title clear of the tick labels above it; only the lowest
    # map of each column carries the key tokens, so no rotated label runs into a title.
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True, layout="constrained",
                             figsize=(size * ncols * max(k_len, 4) / 10 + 1.2,
                                      size * nrows * max(q_len, 4) / 10 + 0.8))
    for ax in axes.flat[len(maps):]:
        ax.set_visible(False)
    for index, (ax, m, name) in enumerate(zip(axes.flat, maps, names)):
        im = ax.pcolormesh(np.arange(k_len + 1) - 0.5, np.arange(q_len + 1) - 0.5, m, cmap=SEQUENTIAL_CMAP,
                           vmin=0, vmax=vmax)
        ax.set_title(name, fontsize=10)
        ax.set_ylim(q_len - 0.5, -0.5)
        ax.set_xticks(range(k_len), labels=key_tokens, rotation=90, fontsize=9)
        ax.set_yticks(range(q_len), labels=query_tokens, fontsize=9)
        lowest = index + ncols >= len(maps)          # no map below it in its column
        ax.tick_params(labelbottom=lowest)
        if lowest:
            ax.set_xlabel("key (attended to)", fontsize=9.5)
    for ax in axes[:, 0]:
        ax.set_ylabel("query (attending)", fontsize=9.5)
    fig.colorbar(im, ax=axes, fraction=0.03, pad=0.02, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig



def plot_similarity(similarity, labels: Sequence[str], group_size: int | None = None, ax=None,
                    title: str | None = None, fmt: str = "{:.1f}",
                    colorbar_label: str | None = "cosine similarity", annotate: bool = True):
    """A heat map of an (n, n) similarity matrix (a cosine, say) on the fixed scale -1 to 1, so
    that two maps drawn with it compare at a glance: a diverging colour map (red for +1, blue
    for -1, white for 0). With `annotate`, each number is written in its cell in black or
    white, whichever reads better (leave it off where the cells are too small for 9-point
    text). `group_size` draws lines between consecutive groups of that many labels (the four
    languages of one month, say). Returns the Axes."""
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
    for i in range(n if annotate else 0):
        for j in range(n):
            ax.text(j, i, fmt.format(s[i, j]), ha="center", va="center", fontsize=9,
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


# --- Chapters 4 to 6: the scaling study, rows of weights, the positional table -----------------


def plot_scaling_panels(widths: Sequence[int], panels, ncols: int = 2, figsize=(7.6, 5.8)):
    """Small plots side by side, one per measurement against the width d_k on a log axis: the
    unscaled run as circles, the scaled one as squares (chapter 4's four steps).

    widths: the widths d_k, the x axis, each labelled. panels: a sequence of mappings, each with
    `values` ({width: (unscaled, scaled)} with every width), `ylabel`, `title`, and optionally
    `log` (a log y axis) and `ylim`. The first panel carries the legend. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    widths = list(widths)
    if not widths or not panels:
        raise ValueError("widths and panels must be non-empty")
    for n, panel in enumerate(panels):
        missing = [w for w in widths if w not in panel["values"]]
        if missing:
            raise ValueError(f"panels[{n}]['values'] has no (unscaled, scaled) pair for the widths {missing}")
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)
    for ax, panel in zip(axes.ravel(), panels):
        values = panel["values"]
        ax.plot(widths, [values[w][0] for w in widths], "o-", label="unscaled")
        ax.plot(widths, [values[w][1] for w in widths], "s-", label="scaled")
        ax.set(xscale="log", xlabel="$d_k$", ylabel=panel["ylabel"], title=panel["title"])
        ax.set_xticks(widths, labels=widths, minor=False)
        ax.minorticks_off()
        if panel.get("log"):
            ax.set_yscale("log")
        if panel.get("ylim") is not None:
            ax.set_ylim(*panel["ylim"])
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    axes[0, 0].legend(fontsize=10)
    fig.tight_layout()
    return fig


def plot_weight_rows(rows, tokens: Sequence[str], ylabel: str = "weight",
                     xlabel: str = "key (attended to)", figsize=None):
    """One query's attention weights as bars over the keys, one panel per row, side by side on
    one scale from 0 to 1 (chapter 5: one head per target, or one head for both).

    rows: a mapping from a panel title to len(tokens) weights. Returns the Figure."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows must be a non-empty mapping from a title to weights")
    arrays = {title: as_numpy(f"rows[{title!r}]", w, lists=True) for title, w in rows.items()}
    for title, w in arrays.items():
        if w.shape != (len(tokens),):
            raise ValueError(f"rows[{title!r}] must hold one weight per token ({len(tokens)}), got shape {w.shape}")
    fig, axes = plt.subplots(1, len(arrays), figsize=figsize or (3 * len(arrays), 3.2), sharey=True,
                             squeeze=False)
    for ax, (title, w) in zip(axes[0], arrays.items()):
        ax.bar(range(len(tokens)), w, color="#0072B2")
        ax.set_xticks(range(len(tokens)), labels=tokens, rotation=60, ha="right")
        ax.set(title=title, xlabel=xlabel, ylim=(0, 1))
    axes[0, 0].set_ylabel(ylabel)
    fig.tight_layout()
    return fig
