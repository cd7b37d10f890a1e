"""Figures of the cost chapters: what each kind of attention holds in memory (chapter 13's
opening picture), growth curves on log-log axes (time and memory against the length), the
window's cost to the date model (chapter 13), and the language model's loss curves and
generation speed (chapter 14).

Every figure is at most 6.5 inches wide with text of at least 9 points, so that it stays
legible when the page shrinks it to the width of the text.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..efficient import sliding_window_mask

__all__ = ["HELD", "NOT_HELD", "what_is_held", "plot_growth", "plot_window_accuracy",
           "plot_loss_curves", "plot_generation_speed"]

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


def plot_window_accuracy(bolted_on: Mapping, trained: Mapping, windows: Sequence[int],
                         ax=None):
    """Chapter 13: exact match (fractions) of the date model with a sliding window of each
    size in `windows` bolted on (`bolted_on[w]`; `bolted_on[None]` is full attention, a
    dotted line), and after training with the window (`trained[w]`, squares). Returns the
    Axes (a new 6.5 x 4 inch figure when `ax` is None)."""
    import matplotlib.pyplot as plt

    missing = [w for w in list(windows) + [None] if w not in bolted_on]
    missing += [w for w in trained if w not in windows]
    if missing:
        raise ValueError(f"no value for windows {missing}: bolted_on needs every window and "
                         "None (full attention); trained's windows must be among `windows`")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.0))
    xs = range(len(windows))
    ax.plot(xs, [100 * bolted_on[w] for w in windows], "o-",
            label="bolted onto the trained model")
    ax.plot([list(windows).index(w) for w in trained], [100 * trained[w] for w in trained],
            "s", markersize=9, label="after training with it")
    ax.axhline(100 * bolted_on[None], color="k", ls=":", label="full attention")
    ax.set_xticks(list(xs), [str(w) for w in windows])
    ax.set(xlabel="window (keys on each side) + 1 global token", ylabel="exact match (%)",
           ylim=(0, 105))
    ax.legend(loc="lower left", fontsize=10)
    return ax


def plot_loss_curves(steps: Sequence[int], curves: Mapping[str, Sequence[float]],
                     batch_losses: Sequence[float], reference: float, zoom_from: int):
    """Chapter 14: held-out losses (`curves`: name -> one value per step of `steps`) and the
    training batches' losses (means of 25 steps) on a log scale with a horizontal
    `reference` line (the unigram entropy), and below, the curves from step `zoom_from` on,
    magnified. Returns the Figure (6.5 x 7.5 inches, two panels)."""
    import matplotlib.pyplot as plt

    for name, curve in curves.items():
        if len(curve) != len(steps):
            raise ValueError(f"curve {name!r} has {len(curve)} values for {len(steps)} steps")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.5, 7.5))
    losses = torch.as_tensor(list(batch_losses), dtype=torch.float64)
    per_25 = losses[: len(losses) // 25 * 25].reshape(-1, 25).mean(1)
    ax1.plot((torch.arange(len(per_25)) * 25 + 13).tolist(), per_25.tolist(), color="0.6",
             label="training batches (mean of 25 steps)")
    late = [i for i, s in enumerate(steps) if s >= zoom_from]
    for (name, curve), style in zip(curves.items(), ("o-", "s--", "^:", "v-.")):
        ax1.plot(list(steps), list(curve), style, label=f"{name} (every window)")
        ax2.plot([steps[i] for i in late], [curve[i] for i in late], style, label=name)
    ax1.axhline(reference, color="0.4", ls="-.", label="unigram entropy $H_1$")
    ax1.set_yscale("log")
    ax1.set_yticks([1.5, 2, 3, 4, 5], labels=["1.5", "2", "3", "4", "5"])
    ax1.minorticks_off()
    ax1.set(xlabel="step", ylabel="nats per character (log)", ylim=(1.4, 6))
    ax1.legend(fontsize=9)
    ax2.set(xlabel="step", ylabel="nats per character", title=f"from step {zoom_from}, magnified")
    ax2.legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_generation_speed(lengths: Sequence[int], without: Sequence[float],
                          with_cache: Sequence[float]):
    """Chapter 14: tokens per second against the number of tokens generated, without and
    with the key/value cache, and below, the cache's speed-up. Returns the Figure (6.5 x 6.5
    inches, two panels)."""
    import matplotlib.pyplot as plt

    if not len(lengths) == len(without) == len(with_cache):
        raise ValueError(f"need one rate per length: {len(lengths)} lengths, "
                         f"{len(without)} and {len(with_cache)} rates")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.5, 6.5), sharex=True)
    ax1.plot(list(lengths), list(without), "o-", label="without cache")
    ax1.plot(list(lengths), list(with_cache), "s-", label="with cache")
    ax1.set(ylabel="tokens per second", title="generation speed", ylim=(0, None))
    ax1.legend()
    ax2.plot(list(lengths), [b / a for a, b in zip(without, with_cache)], "o-",
             color="#D55E00")
    ax2.set(xlabel="tokens generated", ylabel="speed-up (x)", title="cache speed-up",
            ylim=(0, None))
    fig.tight_layout()
    return fig
