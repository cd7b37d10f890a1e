"""The book's teaching aids: what the chapters need and a reader who lifts the model code out
does not. Everything here imports the library (`transformer_lib`); nothing in the library
imports this package.

- `setup`: the one call of every chapter's setup cell (seeds, threads, device, figure style)
- `viz`: plotting defaults and heat maps (attention weights, matrices, similarities);
  `plot_attention` draws one attention map
- `shapes`: pictures of tensors as blocks of their shapes (chapters 3-5)
- `diagrams`: the model map ("you are here") and box-and-arrow figures
- `positions`: chapter 6's figures of the sinusoidal encoding
- `pictures`: the opening pictures of chapters 1-6, drawn with `diagrams`' boxes and arrows
- `geometry`: points in the plane (a convex hull; a sinusoid pair's turn on the circle)
- `norm_study`: chapter 7's post-norm/pre-norm training experiment
- `parallel_layouts`: chapter 17's picture of who holds what under each kind of parallelism
- `explorer`: `AttentionExplorer`, the interactive attention-map widget (imported on first
  use: it needs anywidget); `explorer_state` writes and reads its saved state
- `bughunt`: planted bugs and the checks that catch them (chapter 15)
- `char_lm`: chapter 14's character model (its texts, its recipe, the run the book ships)
- `costs`: figures of the cost chapters (what each kind of attention holds, growth curves)
- `claims`: `claim`, a measured value held against the bound the prose rests on (run-dependent
  cells assert through it; `benchmarks/sweep_claims.py` measures the bounds over seeds)
- `exercises`: the checks of the chapters' exercises, one module per chapter, each tested
- `training_figures`: chapter 11's figures (the training loop, the stopping rule, the live run)
- `context`: chapter 16's context extension (rotary models read past their trained length:
  position interpolation, NTK-aware scaling, YaRN) and its figure
- `induction`: chapter 18's tools (repeated sequences, per-head scores, ablation) and recipe;
  `induction_figures` its figures (re-exported by `induction`)
- `qk_figures`: chapter 16's QK-norm figure (the largest logit and the loss, step by step)
- `sinks`: attention sinks (chapter 16): the weight on the first positions, and the loss of a
  streaming window that keeps the first tokens or not (Xiao et al. 2023)
"""
from .setup import setup
from .claims import claim, seed
from .viz import plot_attention
from . import (bughunt, char_lm, claims, context, costs, diagrams, exercises, geometry, induction,  # noqa: E402
               norm_study, parallel_layouts, pictures, positions, qk_figures, shapes, sinks, training_figures,
               viz)

__all__ = ["setup", "claim", "seed", "plot_attention", "AttentionExplorer", "bughunt", "char_lm", "claims", "context",
           "costs", "diagrams", "exercises", "geometry", "induction", "norm_study", "parallel_layouts", "pictures",
           "positions", "qk_figures", "shapes", "sinks", "training_figures", "viz"]


def __getattr__(name: str):
    # The explorer needs anywidget and ipywidgets: import them only when it is first used.
    if name == "AttentionExplorer":
        from .explorer import AttentionExplorer

        return AttentionExplorer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
