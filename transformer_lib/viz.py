"""Plotting defaults and the attention heat map used throughout the book."""
from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import numpy as np
import torch

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


def _as_numpy(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().to(torch.float64).numpy()
    return np.asarray(weights, dtype=float)


def plot_attention(weights, query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                   ax=None, title: str | None = None, annotate: bool | None = None, colorbar: bool = True,
                   xlabel: str = "key (attended to)", ylabel: str = "query (attending)"):
    """Draw one attention map: rows are queries, columns keys, colour = weight in [0, 1].

    weights: (q_len, k_len) tensor or array. Tokens label the axes; `annotate` writes the
    weights into the cells (default: when the map is at most 8 x 8). Returns the Axes.
    """
    w = _as_numpy(weights)
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
