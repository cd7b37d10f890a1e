"""The book's training recipes: the date Transformer's (chapter 11, the shipped checkpoint) and
the recurrent checkpoints' (Part I), as settings for the one loop, `training.train`."""
from __future__ import annotations

from ._checks import check_positive_int
from .training import TrainConfig

__all__ = ["DATE_MODEL", "DATE_RECIPE", "evenly_spaced", "recipe_config", "rnn_config"]

#: The date model and the recipe it is trained with: chapter 11 runs it live and
#: scripts/train_transformer.py makes the shipped checkpoint with it, both through `training.train`
#: with the hook `training.AverageAndStop`. benchmarks/recipe.py is the study that chose it
#: (benchmarks/RESULTS.md): every `eval_every` steps a snapshot of the weights; the average of the
#: last `average` snapshots is scored (greedy exact match, `training.evaluate`) on `eval_size`
#: validation dates spread over the calendar (`evenly_spaced`); when it reaches `target`, the other
#: validation dates must reach `confirm`, and the run stops, with the averaged weights; else it
#: ends at `max_steps`, with the average of the last snapshots. The cap bounds the live run's time:
#: the shipped run's record and chapter 11's stored run took 45 and 40 ms a step (two threads,
#: evaluations included), so 1,500 steps is 60-67 s there. Every run of the studies had stopped by
#: the rule by then, one at exactly 1,500 (at 1,100-1,500 steps over the CPU sweep's 10 runs,
#: 1,200-1,500 in the GPU study), and in the GPU study the average of the last 5 was above 99% on
#: the test dates at 1,500 steps in every seed.
DATE_MODEL = dict(d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0, max_len=128)
DATE_RECIPE = dict(batch_size=64, peak_lr=3e-3, warmup=300, label_smoothing=0.1, clip_norm=1.0,
                   eval_every=100, eval_size=1000, average=5, target=0.996, confirm=0.995, max_steps=1500)


def evenly_spaced(items: list, n: int) -> list:
    """`n` items spread evenly over `items` (all of them if there are fewer). The date splits
    are sorted by calendar date, so the first n would hold only the earliest years: a check on
    them says little about the rest of the century."""
    check_positive_int("n", n)
    if n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


def recipe_config(recipe: dict | None = None, **overrides) -> TrainConfig:
    """The `TrainConfig` of a recipe such as `DATE_RECIPE` (by default); keyword arguments
    override TrainConfig fields. The recipe's `peak_lr` stays the peak of equation (3)
    whatever the model's width and whatever `warmup` is overridden to: `train` derives the
    factor from the model it trains (`schedules.factor_for_peak`). The recipe's stopping rule
    judges averaged weights, so it is not `target_accuracy` (which would stop on the raw
    weights) but the hook `training.AverageAndStop`."""
    r = {**DATE_RECIPE, **(recipe or {})}
    kw = dict(max_steps=r["max_steps"], warmup=r["warmup"], peak_lr=r["peak_lr"],
              label_smoothing=r["label_smoothing"], clip_norm=r["clip_norm"], eval_every=r["eval_every"],
              progress=False)
    return TrainConfig(**{**kw, **overrides})


def rnn_config(**overrides) -> TrainConfig:
    """The recipe of the recurrent checkpoints (Part I): Adam with PyTorch's default betas and
    epsilon, lr 1e-3 for half the steps then decaying linearly to 0, plain cross-entropy,
    clipping at 1.0. Keyword arguments override TrainConfig fields."""
    kw = dict(schedule="linear_decay", lr=1e-3, betas=(0.9, 0.999), adam_eps=1e-8, label_smoothing=0.0,
              clip_norm=1.0, progress=False)
    return TrainConfig(**{**kw, **overrides})
