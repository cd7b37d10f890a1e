"""Chapter 6's figures of the sinusoidal encoding: the table in its two layouts (the paper's
halves apart, or sine and cosine interleaved), the table itself as a heat map, and the dot
product of two positions' encodings against their offset."""
from __future__ import annotations

import matplotlib as mpl
import numpy as np

from .._checks import as_numpy
from .viz import SEQUENTIAL_CMAP

__all__ = ["plot_encoding_layouts", "plot_positional_table", "plot_offset_dot_products"]

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


# --- Chapter 2: vector similarities ------------------------------------------------------------


def plot_positional_table(table, title: str | None = None, xlabel: str = "channel (even: sin, odd: cos)",
                          figsize=(9, 4.5)):
    """A positional-encoding table as a heat map, positions down and channels across, on the
    fixed scale -1 to 1 with a colour bar. Returns the Figure."""
    import matplotlib.pyplot as plt

    t = as_numpy("table", table, lists=True)
    if t.ndim != 2:
        raise ValueError(f"table must be 2-D (n_positions, d_model), got shape {t.shape}")
    fig, ax = plt.subplots(figsize=figsize)
    im = ax.imshow(t, cmap=SEQUENTIAL_CMAP, aspect="auto", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel=xlabel, ylabel="position", title=title)
    fig.colorbar(im, ax=ax, label="value")
    fig.tight_layout()
    return fig


def plot_offset_dot_products(gram, offsets, by_offset, figsize=(8.6, 3.6)):
    """Dot products of position vectors two ways: left, the (n, n) matrix of p_p . p_q as a
    heat map; right, the same function against the offset k = q - p as a curve.

    gram: (n, n). offsets, by_offset: the curve's x and y values, of equal length. Returns
    the Figure."""
    import matplotlib.pyplot as plt

    g = as_numpy("gram", gram, lists=True)
    k, f = as_numpy("offsets", offsets, lists=True), as_numpy("by_offset", by_offset, lists=True)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"gram must be a square (n, n) matrix, got shape {g.shape}")
    if k.ndim != 1 or k.shape != f.shape:
        raise ValueError(f"offsets and by_offset must be 1-D of equal length, got {k.shape} and {f.shape}")
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=figsize)
    im = ax_l.imshow(g, cmap=SEQUENTIAL_CMAP, interpolation="nearest")
    ax_l.set(xlabel="position q", ylabel="position p", title=f"$p_p \\cdot p_q$ for {len(g)} positions")
    fig.colorbar(im, ax=ax_l, label="dot product")
    ax_r.plot(k, f, color="#0072B2")
    ax_r.set(xlabel="offset k = q - p", ylabel="$p_p \\cdot p_{p+k}$", title="the same numbers, by offset")
    fig.tight_layout()
    return fig
