"""Figures of the cost chapters: what each kind of attention holds in memory (chapter 13's
opening picture), and growth curves on log-log axes (time and memory against the length,
tokens per second against the batch).

Every figure is at most 6.5 inches wide with text of at least 9 points, so that it stays
legible when the page shrinks it to the width of the text.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..efficient import sliding_window_mask

__all__ = ["HELD", "NOT_HELD", "what_is_held", "plot_growth"]

#: The two colours of `what_is_held` (Okabe-Ito blue, and a light grey): colour-blind safe
#: and distinct in grey scale.
HELD, NOT_HELD = "#0072B2", "#E8E8E8"


def _panels(T: int, block: int, window: int, n_global: int, rank: int):
    strip = torch.zeros(T, T, dtype=torch.bool)
    strip[:, 2 * block:3 * block] = True  # the third block of keys
    band = sliding_window_mask(T, window, n_global=n_global)
    return [
        ("exact: all T x T scores", torch.ones(T, T, dtype=torch.bool), "key position"),
        (f"blockwise: one block of {block} keys", strip, "key position"),
        (f"window of {window} + {n_global} global tokens", band, "key position"),
        (f"Linformer: T x r (r = {rank})", torch.ones(T, rank, dtype=torch.bool),
         "projected key"),
    ]


def what_is_held(T: int = 48, block: int = 8, window: int = 4, n_global: int = 2,
                 rank: int = 8):
    """Chapter 13's opening picture: for T queries, which query-key scores four methods hold at
    one moment (blue) and which they do not (grey): exact attention, exact attention over
    blocks of keys (the third block shown), a sliding window with global tokens, and
    Linformer's T x r scores, drawn on the same scale as the others (the white part of its
    panel is not a score at all). Returns the Figure (2 x 2 panels, 6.5 x 6 inches)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    for name, value in (("T", T), ("block", block), ("window", window), ("rank", rank)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if 3 * block > T or rank > T or not 0 <= n_global < T:
        raise ValueError(f"need 3 * block <= T, rank <= T and 0 <= n_global < T; got T={T}, "
                         f"block={block}, rank={rank}, n_global={n_global}")
    cmap = ListedColormap([NOT_HELD, HELD])
    fig, axes = plt.subplots(2, 2, figsize=(6.5, 6.0),
                             gridspec_kw={"width_ratios": [1, 1], "hspace": 0.45})
    for ax, (title, held, xlabel) in zip(axes.flat, _panels(T, block, window, n_global, rank)):
        ax.imshow(held.float().numpy(), cmap=cmap, vmin=0, vmax=1, aspect="auto",
                  interpolation="nearest")
        ax.set_xlim(-0.5, T - 0.5)  # every panel on the same scale: Linformer's r columns
        ax.set_ylim(T - 0.5, -0.5)  # take r / T of the width
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel, fontsize=10)
        ax.set_ylabel("query position", fontsize=10)
        ax.tick_params(labelsize=9)
    fig.legend(handles=[Patch(color=HELD, label="score held in memory now"),
                        Patch(color=NOT_HELD, label="not computed, or not now")],
               loc="lower center", ncol=2, fontsize=10, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.94, bottom=0.16, wspace=0.35)
    return fig


def plot_growth(x: Sequence[float], series: Mapping[str, Sequence[float]], ax=None, *,
                xlabel: str, ylabel: str, title: str | None = None,
                slope_from: str | None = None, slope: float = 2.0, vline=None,
                vline_label: str | None = None):
    """Each of `series` (label -> values, one per x) on log-log axes, with markers; optionally
    a dotted reference line of `slope` through the first point of `series[slope_from]`, and a
    dotted vertical line at `vline`. The x ticks are the x values. Returns the Axes (a new
    6.5 x 4 inch figure when `ax` is None)."""
    import matplotlib.pyplot as plt

    x = [float(v) for v in x]
    for label, values in series.items():
        if len(values) != len(x):
            raise ValueError(f"series {label!r} has {len(values)} values for {len(x)} x values")
    if slope_from is not None and slope_from not in series:
        raise ValueError(f"slope_from must name one of the series {list(series)}, "
                         f"got {slope_from!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.0))
    for (label, values), marker in zip(series.items(), "os^vDP"):
        ax.loglog(x, list(values), marker + "-", label=label)
    if slope_from is not None:
        y0 = float(series[slope_from][0])
        ax.loglog(x, [y0 * (v / x[0]) ** slope for v in x], "k:", label=f"slope {slope:g}")
    if vline is not None:
        ax.axvline(vline, color="0.3", ls="--", label=vline_label)
    ax.set_xticks(x, [f"{v:g}" for v in x])
    ax.minorticks_off()
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title, fontsize=11)
    ax.legend(fontsize=9)
    return ax
