"""The figures of chapter 11 (training): the training loop as a cycle, the stopping rule of the
live run as a flow chart, and the live run itself (its loss, and its quick check evaluation by
evaluation, the raw weights against the average of the last snapshots).

Every figure is at most 6.5 inches wide with text of at least 9 points, so that it stays
readable on a 1280-pixel page.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

from .diagrams import COLOURS, arrow, box

__all__ = ["training_loop", "stopping_rule", "live_run"]

RAW, AVERAGED, TARGET = "#E69F00", "#0072B2", "#D55E00"


def training_loop(ax=None):
    """One training step as four boxes on a cycle: the batch, the model reading source and
    target offset by one, the label-smoothed loss, the clipped gradients and Adam's step at
    the scheduled learning rate; then the next batch."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.0))
    stations = [
        (0.0, 1.0, "1. a batch of pairs\n(source, target)", COLOURS["io"]),
        (4.6, 1.0, "2. the Transformer reads\nthe source and the target\noffset by one", COLOURS["attention"]),
        (4.6, -1.0, "3. label-smoothed loss\nagainst the target", COLOURS["cross"]),
        (0.0, -1.0, "4. gradients, clipped;\nAdam step at lrate(step)", COLOURS["ffn"]),
    ]
    for x, y, text, colour in stations:
        box(ax, x, y, text, colour, width=2.9, height=1.05, fontsize=9.5,
            text_colour="white" if colour in (COLOURS["cross"],) else "black")
    arrow(ax, [(1.45, 1.0), (3.15, 1.0)])
    arrow(ax, [(4.6, 0.47), (4.6, -0.47)])
    arrow(ax, [(3.15, -1.0), (1.45, -1.0)])
    arrow(ax, [(0.0, -0.47), (0.0, 0.47)])
    ax.text(2.3, 0.0, "repeat, batch\nafter batch", ha="center", va="center", fontsize=9.5)
    ax.set(xlim=(-1.55, 6.15), ylim=(-1.65, 1.65))
    ax.axis("off")
    ax.figure.tight_layout()
    return ax


def stopping_rule(every: int, keep: int, quick: int, target: float, others: int, confirm: float,
                  cap: int, ax=None):
    """The live run's stopping rule as a flow chart: every `every` steps a snapshot; the average
    of the last `keep` judged on `quick` dates against `target`; if it passes, on the `others`
    dates against `confirm`; stop with the average, or train on (to `cap` steps at most)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.4))
    w, h = 2.05, 0.95
    box(ax, 0.0, 1.3, f"every {every} steps:\nsnapshot of the weights,\naverage of the last {keep}",
        COLOURS["io"], width=w + 0.25, height=h)
    box(ax, 2.9, 1.3, f"average right on\n≥ {100 * target:g}% of {quick:,}\nquick-check dates?",
        COLOURS["attention"], width=w, height=h)
    box(ax, 5.7, 1.3, f"and on ≥ {100 * confirm:g}%\nof the other\n{others:,} dates?",
        COLOURS["attention"], width=w, height=h)
    box(ax, 5.7, -0.6, "stop: the average\nis the model", COLOURS["norm"], width=w, height=0.75)
    box(ax, 1.45, -0.6, f"train on\n(at most {cap:,} steps)", COLOURS["ffn"], width=w + 0.2, height=0.75)
    arrow(ax, [(1.14, 1.3), (1.86, 1.3)])
    arrow(ax, [(3.93, 1.3), (4.66, 1.3)])
    ax.text(4.3, 1.45, "yes", ha="center", fontsize=9.5)
    arrow(ax, [(5.7, 0.82), (5.7, -0.22)])
    ax.text(5.85, 0.3, "yes", ha="left", fontsize=9.5)
    arrow(ax, [(2.9, 0.82), (2.9, -0.6), (2.56, -0.6)])
    ax.text(3.0, 0.1, "no", ha="left", fontsize=9.5)
    arrow(ax, [(5.2, 0.82), (5.2, 0.2), (3.35, 0.2), (3.35, -0.6), (2.56, -0.6)])
    ax.text(4.3, 0.32, "no", ha="center", fontsize=9.5)
    arrow(ax, [(0.34, -0.6), (0.0, -0.6), (0.0, 0.82)])
    ax.set(xlim=(-1.3, 6.85), ylim=(-1.1, 1.9))
    ax.axis("off")
    ax.figure.tight_layout()
    return ax


def live_run(steps: Sequence[int], losses: Sequence[float], eval_steps: Sequence[int], raw: Sequence[float],
             averaged: Sequence[float], floor: float, target: float, keep: int, lowest: float = 90.0):
    """Two panels: the training loss at every step (log axis) with the smoothed target's
    entropy, its floor; and the quick check at every evaluation, the raw weights against the
    average of the last `keep` snapshots, in percent, from `lowest` up (earlier evaluations lie
    below the axis)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.5, 3.0))
    left.plot(steps, losses, lw=0.6, color=AVERAGED)
    left.axhline(floor, color=TARGET, ls="--", lw=1.2, label="floor: H(q)")
    left.set(xlabel="training step", ylabel="label-smoothed loss", yscale="log")
    left.yaxis.set_major_formatter(ScalarFormatter())
    left.yaxis.set_minor_formatter(NullFormatter())
    left.set_yticks([0.5, 1, 2, 3])
    left.set_title("training loss", fontsize=10)
    left.legend(fontsize=9)
    right.plot(eval_steps, [100 * a for a in raw], "o-", ms=3.5, lw=1, color=RAW, label="raw weights")
    right.plot(eval_steps, [100 * a for a in averaged], "s-", ms=3.5, lw=1.4, color=AVERAGED,
               label=f"average of last {keep}")
    right.axhline(100 * target, color=TARGET, ls="--", lw=1.2, label="target")
    shown = [s for s, a, b in zip(eval_steps, raw, averaged) if 100 * max(a, b) >= lowest]
    start = max([s for s in eval_steps if shown and s < shown[0]] or [eval_steps[0]])
    right.set(xlabel="training step", ylabel="quick check, exact match (%)", ylim=(lowest, 100.4),
              xlim=(start, eval_steps[-1] + (eval_steps[-1] - start) * 0.04))
    right.set_title("evaluation by evaluation", fontsize=10)
    right.legend(fontsize=9, loc="lower right")
    for ax in (left, right):
        ax.tick_params(labelsize=9)
        ax.xaxis.label.set_size(9.5)
        ax.yaxis.label.set_size(9.5)
    fig.tight_layout()
    return fig
