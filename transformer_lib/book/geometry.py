"""Points in the plane: the convex hull of the "attention only re-averages" pictures (chapters 3
and 7) and one sinusoid pair's turn on the unit circle, alone or for several pairs (chapter 6)."""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .._checks import check_positive_int, check_tensor

__all__ = ["convex_hull", "draw_offset_turns", "plot_offset_turns"]


def convex_hull(points: torch.Tensor) -> torch.Tensor:
    """Corners of the convex hull of 2-D points, counter-clockwise (Andrew's monotone chain, 1979).

    points: (N, 2) with N >= 1. Returns (H, 2), H <= N: the corners only, without points that lie
    on an edge, starting at the lowest-leftmost point.
    """
    check_tensor("points", points, ndim=2)
    if points.shape[1] != 2 or points.shape[0] == 0:
        raise ValueError(f"points must have shape (N, 2) with N >= 1, got {tuple(points.shape)}")
    pts = sorted(set(map(tuple, points.tolist())))
    if len(pts) < 3:
        return torch.tensor(pts, dtype=points.dtype)

    def cross(o, a, b):          # > 0: o -> a -> b turns left
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and cross(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return torch.tensor(half(pts) + half(pts[::-1]), dtype=points.dtype)


def draw_offset_turns(ax, omega: float, starts: Sequence[int], offset: int, n_positions: int = 20,
                      colours: Sequence[str] = ("#E69F00", "#009E73"), limits=((-1.5, 1.5), (-1.5, 1.5)),
                      label_positions: Sequence[int] = ()):
    """One channel pair of the sinusoidal encoding as points (sin w.pos, cos w.pos) on the unit circle.

    Positions 0 .. n_positions - 1 are dots (position 0 at the top, advancing clockwise); the
    positions in `label_positions` get their number beside the dot. For each start p in
    `starts`, the turn from p to p + offset is drawn as a shaded wedge, a thick arc with an
    arrow head, and a label just outside the arc. `limits` ((x0, x1), (y0, y1)) can zoom in on
    a slow pair, whose turns are small. Returns the Axes.
    """
    from matplotlib.patches import Wedge

    def angle(p):
        return omega * p                        # clockwise from the top
    def xy(a, r=1.0):
        return (r * math.sin(a), r * math.cos(a))
    circle = [2 * math.pi * t / 200 for t in range(201)]
    ax.plot([math.sin(a) for a in circle], [math.cos(a) for a in circle], color="lightgrey", lw=1)
    ax.plot([math.sin(omega * p) for p in range(n_positions)], [math.cos(omega * p) for p in range(n_positions)],
            "o", ms=3.5, color="#0072B2", zorder=3)
    for start, colour in zip(starts, colours):
        a0, a1 = angle(start), angle(start + offset)
        # Wedge angles are counter-clockwise from the x axis: ours are clockwise from the y axis.
        ax.add_patch(Wedge((0, 0), 1.0, 90 - math.degrees(a1), 90 - math.degrees(a0), fc=colour, alpha=0.25, lw=0))
        arc = [xy(a0 + (a1 - a0) * t / 30, 1.08) for t in range(31)]
        xs, ys = zip(*arc)
        ax.plot(xs[:-1], ys[:-1], color=colour, lw=2.5)
        ax.annotate("", xy=arc[-1], xytext=arc[-2],
                    arrowprops=dict(arrowstyle="-|>,head_length=0.5,head_width=0.25", color=colour, lw=2.5))
        for p in (start, start + offset):
            ax.plot(*xy(angle(p)), "o", ms=7, mfc="none", mec=colour, mew=2, zorder=4)
        middle = (a0 + a1) / 2                           # the label sits just outside the arc's middle,
        ax.annotate(f"{start}→{start + offset}", xy=xy(middle, 1.08), color=colour, ha="center",
                    va="center", fontsize=10.5, fontweight="bold", textcoords="offset points",
                    xytext=(24 * math.sin(middle), 24 * math.cos(middle)))  # at any zoom
    for p in label_positions:
        a = angle(p)
        ax.annotate(str(p), xy=xy(a), ha="center", va="center", fontsize=9, color="#333333",
                    textcoords="offset points", xytext=(-11 * math.sin(a), -11 * math.cos(a)))
    ax.set(aspect="equal", xlim=limits[0], ylim=limits[1])
    return ax


def plot_offset_turns(d_model: int, pairs: Sequence[int], starts: Sequence[int], offset: int,
                      n_positions: int = 20, limits=None, label_positions=None, figsize=(8.4, 4.6)):
    """`draw_offset_turns` for several channel pairs of the sinusoidal encoding side by side
    (chapter 6), pair i at its frequency 10000^(-2i/d_model), each panel titled with that
    frequency and its axes named by the pair's two channels.

    limits: one ((x0, x1), (y0, y1)) per pair, or None for the whole circle; a panel whose
    limits are not the whole circle is titled "zoomed in". label_positions: one sequence of
    positions to number per pair (all positions by default). Returns the Figure.
    """
    import matplotlib.pyplot as plt

    check_positive_int("d_model", d_model)
    whole = ((-1.5, 1.5), (-1.5, 1.5))
    limits = list(limits) if limits is not None else [whole] * len(pairs)
    label_positions = (list(label_positions) if label_positions is not None
                       else [range(n_positions)] * len(pairs))
    if not pairs or len(limits) != len(pairs) or len(label_positions) != len(pairs):
        raise ValueError(f"give one limits and one label_positions entry per pair ({len(pairs)}), got "
                         f"{len(limits)} and {len(label_positions)}")
    for i in pairs:
        if not 0 <= i < d_model // 2:
            raise ValueError(f"pairs must lie in 0 .. d_model/2 - 1 = {d_model // 2 - 1}, got {i}")
    fig, axes = plt.subplots(1, len(pairs), figsize=figsize, squeeze=False)
    for ax, i, lim, labels in zip(axes[0], pairs, limits, label_positions):
        omega = 1 / 10000 ** (2 * i / d_model)
        draw_offset_turns(ax, omega, starts=starts, offset=offset, n_positions=n_positions,
                          limits=lim, label_positions=labels)
        zoom = " (zoomed in)" if tuple(map(tuple, lim)) != whole else ""
        ax.set(title=f"pair {i}: $\\omega$ = {omega:.3f} per step" + zoom,
               xlabel=f"channel {2 * i}: sin($\\omega\\, pos$)",
               ylabel=f"channel {2 * i + 1}: cos($\\omega\\, pos$)")
    shown = " and ".join(str(p) for p in starts)
    fig.suptitle(f"positions 0 to {n_positions - 1}; shaded: the turn for the offset k = {offset} "
                 f"from positions {shown}")
    fig.tight_layout()
    return fig
