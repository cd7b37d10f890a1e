"""Asides of chapters 3 and 6-8: helpers whose code is not the chapter's subject.

A chapter calls these where pasting them would bury its story: a convex-hull routine for the
"attention only re-averages" pictures of chapters 3 and 7, the small post-norm/pre-norm
training run of chapter 7 (through the book's one loop, `training.train`), the
offset-as-a-turn panels of chapter 6 and the mask grid of chapter 8.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import as_numpy, check_non_negative_int, check_positive_int, check_tensor
from ..layers import Encoder
from ..model import Embeddings, init_weights
from ..training import TrainConfig, train


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


def running_mean(values: Sequence[float], k: int = 10) -> list[float]:
    """Mean of the last `k` values at every index (fewer at the start): a smoothed loss curve."""
    check_positive_int("k", k)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= k:
            total -= values[i - k]
        out.append(total / min(i + 1, k))
    return out


# ----- chapter 7: the reversal task for post-norm versus pre-norm -----

def reverse_batch(generator: torch.Generator, batch_size: int = 32, seq_len: int = 8, n_symbols: int = 8):
    """A batch of random symbol sequences and their reversals: x, y of shape (batch_size, seq_len)."""
    x = torch.randint(0, n_symbols, (batch_size, seq_len), generator=generator, device=generator.device)
    return x, x.flip(1)


class ReverseTagger(nn.Module):
    """`Embeddings` (times sqrt(d_model), sinusoidal positions) -> `tl.Encoder` -> a linear read-out.

    ids (B, T) -> logits (B, T, n_symbols). No dropout; every matrix Xavier-uniform.
    """

    def __init__(self, n_layers: int, norm_first: bool, d_model: int = 32, n_heads: int = 4, d_ff: int = 64,
                 seq_len: int = 8, n_symbols: int = 8):
        super().__init__()
        self.embed = Embeddings(n_symbols, d_model, max_len=seq_len)
        self.encoder = Encoder(d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, dropout=0.0,
                               norm_first=norm_first)
        self.read_out = nn.Linear(d_model, n_symbols)
        init_weights(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.read_out(self.encoder(self.embed(ids)))


def tagging_loss(model: nn.Module, batch, cfg: TrainConfig) -> torch.Tensor:
    """Cross-entropy of a tagger's logits (B, T, n) against the tags y (B, T) of a batch (x, y):
    the `loss_fn` of `training.train` for the reversal task."""
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def train_reverse(n_layers: int, norm_first: bool, warmup: int, steps: int = 200, lr: float = 1e-2,
                  seed: int = 0) -> list[float]:
    """Train a `ReverseTagger` to reverse 8 symbols out of 8; return the loss of every step.

    The book's one loop, `training.train`, with Adam (betas 0.9, 0.98 as in Vaswani et al.
    2017, section 5.3; PyTorch's epsilon 1e-8), learning rate `lr` ramped up linearly over the
    first `warmup` steps (0: no warm-up), no clipping, and `steps` batches of 32 drawn from a
    generator seeded with 1, so every run sees the same batches. Chance level is ln 8 = 2.079.
    """
    check_positive_int("steps", steps)
    check_non_negative_int("warmup", warmup)
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(1)
    batches = [reverse_batch(data) for _ in range(steps)]
    model = ReverseTagger(n_layers, norm_first)
    cfg = TrainConfig(max_steps=steps, schedule="linear_warmup" if warmup else "constant", warmup=max(warmup, 1),
                      lr=lr, betas=(0.9, 0.98), adam_eps=1e-8, clip_norm=None, progress=False)
    return train(model, batches, cfg=cfg, loss_fn=tagging_loss).loss


# ----- figures -----

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
