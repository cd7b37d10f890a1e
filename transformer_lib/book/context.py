"""Chapter 16's context extension: a rotary model trained on short windows, read at longer ones.

A `CausalLM` with rotary positions turns channel pair i of each query and key by m theta_i at
position m (`positional.RotaryEmbedding`). Trained on windows of `trained_length` tokens, a pair
whose angle never completes a turn in training meets angles past the trained length that it has
never seen. Position interpolation, NTK-aware scaling and YaRN change the frequencies (and YaRN
the logits' temperature) so that longer windows stay inside, or nearer, the trained angles;
none adds a weight, so the trained state dict loads into the stretched model.

- `METHODS`: the four ways compared (plain RoPE and the three extensions);
- `stretched`: a trained model rebuilt with one method for a factor s = new length / trained;
- `window_loss`: held-out loss over every window of a given length;
- `fine_tune`: a few steps at the longer length, on a copy;
- `seen_angles`, `plot_pair_angles`: which angles each pair met in training, and the figure of
  each pair's angle over positions under each method.

`benchmarks/context.py` runs the study over seeds with these functions.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import torch
import torch.nn.functional as F

from ..lm import CausalLM, lm_evaluate, lm_loss, random_windows
from ..positional import RotaryEmbedding
from ..runtime import eval_mode
from ..training import TrainConfig, train

__all__ = ["METHODS", "stretched", "windows", "window_loss", "fine_tune", "seen_angles", "plot_pair_angles"]

#: label: the `rope_scaling` of `lm.CausalLMConfig` (None: plain RoPE, read as trained).
METHODS = {"plain RoPE": None, "position interpolation": "pi", "NTK-aware": "ntk", "YaRN": "yarn"}


def stretched(model: CausalLM, scaling: str | None, factor: float, trained_length: int) -> CausalLM:
    """A copy of the rotary `model` whose positions are stretched by `scaling` ("pi", "ntk",
    "yarn" or None) for `factor` s = new length / `trained_length`: the same weights (the
    scaling changes frequencies only), in eval mode. With None (or s = 1) it reads positions as
    trained."""
    if not isinstance(model, CausalLM) or model.config.positions != "rope":
        raise ValueError("model: expected a CausalLM with positions='rope' (context extension stretches "
                         "rotary positions)")
    if scaling is None or factor == 1:
        config = dataclasses.replace(model.config, rope_scaling=None, rope_factor=1.0, rope_trained_length=None)
    else:
        config = dataclasses.replace(model.config, rope_scaling=scaling, rope_factor=float(factor),
                                     rope_trained_length=trained_length if scaling == "yarn" else None)
    out = CausalLM(config).to(next(model.parameters()).device)
    out.load_state_dict(model.state_dict())
    return out.eval()


def windows(ids: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every consecutive, non-overlapping window of `length` tokens of the 1-D `ids` and its
    targets (the next tokens): (n, length) each, n = (len(ids) - 1) // length."""
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D tensor of token ids, got shape {tuple(ids.shape)}")
    n = (len(ids) - 1) // length
    if n < 1:
        raise ValueError(f"length={length}: ids has {len(ids)} tokens, too few for one window and its targets")
    return ids[: n * length].view(n, length), ids[1: n * length + 1].view(n, length)


@torch.no_grad()
def window_loss(model: CausalLM, ids: torch.Tensor, length: int) -> float:
    """Mean next-token cross-entropy (nats per token) over every position of every window of
    `length` tokens of `ids` (`windows`): the held-out loss of a model that reads `length`
    tokens at a time."""
    x, y = windows(ids, length)
    with eval_mode(model):
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()


def fine_tune(model: CausalLM, train_ids: torch.Tensor, length: int, steps: int, seed: int,
              lr: float = 1e-3, batch: int = 16) -> CausalLM:
    """A copy of `model` trained `steps` more steps on `batch` random windows of `length` tokens
    of `train_ids` (`lm.random_windows` with `seed`), Adam at a constant `lr`, clipping 1: the
    short training at the longer length that position interpolation and YaRN are meant to be
    followed by (NTK-aware scaling was proposed to work without it)."""
    tuned = copy.deepcopy(model)
    cfg = TrainConfig(max_steps=steps, schedule="constant", lr=lr, label_smoothing=0.0, progress=False)
    train(tuned, random_windows(train_ids, batch, length, steps, seed=seed), None, cfg,
          loss_fn=lm_loss, eval_fn=lm_evaluate)
    return tuned.eval()


def seen_angles(rotary: RotaryEmbedding, trained_length: int) -> torch.Tensor:
    """Per pair, the largest angle (radians) training showed it: (trained_length - 1) theta_i of
    the plain frequencies, or infinity for a pair that completed a turn (it has met every angle):
    (d_k / 2,) float64."""
    theta = RotaryEmbedding(rotary.d_k, rotary.base).frequencies()
    largest = (trained_length - 1) * theta
    return torch.where(largest >= 2 * math.pi, torch.full_like(largest, math.inf), largest)


def plot_pair_angles(d_k: int, trained_length: int, factor: float, base: float = 10000.0):
    """One panel per method of `METHODS`: the angle (in turns, log scale) of each of the d_k / 2
    rotary pairs at positions 0 .. factor * trained_length - 1, solid where training showed the
    pair that angle and dotted where it did not; in the plain panel a dot marks each pair's
    largest trained angle, at the last trained position.
    Returns the figure."""
    import matplotlib.pyplot as plt

    length = int(factor * trained_length)
    positions = torch.arange(1, length, dtype=torch.float64)
    plain = RotaryEmbedding(d_k, base)
    seen = seen_angles(plain, trained_length)
    colours = plt.get_cmap("viridis")(torch.linspace(0, 0.9, d_k // 2).tolist())
    fig, axes = plt.subplots(1, len(METHODS), figsize=(10.5, 3.8), sharey=True)
    for ax, (label, scaling) in zip(axes, METHODS.items()):
        rotary = (plain if scaling is None else
                  RotaryEmbedding(d_k, base, scaling, factor, trained_length if scaling == "yarn" else None))
        angle = positions[:, None] * rotary.frequencies()  # (positions, d_k / 2)
        for i in range(d_k // 2):
            turns = angle[:, i] / (2 * math.pi)
            inside = angle[:, i] <= seen[i] * (1 + 1e-9)
            ax.plot(positions[inside], turns[inside], color=colours[i], lw=1.6,
                    label=f"pair {i}" if ax is axes[0] else None)
            ax.plot(positions[~inside], turns[~inside], color=colours[i], lw=1.6, ls=":")
            if math.isfinite(seen[i]) and scaling is None:  # where training stopped
                ax.plot([trained_length - 1], [seen[i] / (2 * math.pi)], "o", color=colours[i], ms=4)
        ax.axvline(trained_length - 1, color="0.5", lw=1)
        ax.axhline(1, color="0.3", lw=0.8, ls="--", label="one full turn" if ax is axes[0] else None)
        ax.set_yscale("log")
        ax.set_ylim(1e-4, 100)
        ax.set_title(label if scaling is None else f"{label}, s = {factor:g}", fontsize=10)
        ax.set_xlabel("position m")
    axes[0].set_ylabel("angle m θ′ᵢ (turns)")
    axes[-1].legend(*axes[0].get_legend_handles_labels(), fontsize=9, loc="upper left",
                    bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"each rotary pair's angle (d_k = {d_k}); solid: angles met in training "
                 f"(positions 0 to {trained_length - 1}), dotted: never met", fontsize=10)
    fig.tight_layout()
    return fig
