"""Chapter 18's figures: the induction circuit, the phase change, every head's scores (with
`phase_change_step`, the step the figure marks). `book.induction` re-exports all four."""
from __future__ import annotations

import torch

__all__ = ["draw_circuit", "phase_change_step", "plot_phase_change", "plot_scores"]


def draw_circuit(ax=None):
    """The induction circuit on "... A B ... A": in layer 0 a previous-token head copies A into
    the position of B; in layer 1, at the second A, the induction head's query (A) matches the
    key of the position after A, and the head copies B to the output. Returns the Axes."""
    import matplotlib.pyplot as plt

    from .diagrams import COLOURS, box

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.0))
    tokens = ["x", "A", "B", "y", "z", "A", "?"]
    previous, induction = "#0072B2", "#D55E00"  # Okabe-Ito blue and vermillion
    for i, t in enumerate(tokens):
        colour = "#FFFFFF" if t == "?" else COLOURS["io"]
        box(ax, i, 0, t, colour, width=0.7, height=0.6, fontsize=12)
        ax.text(i, -0.5, str(i), ha="center", va="top", fontsize=9, color="#555555")
    ax.text(-0.6, -0.5, "position", ha="right", va="top", fontsize=9, color="#555555")
    ax.annotate("", xy=(1, 0.32), xytext=(2, 0.32), zorder=2, arrowprops=dict(
        arrowstyle="-|>", color=previous, lw=2, connectionstyle="arc3,rad=0.8"))
    ax.text(0.3, 0.85, "layer 0: a previous-token head\nwrites \"after A\" into B's position",
            ha="center", va="bottom", fontsize=9.5, color=previous)
    ax.annotate("", xy=(2.05, 0.32), xytext=(5, 0.32), zorder=2, arrowprops=dict(
        arrowstyle="-|>", color=induction, lw=2, connectionstyle="arc3,rad=0.45"))
    ax.text(4.6, 1.45, "layer 1: the induction head at the second A\nits query (A) matches the key "
            "\"after A\":\nit attends to B and copies it", ha="center", va="bottom", fontsize=9.5,
            color=induction)
    ax.annotate("", xy=(5.75, -0.95), xytext=(5, -0.3), zorder=2,
                arrowprops=dict(arrowstyle="-|>", color=induction, lw=2))
    ax.text(5.8, -1.0, "output at position 5:\nthe next token is B", ha="left", va="top", fontsize=9.5,
            color=induction, weight="bold")
    ax.set_xlim(-1.4, 7.6)
    ax.set_ylim(-1.7, 2.5)
    ax.axis("off")
    return ax


def phase_change_step(curve: dict) -> int | None:
    """The first evaluation step at which the repeated half's loss is below half the first
    half's (`curve` holds lists "step", "first" and "repeat"), or None if it never is."""
    return next((s for s, f, r in zip(curve["step"], curve["first"], curve["repeat"]) if r < f / 2), None)


def plot_phase_change(curves: dict[str, dict], chance: float):
    """Two panels against training steps: the loss on the first and on the repeated half of the
    test sequences for each model in `curves` (name -> curve with lists "step", "first",
    "repeat" and "icl"), with `chance` (ln of the alphabet's size) as a dotted line; and each
    model's in-context score. A dashed line marks each model's phase change. Returns the Figure."""
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    colours = ["#D55E00", "#0072B2", "#009E73"]
    for (name, curve), colour in zip(curves.items(), colours):
        top.plot(curve["step"], curve["first"], color=colour, lw=1.4, ls=(0, (4, 2)),
                 label=f"{name}: first half")
        top.plot(curve["step"], curve["repeat"], color=colour, lw=2.2, label=f"{name}: repeated half")
        bottom.plot(curve["step"], curve["icl"], color=colour, lw=2, label=name)
        step = phase_change_step(curve)
        if step is not None:
            for ax in (top, bottom):
                ax.axvline(step, color=colour, lw=1, ls="--", alpha=0.8)
            top.text(step, chance * 1.2, f" step {step:,}", color=colour, fontsize=9, va="center")
    top.axhline(chance, color="#555555", lw=1, ls=":")
    top.set_ylabel("loss (nats per token)")
    top.set_ylim(0, chance * 1.3)
    top.legend(fontsize=8.5, loc="lower left", frameon=False)
    bottom.set_ylabel("in-context score\n(late loss - early loss)")
    bottom.set_xlabel("training step")
    bottom.legend(fontsize=8.5, loc="lower left", frameon=False)
    fig.tight_layout()
    return fig


def plot_scores(scores: dict[str, list[list[float]]], title: str | None = None):
    """One heat map per kind of score (`scores`: kind -> one list of per-head scores per layer),
    layers down, heads across, each cell annotated. Returns the Figure."""
    import matplotlib.pyplot as plt

    kinds = list(scores)
    n_layers, n_heads = len(scores[kinds[0]]), len(scores[kinds[0]][0])
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.5, 0.9 + 0.75 * n_layers), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        values = torch.tensor(scores[kind], dtype=torch.float64)
        low = -1.0 if (values < 0).any() else 0.0
        ax.imshow(values.numpy(), cmap="viridis", vmin=low, vmax=1.0, aspect="auto")
        for (i, j), v in zip(((i, j) for i in range(n_layers) for j in range(n_heads)), values.flatten()):
            x = (float(v) - low) / (1.0 - low)
            ax.text(j, i, f"{float(v):.2f}", ha="center", va="center", fontsize=9.5,
                    color="black" if x > 0.55 else "white")
        ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)])
        ax.set_yticks(range(n_layers), [f"layer {i}" for i in range(n_layers)])
        ax.set_xlabel("head")
        ax.set_title(kind, fontsize=10)
    if title:
        fig.suptitle(title, fontsize=10.5)
    fig.tight_layout()
    return fig
