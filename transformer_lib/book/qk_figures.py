"""Chapter 16's QK-norm figure: the largest attention logit and the loss, step by step, of
blocks trained without and with QK-norm (`CausalLMConfig.qk_norm`)."""
from __future__ import annotations

__all__ = ["plot_logit_growth"]


def plot_logit_growth(runs: dict, bound: float, lr: float):
    """Two panels: left, each run's largest |q.k| / sqrt(d_k) per step (log scale) with a
    dotted line at `bound` (QK-norm's bound at its initial gains); right, each run's training
    loss per step. `runs`: {label: {"logits": per-step values, "train": per-step losses}},
    drawn in the order given; `lr`: the peak learning rate, for the title. Returns the figure."""
    import matplotlib.pyplot as plt

    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs: expected {label: {'logits': [...], 'train': [...]}}")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    colours = ("#D55E00", "#0072B2", "#009E73", "#CC79A7")
    for (name, run), colour in zip(runs.items(), colours):
        steps = range(1, len(run["logits"]) + 1)
        ax1.plot(steps, run["logits"], color=colour, label=name)
        ax2.plot(range(1, len(run["train"]) + 1), run["train"], color=colour, label=name)
    ax1.axhline(bound, color="0.5", ls=":", lw=1)
    ax1.text(len(steps), bound * 1.15, "bound at the initial gains", ha="right", fontsize=9, color="0.3")
    ax1.set(yscale="log", xlabel="training step", ylabel="largest |q·k| / √d_k", title="the largest attention logit")
    ax2.set(xlabel="training step", ylabel="training loss (nats per character)",
            title=f"the loss, peak learning rate {lr:g}")
    ax1.legend(fontsize=9)
    fig.tight_layout()
    return fig
