"""Points in the plane: the convex hull of the "attention only re-averages" pictures (chapters 3
and 7) and one sinusoid pair's turn on the unit circle (chapter 6)."""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .._checks import check_tensor

__all__ = ["convex_hull", "draw_offset_turns"]


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
                      colours: Sequence[str] = ("#E69F00", "#009E73"), limits=((-1.5, 1.5), (-1.5, 1.5))):
    """One channel pair of the sinusoidal encoding as points (sin w.pos, cos w.pos) on the unit circle.

    Positions 0 .. n_positions - 1 are dots (position 0 at the top, advancing clockwise). For each
    start p in `starts`, the turn from p to p + offset is drawn as a shaded wedge, a thick arc with an
    arrow head, and a label outside the circle. `limits` ((x0, x1), (y0, y1)) can zoom in on a slow
    pair, whose turns are small. Returns the Axes.
    """
    from matplotlib.patches import Wedge

    angle = lambda p: omega * p                        # clockwise from the top
    xy = lambda a, r=1.0: (r * math.sin(a), r * math.cos(a))
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
        lx, ly = xy((a0 + a1) / 2, 1.3)
        ax.text(lx, ly, f"{start}→{start + offset}", color=colour, ha="center", va="center", fontsize=10,
                fontweight="bold")
    ax.set(aspect="equal", xlim=limits[0], ylim=limits[1])
    return ax
